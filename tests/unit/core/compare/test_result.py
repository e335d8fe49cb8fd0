"""The comparison result (``core/compare/result.py``): what ``summary.json`` holds and reads back, the small summary
pushed to XCom (no info reasons, the warnings, the worst fields, the noisiest ones), and the fidelity figure
relative to the baselines' own agreement with its upper confidence bound."""

from __future__ import annotations

import math
from typing import Any

import pytest

from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.compare.result import (
    FAIL_CODES,
    INCONCLUSIVE_CODES,
    WARNING_CODES,
    ComparisonResult,
    Counts,
    FidelityStat,
    FieldStat,
    Reason,
)

Z = 1.6448536269514722  # one-sided 95 %


def field(path: str, noise_rate: float | None = None, candidate_rate: float = 0.0, **kw: Any) -> FieldStat:
    return FieldStat(
        path=path,
        comparator="exact",
        noise_rate=noise_rate,
        candidate_diffs=round(candidate_rate * 100),
        candidate_n=100,
        candidate_rate=candidate_rate,
        delta=candidate_rate - (noise_rate or 0.0),
        **kw,
    )


def result(**kw: Any) -> ComparisonResult:
    values: dict[str, Any] = {
        "verdict": "PASS",
        "mode": "noise_calibrated",
        "method": "Diffy's rule",
        "reasons": [],
        "fields": [],
        "counts": Counts(
            baseline=100,
            baseline_2=100,
            candidate=100,
            keys=100,
            aligned_candidate=100,
            aligned_noise=100,
            noise_pairs=1,
        ),
        "key": "$.id",
        "ignore": ["$._replay"],
        "config": CompareConfig(),
    }
    return ComparisonResult(**{**values, **kw})


def fidelity(**kw: Any) -> FidelityStat:
    values: dict[str, Any] = {
        "production": "kafka:out",
        "baseline_outputs": 100,
        "production_outputs": 100,
        "aligned": 100,
        "equal": 75,
        "rate": 0.75,
    }
    return FidelityStat(**{**values, **kw})


# --------------------------------------------------------------------------------------------- codes
def test_each_reason_code_decides_one_way() -> None:
    assert len(set(FAIL_CODES)) == len(FAIL_CODES) and len(set(INCONCLUSIVE_CODES)) == len(INCONCLUSIVE_CODES)
    assert not set(FAIL_CODES) & set(INCONCLUSIVE_CODES)
    assert not set(WARNING_CODES) & (set(FAIL_CODES) | set(INCONCLUSIVE_CODES))


# ------------------------------------------------------------------------------------------- summary
def test_the_summary_leaves_out_info_reasons_but_lists_the_warnings() -> None:
    reasons = [
        Reason(code="FIELD_REGRESSION", severity="fail", message="$.label changed", fields=["$.label"]),
        Reason(code="MISSING_WITHIN_NOISE", severity="info", message="as the baselines' own"),
        Reason(code="RULE_MATCHES_NOTHING", severity="info", message="rule $.lable matches no field"),
        Reason(code="NOT_SIGNIFICANT", severity="inconclusive", message="replay more records"),
    ]
    res = result(verdict="FAIL", reasons=reasons)
    summary = res.summary()
    assert [r["code"] for r in summary["reasons"]] == ["FIELD_REGRESSION", "NOT_SIGNIFICANT"]
    assert summary["reasons"][0] == {
        "code": "FIELD_REGRESSION",
        "severity": "fail",
        "message": "$.label changed",
        "fields": ["$.label"],
    }
    assert summary["warnings"] == res.warnings == ["rule $.lable matches no field"]
    assert summary["verdict"] == "FAIL" and not res.passed and result().passed


def test_the_summary_lists_the_five_worst_fields_in_their_order() -> None:
    fields = [field(f"$.f{i}", noise_rate=0.01 * i, candidate_rate=0.5 - 0.05 * i, status="ok") for i in range(7)]
    res = result(fields=fields)
    worst = res.summary()["worst_fields"]
    assert [w["path"] for w in worst] == ["$.f0", "$.f1", "$.f2", "$.f3", "$.f4"]
    assert worst[1] == {"path": "$.f1", "status": "ok", "noise_rate": 0.01, "candidate_rate": 0.45}
    assert res.worst_field is fields[0] and result().worst_field is None


def test_the_summary_carries_counts_noise_pairs_and_fidelity() -> None:
    plain = result().summary()
    assert plain["counts"]["aligned_candidate"] == 100 and plain["noise_pairs"] == 1
    assert (plain["fidelity"], plain["fidelity_self"], plain["noise"]) == (None, None, {})
    with_fidelity = result(fidelity=fidelity(self_rate=0.9)).summary()
    assert (with_fidelity["fidelity"], with_fidelity["fidelity_self"]) == (0.75, 0.9)


def test_noisiest_lists_fields_the_baselines_disagreed_on_noisiest_first() -> None:
    fields = [
        field("$.b", noise_rate=0.2),
        field("$.quiet", noise_rate=0.0),
        field("$.a", noise_rate=0.2),
        field("$.exact_mode", noise_rate=None),
        field("$.c", noise_rate=0.123456),
        field("$.d", noise_rate=0.3),
    ]
    res = result(fields=fields)
    assert res.noisiest() == {"$.d": 0.3, "$.a": 0.2, "$.b": 0.2, "$.c": 0.1235}  # ties by path, rounded
    assert res.noisiest(top=2) == {"$.d": 0.3, "$.a": 0.2}
    assert res.summary()["noise"] == res.noisiest()


def test_the_noise_spread_is_the_lowest_and_highest_pair_rate() -> None:
    assert field("$.a", noise_pair_rates=[0.1, 0.04, 0.2]).noise_spread == (0.04, 0.2)
    assert field("$.a").noise_spread is None and field("$.a", noise_pair_rates=[]).noise_spread is None


def test_a_result_reads_back_from_its_json() -> None:
    res = result(
        verdict="INCONCLUSIVE",
        reasons=[Reason(code="LOW_FIDELITY", severity="inconclusive", message="m")],
        fields=[field("$.label", noise_rate=0.01, candidate_rate=0.2, noise_pair_rates=[0.01])],
        fidelity=fidelity(self_rate=0.8, floor=0.9),
        config=CompareConfig(ignore=["$.ts"], text_threshold=0.7),
    )
    again = ComparisonResult.model_validate_json(res.model_dump_json())
    assert again == res and again.config.text_threshold == 0.7 and again.fidelity is not None


# ------------------------------------------------------------------------------------------ fidelity
def test_fidelity_relative_to_the_baselines_own_agreement() -> None:
    assert fidelity().relative == 0.75  # no second baseline: the rate itself
    assert fidelity(self_rate=0.9).relative == pytest.approx(0.75 / 0.9)
    assert fidelity(self_rate=0.6).relative == 1.0  # capped: the replay agrees with production as well as with itself
    assert fidelity(self_rate=0.0).relative == 1.0
    assert fidelity(self_rate=0.0, equal=0, rate=0.0).relative == 0.0
    assert fidelity(baseline_outputs=0, equal=0, rate=None, self_rate=0.5).relative is None


def wilson_upper(x: int, n: int, z: float) -> float:
    p = x / n
    return (p + z * z / (2 * n) + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)


def test_the_upper_bound_of_fidelity_is_wilsons_upper_bound_of_the_rate() -> None:
    stat = fidelity()
    upper = stat.relative_upper(Z)
    assert upper == pytest.approx(wilson_upper(75, 100, Z)) and 0.75 < upper < 0.83
    assert fidelity(self_rate=0.9).relative_upper(Z) == pytest.approx(wilson_upper(75, 100, Z) / 0.9)
    assert fidelity(self_rate=0.7).relative_upper(Z) == 1.0
    assert fidelity(self_rate=0.0).relative_upper(Z) == 1.0
    assert fidelity(baseline_outputs=0, equal=0, rate=None).relative_upper(Z) is None


def test_a_small_window_widens_the_bound() -> None:
    """75 % of 20 outputs could be 85 % by chance; 75 % of 10,000 could not."""
    small = fidelity(baseline_outputs=20, production_outputs=20, aligned=20, equal=15).relative_upper(Z)
    large = fidelity(baseline_outputs=10_000, production_outputs=10_000, aligned=10_000, equal=7_500).relative_upper(Z)
    assert small is not None and large is not None
    assert small > 0.85 and large < 0.76

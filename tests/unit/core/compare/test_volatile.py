"""Volatile fields: per-run values that differ in (almost) every baseline pair (issue 41, item 6).

Request ids, trace ids, hosts, latencies and timestamps are new in every run. They are reported as
volatile noise and left out of the verdict (and out of the outputs-level rate), instead of making every
verdict INCONCLUSIVE; a field noisy but not volatile still does, and a volatile field the candidate drops
or gives another JSON type is still a change.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.reports import render_html
from airflow_flink_replay.core.compare.synthetic import write_jsonl

N = 400
VOLATILE = ["$.request_id", "$.trace_id", "$.host", "$.timestamp"]


def run(variant: str, n: int = N, *, spread: int = 0, **change: Any) -> list[dict]:
    """One run's outputs: decision fields that depend only on the record, per-run metadata that never
    repeats. ``spread``: fields f0..f19 each changed in ``spread`` outputs (different outputs per field);
    ``drop``: a field left out; ``as_int``: a field written as a number."""
    rng = random.Random(variant)
    out = []
    for i in range(n):
        rec: dict[str, Any] = {
            "id": f"r-{i}",
            "decision": ("approve", "review", "reject")[i % 3],
            "amount": (i * 37) % 1000,
            "request_id": str(uuid.UUID(int=rng.getrandbits(128))),
            "trace_id": f"{rng.getrandbits(64):016x}",
            "host": f"{variant}-worker-{rng.randrange(10**6)}",
            "latency_ms": rng.randrange(40, 4000),
            "timestamp": f"2026-03-0{rng.randrange(1, 9)}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:"
            f"{rng.randrange(60):02d}.{rng.randrange(1000):03d}Z",
            "mood": "calm",
        }
        for f in range(20):
            rec[f"f{f}"] = "changed" if spread and f * spread <= i < (f + 1) * spread else "steady"
        if "drop" in change:
            rec.pop(change["drop"])
        if "as_int" in change:
            rec[change["as_int"]] = rng.getrandbits(40)
        out.append(rec)
    return out


def compare(tmp_path: Path, a: list, a2: list, b: list, **cfg: Any):
    pa, pa2, pb = (write_jsonl(tmp_path / f"{n}.jsonl", r) for n, r in (("a", a), ("a2", a2), ("b", b)))
    return compare_runs(pa, pb, pa2, key="$.id", config=CompareConfig(**cfg))


def by_path(result: Any) -> dict[str, Any]:
    return {f.path: f for f in result.fields}


def reason(result: Any, code: str) -> Any:
    return next((r for r in result.reasons if r.code == code), None)


def test_per_run_metadata_is_volatile_noise_and_passes(tmp_path: Path) -> None:
    result = compare(tmp_path, run("a"), run("a2"), run("b"))
    assert result.verdict == "PASS", result.reasons
    fields = by_path(result)
    volatile = [p for p, f in fields.items() if f.status == "volatile"]
    assert sorted(volatile) == sorted(VOLATILE)
    assert fields["$.latency_ms"].status == "ok"  # a number: judged by size, within the band it learned
    for p in volatile:
        assert fields[p].volatile_rate == 1.0
        assert fields[p].candidate_diffs == 0 and fields[p].noise_diffs == 0  # presence and type never changed
    info = reason(result, "VOLATILE_FIELDS")
    assert info is not None and info.severity == "info" and sorted(info.fields) == sorted(volatile)
    assert "$.request_id 100% (400/400)" in info.message
    # the outputs-level rate leaves them out: no output differs otherwise (but for a latency beyond its band)
    assert "volatile" in result.outputs.comparator and result.outputs.status == "ok"
    assert (result.outputs.noise_rate or 0) <= 0.01 and result.outputs.candidate_rate <= 0.02
    html = render_html(result)
    assert "volatile" in html and "values differ in 100.0% of baseline pairs" in html


def test_numbers_and_texts_are_never_volatile(tmp_path: Path) -> None:
    """A number moving in every output is judged by its size, a text reworded in every output by its meaning:
    without the numeric band (or for a text), the noise stays too high to judge them (INCONCLUSIVE)."""
    result = compare(tmp_path, run("a"), run("a2"), run("b"), numeric_noise_band=False)
    assert result.verdict == "INCONCLUSIVE"
    assert reason(result, "NOISE_TOO_HIGH").fields == ["$.latency_ms"]
    a, a2, b = run("a"), run("a2"), run("b")
    words = ["the", "customer", "asked", "for", "a", "refund", "after", "delivery", "was", "late", "and", "help"]
    for variant, recs in (("a", a), ("a2", a2), ("b", b)):
        rng = random.Random(variant)
        for rec in recs:
            rec["note"] = " ".join(rng.sample(words, 8))  # reworded every time
    result = compare(tmp_path, a, a2, b)
    assert by_path(result)["$.note"].status == "too_noisy"
    assert reason(result, "NOISE_TOO_HIGH").fields == ["$.note"]


def test_sixty_percent_noise_is_inconclusive_not_volatile(tmp_path: Path) -> None:
    a = run("a")
    a2, b = run("a2"), run("b")
    for i, rec in enumerate(a2):
        rec["mood"] = "busy" if i % 5 < 3 else "calm"  # 60 % of A/A pairs differ
    for i, rec in enumerate(b):
        rec["mood"] = "busy" if (i + 1) % 5 < 3 else "calm"
    result = compare(tmp_path, a, a2, b)
    assert by_path(result)["$.mood"].noise_rate == pytest.approx(0.6)
    assert by_path(result)["$.mood"].status == "too_noisy"
    assert result.verdict == "INCONCLUSIVE"
    assert reason(result, "NOISE_TOO_HIGH").fields == ["$.mood"]
    assert sorted(reason(result, "VOLATILE_FIELDS").fields) == sorted(VOLATILE)


@pytest.mark.parametrize("change", [{"drop": "request_id"}, {"as_int": "trace_id"}], ids=["dropped", "retyped"])
def test_a_volatile_field_dropped_or_retyped_by_the_candidate_fails(tmp_path: Path, change: dict) -> None:
    result = compare(tmp_path, run("a"), run("a2"), run("b", **change))
    path = "$." + next(iter(change.values()))
    assert result.verdict == "FAIL", result.reasons
    stat = by_path(result)[path]
    assert stat.status == "regression" and stat.volatile_rate == 1.0
    assert stat.candidate_diffs == N and stat.noise_diffs == 0
    fail = reason(result, "FIELD_REGRESSION")
    assert fail.fields == [path]
    assert f"{path} (volatile" in fail.message and "missing or of another JSON type in 100.0%" in fail.message
    assert path not in reason(result, "VOLATILE_FIELDS").fields


def test_a_change_spread_over_many_fields_is_still_seen_next_to_volatile_fields(tmp_path: Path) -> None:
    """Each of 20 fields changes in 6 of 400 outputs (1.5 %, under the margin); 30 % of outputs change. With
    volatile fields counted every output would differ in both pairs and the outputs-level rate see nothing."""
    result = compare(tmp_path, run("a"), run("a2"), run("b", spread=6))
    assert result.verdict == "FAIL", result.reasons
    assert reason(result, "OUTPUT_REGRESSION") is not None
    assert result.outputs.noise_diffs <= 4 and 120 <= result.outputs.candidate_diffs <= 124  # latency beyond its band
    assert "volatile" in result.outputs.comparator


def test_the_threshold_is_an_option(tmp_path: Path) -> None:
    a, a2, b = run("a"), run("a2"), run("b")
    for rec in a2[:20]:  # A and A' share 5 % of request ids: below a 0.98 threshold, above 0.9
        rec["request_id"] = next(r for r in a if r["id"] == rec["id"])["request_id"]
    assert by_path(compare(tmp_path, a, a2, b))["$.request_id"].status == "too_noisy"
    assert by_path(compare(tmp_path, a, a2, b, volatile_noise_rate=0.9))["$.request_id"].status == "volatile"
    assert by_path(compare(tmp_path, a, a2, b, volatile_noise_rate=None))["$.request_id"].status == "too_noisy"


def test_spilled_comparison_finds_the_same_volatile_fields(tmp_path: Path) -> None:
    a, a2, b = run("a"), run("a2"), run("b", spread=6)
    memory = compare(tmp_path, a, a2, b)
    spilled = compare(tmp_path, a, a2, b, spill_above_mb=0, spill_part_mb=1, spill_workers=1)
    assert [f.model_dump() for f in spilled.fields] == [f.model_dump() for f in memory.fields]
    assert spilled.outputs == memory.outputs
    assert [r.model_dump() for r in spilled.reasons] == [r.model_dump() for r in memory.reasons]


def test_the_headline_says_volatile_fields_were_left_out(tmp_path: Path) -> None:
    from airflow_flink_replay.core.compare.reports import headline

    result = compare(tmp_path, run("a"), run("a2"), run("b"), numeric_noise_band=True)
    assert "(4 volatile fields left out)" in headline(result)

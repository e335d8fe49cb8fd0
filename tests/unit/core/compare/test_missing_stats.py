"""Missing and extra outputs judged against the baselines' own losses with an exact test (issue 41, item 5).

The two baselines lose or add outputs too (a flaky tool, a timed-out model call): the candidate is judged
against that rate with a one-sided exact test on the window's size (Fisher's for missing outputs, the
conditional binomial test of two counts for extra ones), not against a zero threshold.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.stats import binomial_greater, fisher_greater
from airflow_flink_replay.core.compare.synthetic import write_jsonl


def records(ids: list[int], prefix: str = "r") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "label": "same", "amount": i % 17} for i in ids]


def missing_case(tmp_path: Path, n: int, lost_aa: int, lost_b: int, *, with_aa: bool = True, **cfg: Any):
    """A has ``n`` outputs; A' loses ``lost_aa`` of them and B ``lost_b`` (other keys, chosen at random)."""
    rng = random.Random(n * 31 + lost_aa * 7 + lost_b)
    gone_aa = set(rng.sample(range(n), lost_aa))
    gone_b = set(rng.sample(range(n), lost_b))
    a = write_jsonl(tmp_path / "a.jsonl", records(list(range(n))))
    a2 = write_jsonl(tmp_path / "a2.jsonl", records([i for i in range(n) if i not in gone_aa]))
    b = write_jsonl(tmp_path / "b.jsonl", records([i for i in range(n) if i not in gone_b]))
    return compare_runs(a, b, a2 if with_aa else None, key="$.id", config=CompareConfig(**cfg))


def extra_case(tmp_path: Path, n: int, extra_aa: int, extra_b: int):
    """A has ``n`` outputs; A' adds ``extra_aa`` outputs of keys A does not have, B ``extra_b``."""
    a = write_jsonl(tmp_path / "a.jsonl", records(list(range(n))))
    a2 = write_jsonl(tmp_path / "a2.jsonl", records(list(range(n))) + records(list(range(extra_aa)), "aa"))
    b = write_jsonl(tmp_path / "b.jsonl", records(list(range(n))) + records(list(range(extra_b)), "bb"))
    return compare_runs(a, b, a2, key="$.id")


def reason(result: Any, code: str) -> Any:
    return next((r for r in result.reasons if r.code == code), None)


def test_fisher_and_binomial_tails_match_known_values() -> None:
    # Fisher's tea-tasting table: 3 of 4 vs 1 of 4, one-sided p = 17/70
    assert fisher_greater(3, 4, 1, 4) == pytest.approx(17 / 70)
    assert fisher_greater(0, 10, 5, 10) == pytest.approx(1.0)
    # 0 of 60 lost by A', 2 of 60 by B: C(60, 2) / C(120, 2)
    assert fisher_greater(2, 60, 0, 60) == pytest.approx(1770 / 7140)
    assert binomial_greater(5, 5, 0.5) == pytest.approx(1 / 32)
    assert binomial_greater(0, 7, 0.5) == pytest.approx(1.0)
    assert binomial_greater(9, 10, 0.5) == pytest.approx(11 / 1024)


def test_equal_flakiness_passes(tmp_path: Path) -> None:
    """A' loses 3.0 % of 1,000 outputs, the candidate 3.4 %: the same flakiness, not a regression."""
    result = missing_case(tmp_path, 1000, 30, 34)
    assert result.verdict == "PASS", result.reasons
    info = reason(result, "MISSING_WITHIN_NOISE")
    assert info is not None and info.severity == "info"
    assert "34 of 1000" in info.message and "30 of 1000" in info.message
    assert "3.4%" in info.message and "3.0%" in info.message and "p = " in info.message


def test_equal_extra_outputs_pass(tmp_path: Path) -> None:
    result = extra_case(tmp_path, 1000, 30, 34)
    assert result.verdict == "PASS", result.reasons
    info = reason(result, "EXTRA_WITHIN_NOISE")
    assert info is not None and "34" in info.message and "30" in info.message and "p = " in info.message


def test_candidate_losing_outputs_the_baselines_never_lose_fails(tmp_path: Path) -> None:
    """A' loses none of 1,000, the candidate 1 %: an exact test on the window's size says it is real."""
    result = missing_case(tmp_path, 1000, 0, 10)
    assert result.verdict == "FAIL"
    fail = reason(result, "MISSING_OUTPUTS")
    assert fail is not None and fail.severity == "fail"
    assert "10 of 1000" in fail.message and "1.0%" in fail.message and "0 of 1000" in fail.message
    assert "p = 0.00095" in fail.message  # C(1000, 10) / C(2000, 10)


def test_a_handful_of_lost_outputs_fails_when_the_baselines_lose_none(tmp_path: Path) -> None:
    assert missing_case(tmp_path, 1000, 0, 5).verdict == "FAIL"  # p = 0.031
    assert extra_case(tmp_path, 1000, 0, 5).verdict == "FAIL"  # p = 1/32


def test_losses_clearly_beyond_the_baselines_fail(tmp_path: Path) -> None:
    result = missing_case(tmp_path, 1000, 30, 60)
    assert result.verdict == "FAIL"
    assert "60 of 1000" in reason(result, "MISSING_OUTPUTS").message
    assert extra_case(tmp_path, 1000, 30, 60).verdict == "FAIL"


def test_a_loss_too_small_to_tell_in_a_small_window_is_inconclusive(tmp_path: Path) -> None:
    """2 of 60 lost (3.3 %) against none: beyond the noise rule's margins but p = 0.25 (a false PASS if it
    passed, a false FAIL if it failed): replay more records."""
    result = missing_case(tmp_path, 60, 0, 2)
    assert result.verdict == "INCONCLUSIVE", result.reasons
    unsure = reason(result, "NOT_SIGNIFICANT")
    assert "2 of 60" in unsure.message and "p = 0.25" in unsure.message


def test_without_baseline_2_any_lost_output_still_fails(tmp_path: Path) -> None:
    result = missing_case(tmp_path, 1000, 0, 1, with_aa=False)
    assert result.verdict == "FAIL"
    assert reason(result, "MISSING_OUTPUTS") is not None


def test_the_absolute_margin_still_applies(tmp_path: Path) -> None:
    assert missing_case(tmp_path, 1000, 0, 10, missing_abs_threshold=0.02).verdict == "PASS"

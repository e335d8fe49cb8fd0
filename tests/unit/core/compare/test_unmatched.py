"""Missing and extra outputs judged against the baselines' own (``core/compare/unmatched.py``): each branch of the
rule — nothing lost, the margin alone without baseline-2, beyond the margins and significant (FAIL), beyond them
but not significant (INCONCLUSIVE, or informed when within the noise rule's absolute margin), within the margins —
with the message that says the counts, rates and test. The same through whole comparisons:
test_missing_stats.py."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.compare.unmatched import p_value, unmatched_reasons

DEFAULT = CompareConfig()


def fisher(x1: int, x0: int, n: int) -> float:
    """The one-sided Fisher exact p of ``x1`` of ``n`` against ``x0`` of ``n``, summed exactly."""
    events = x0 + x1
    tail = sum(math.comb(events, k) * math.comb(2 * n - events, n - k) for k in range(x1, min(events, n) + 1))
    return float(Fraction(tail, math.comb(2 * n, n)))


def test_the_p_values_are_fishers_for_missing_outputs_and_the_binomial_of_the_counts_for_extra_ones() -> None:
    assert p_value("missing", 10, 0, 1000) == pytest.approx(fisher(10, 0, 1000), rel=1e-9)
    assert p_value("missing", 10, 0, 1000) == pytest.approx(math.comb(1000, 10) / math.comb(2000, 10), rel=1e-9)
    assert p_value("extra", 5, 0, 1000) == pytest.approx(1 / 32)  # all 5 extra outputs on the candidate's side
    assert p_value("extra", 5, 0, 10) == p_value("extra", 5, 0, 1_000_000)  # counts, not rates


def test_no_missing_output_is_no_reason() -> None:
    assert unmatched_reasons("missing", 0, 40, 1000, DEFAULT) == []
    assert unmatched_reasons("extra", 0, None, 1000, DEFAULT) == []


@pytest.mark.parametrize("kind", ["missing", "extra"])
def test_without_baseline_2_the_margin_alone_decides(kind: str) -> None:
    config = CompareConfig(missing_abs_threshold=0.02, extra_abs_threshold=0.02)
    assert unmatched_reasons(kind, 20, None, 1000, config) == []  # 2.0 %: at the margin, not beyond it
    [reason] = unmatched_reasons(kind, 21, None, 1000, config)
    assert reason.severity == "fail" and reason.code == f"{kind.upper()}_OUTPUTS"
    assert reason.message.endswith("; no baseline-2 to measure the baselines' own")


def test_the_message_without_baseline_2_counts_what_is_missing_or_extra() -> None:
    [missing] = unmatched_reasons("missing", 1, None, 1000, DEFAULT)
    assert missing.message.startswith("candidate is missing 1 of 1000 baseline outputs (0.1%)")
    [extra] = unmatched_reasons("extra", 3, None, 1000, DEFAULT)
    assert extra.message.startswith("candidate has 3 outputs the baseline does not (0.3% of 1000)")


def test_beyond_the_margins_and_significant_fails_saying_counts_difference_and_test() -> None:
    [reason] = unmatched_reasons("missing", 10, 0, 1000, DEFAULT)
    assert (reason.code, reason.severity, reason.fields) == ("MISSING_OUTPUTS", "fail", [])
    p = f"{fisher(10, 0, 1000):.2g}"
    assert reason.message == (
        "candidate is missing 10 of 1000 baseline outputs (1.0%), baseline-2 0 of 1000 (0.0%): +1.0 pt, "
        f"one-sided Fisher exact p = {p} < alpha 0.05"
    )


def test_extra_outputs_fail_on_the_binomial_test_of_the_two_counts() -> None:
    [reason] = unmatched_reasons("extra", 5, 0, 1000, DEFAULT)
    assert reason.code == "EXTRA_OUTPUTS" and reason.severity == "fail"
    assert reason.message == (
        "candidate has 5 outputs the baseline does not (0.5% of 1000), baseline-2 0 (0.0%): +0.5 pt, "
        "one-sided exact binomial test of the two counts p = 0.031 < alpha 0.05"
    )


def test_beyond_the_absolute_margin_but_not_significant_is_inconclusive() -> None:
    """2 of 60 against none: 3.3 points, above the noise rule's 2-point margin, but p = 0.25."""
    [reason] = unmatched_reasons("missing", 2, 0, 60, DEFAULT)
    assert (reason.code, reason.severity) == ("NOT_SIGNIFICANT", "inconclusive")
    assert f"p = {fisher(2, 0, 60):.2g} ≥ alpha 0.05" in reason.message
    assert reason.message.endswith("; replay more records")


def test_beyond_the_margins_within_the_absolute_one_and_not_significant_only_informs() -> None:
    """5 against 1 of 1,000: beyond a zero margin and 25 % of the A/A's, 0.4 points (under 2), p ≈ 0.11."""
    [reason] = unmatched_reasons("missing", 5, 1, 1000, DEFAULT)
    assert (reason.code, reason.severity) == ("MISSING_WITHIN_NOISE", "info")
    assert reason.message.endswith(
        f": +0.4 pt: as the baselines' own, not significant (one-sided Fisher exact p = {fisher(5, 1, 1000):.2g} "
        "≥ alpha 0.05)"
    )


def test_within_the_relative_margin_is_as_the_baselines_own() -> None:
    """34 against 30 of 1,000: 0.4 points, not above 25 % of the A/A's 3 %."""
    [reason] = unmatched_reasons("missing", 34, 30, 1000, DEFAULT)
    assert (reason.code, reason.severity) == ("MISSING_WITHIN_NOISE", "info")
    assert "within the margins (more than 0.0 pt and 25% of 3.0% needed)" in reason.message
    [extra] = unmatched_reasons("extra", 34, 30, 1000, DEFAULT)
    assert extra.code == "EXTRA_WITHIN_NOISE" and "within the margins" in extra.message


def test_a_candidate_losing_fewer_than_the_baselines_is_within_the_noise() -> None:
    [reason] = unmatched_reasons("missing", 3, 8, 1000, DEFAULT)
    assert reason.severity == "info" and ": -0.5 pt: " in reason.message


def test_the_settings_move_the_line() -> None:
    """The same 10 of 1,000 against none: a 2 % margin lets it pass; a stricter alpha than its p makes it
    inconclusive only when it is beyond the absolute margin (it is not: 1 point), so it informs."""
    [margin] = unmatched_reasons("missing", 10, 0, 1000, CompareConfig(missing_abs_threshold=0.02))
    assert margin.severity == "info" and "more than 2.0 pt" in margin.message
    [strict] = unmatched_reasons("missing", 10, 0, 1000, CompareConfig(alpha=0.0001))
    assert strict.severity == "info" and "≥ alpha 0.0001" in strict.message
    [strict_and_big] = unmatched_reasons("missing", 10, 0, 200, CompareConfig(alpha=0.0001))
    assert strict_and_big.code == "NOT_SIGNIFICANT"  # 5 points, p ≈ 0.001

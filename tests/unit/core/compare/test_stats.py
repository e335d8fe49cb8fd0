"""Statistics of the noise rule (``core/compare/stats.py``): Wilson score bounds and Newcombe's interval checked
against the values Newcombe (1998) published, the exact tests against exact sums over the distributions, and the
weighting of pooled counts. (Fisher's tea-tasting table and a few binomial tails: test_missing_stats.py.)"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_flink_replay.core.compare.stats import (
    binomial_greater,
    fisher_greater,
    newcombe_lower,
    weighted,
    wilson,
    wilson_lower,
    z_one_sided,
)

Z95 = 1.959963984540054  # two-sided 95 %, as in Newcombe's tables


def test_the_one_sided_normal_quantile() -> None:
    assert z_one_sided(0.05) == pytest.approx(1.644854, abs=1e-6)
    assert z_one_sided(0.025) == pytest.approx(Z95, abs=1e-9)
    assert z_one_sided(0.5) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    ("x", "n", "lower", "upper"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_matches_newcombes_published_intervals(x: int, n: int, lower: float, upper: float) -> None:
    """Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3."""
    got = wilson(x, n, Z95)
    assert got == (pytest.approx(lower, abs=5e-5), pytest.approx(upper, abs=5e-5))
    assert wilson_lower(x, n, Z95) == got[0]


def test_wilson_of_no_outputs_says_nothing_and_bounds_stay_within_0_and_1() -> None:
    assert wilson(0, 0, Z95) == (0.0, 1.0)
    assert wilson(0, 20, Z95)[0] == 0.0 and wilson(20, 20, Z95)[1] == 1.0
    lower, _ = wilson(20, 20, Z95)
    assert lower == pytest.approx(20 / (20 + Z95**2))  # x = n: the lower bound is n / (n + z²)


@pytest.mark.parametrize(
    ("x1", "n1", "x0", "n0", "lower"),
    [
        (56, 70, 48, 80, 0.0524),
        (9, 10, 3, 10, 0.1705),
        (6, 7, 2, 7, 0.0582),
        (5, 56, 0, 29, -0.0381),
        (0, 10, 0, 20, -0.1611),
        (0, 10, 0, 10, -0.2775),
        (10, 10, 0, 20, 0.6791),
        (10, 10, 0, 10, 0.6075),
    ],
)
def test_newcombe_matches_the_published_lower_limits(x1: int, n1: int, x0: int, n0: int, lower: float) -> None:
    """Newcombe (1998), "Interval estimation for the difference between independent proportions", Table II,
    method 10 (the hybrid score interval), lower limits."""
    assert newcombe_lower(x1, n1, x0, n0, Z95) == pytest.approx(lower, abs=5e-5)


def test_newcombe_without_outputs_on_either_side_is_the_lowest_bound() -> None:
    assert newcombe_lower(0, 0, 3, 10, Z95) == -1.0
    assert newcombe_lower(3, 10, 0, 0, Z95) == -1.0


def test_newcombe_grows_with_the_candidates_rate_and_the_window() -> None:
    assert newcombe_lower(30, 1000, 10, 1000, 1.645) > newcombe_lower(20, 1000, 10, 1000, 1.645)
    assert newcombe_lower(300, 10000, 100, 10000, 1.645) > newcombe_lower(30, 1000, 10, 1000, 1.645) > 0


@pytest.mark.parametrize(
    ("x", "n", "weight", "counts"),
    [(7, 100, 1.0, (7, 100)), (7, 100, 0.5, (4, 50)), (3, 10, 0.25, (1, 2)), (0, 0, 0.5, (0, 0)), (1, 1, 0.01, (0, 1))],
)
def test_pooled_counts_are_weighted_to_the_independent_pairs_they_are_worth(
    x: int, n: int, weight: float, counts: tuple[int, int]
) -> None:
    assert weighted(x, n, weight) == counts


def _fisher_exact(x1: int, n1: int, x0: int, n0: int) -> Fraction:
    total, events = n0 + n1, x0 + x1
    tail = sum(math.comb(events, k) * math.comb(total - events, n1 - k) for k in range(x1, min(events, n1) + 1))
    return Fraction(tail, math.comb(total, n1))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.data())
def test_fisher_is_the_exact_hypergeometric_tail(n1: int, n0: int, data: st.DataObject) -> None:
    x1 = data.draw(st.integers(0, n1))
    x0 = data.draw(st.integers(0, n0))
    expected = 1.0 if x1 == 0 or n1 == 0 else float(_fisher_exact(x1, n1, x0, n0))
    assert fisher_greater(x1, n1, x0, n0) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_fisher_is_exact_on_a_large_window_too() -> None:
    expected = float(_fisher_exact(60, 5000, 30, 5000))
    assert fisher_greater(60, 5000, 30, 5000) == pytest.approx(expected, rel=1e-9)
    assert 0 < expected < 0.005


def _binomial_exact(x: int, m: int, q: Fraction) -> Fraction:
    return sum((math.comb(m, k) * q**k * (1 - q) ** (m - k) for k in range(x, m + 1)), Fraction(0))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 60), st.sampled_from([Fraction(1, 2), Fraction(1, 3), Fraction(9, 10), Fraction(1, 100)]), st.data()
)
def test_binomial_is_the_exact_upper_tail(m: int, q: Fraction, data: st.DataObject) -> None:
    x = data.draw(st.integers(1, m)) if m else 1
    expected = 0.0 if x > m else float(_binomial_exact(x, m, q))
    assert binomial_greater(x, m, float(q)) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_binomial_edges() -> None:
    assert binomial_greater(0, 10, 0.5) == 1.0 and binomial_greater(-1, 10, 0.5) == 1.0
    assert binomial_greater(11, 10, 0.5) == 0.0
    assert binomial_greater(3, 10, 0.0) == 0.0 and binomial_greater(3, 10, 1.0) == 1.0
    assert binomial_greater(10, 10, 0.5) == pytest.approx(2**-10)

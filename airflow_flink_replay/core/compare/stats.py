"""Statistics of the noise rule: Wilson score bounds and Newcombe's interval for a difference of rates.

The question for each field is "does the candidate differ from the baseline more often than the baseline
differs from itself?". With ``p0`` = noise rate (A vs A') over ``n0`` aligned outputs and ``p1`` =
candidate rate (A vs B) over ``n1``, we compute the one-sided lower confidence bound of ``p1 - p0`` by
Newcombe's hybrid score method (method 10 in Newcombe 1998), built from the Wilson score interval of each
rate. It behaves well for rates near 0, where the Wald interval fails — exactly where agent fields live.

Missing and extra outputs are judged by exact one-sided tests instead (:func:`fisher_greater`,
:func:`binomial_greater`): a handful of lost outputs in a small window is exactly where an approximation errs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist


def z_one_sided(alpha: float) -> float:
    """The standard normal quantile for a one-sided test at level ``alpha`` (1.645 for 0.05)."""
    return NormalDist().inv_cdf(1.0 - alpha)


def wilson(successes: int, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval (lower, upper) of a proportion; (0, 1) when ``n`` is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_lower(x1: int, n1: int, x0: int, n0: int, z: float) -> float:
    """One-sided lower bound of ``x1/n1 - x0/n0`` by Newcombe's hybrid score method."""
    if n1 <= 0 or n0 <= 0:
        return -1.0
    p1, p0 = x1 / n1, x0 / n0
    l1, _ = wilson(x1, n1, z)
    _, u0 = wilson(x0, n0, z)
    return (p1 - p0) - math.sqrt((p1 - l1) ** 2 + (u0 - p0) ** 2)


def weighted(x: int, n: int, weight: float) -> tuple[int, int]:
    """Counts ``x`` of ``n`` pooled over pairs of runs that share runs, as the independent pairs they are worth
    (``weight``: see the engine's ``fold_pairs``), for the exact tests that take whole counts."""
    if weight == 1.0:
        return x, n
    return round(x * weight), max(round(n * weight), 1) if n else 0


def wilson_lower(x: int, n: int, z: float) -> float:
    """One-sided Wilson lower bound of ``x/n`` (used when there is no noise run)."""
    return wilson(x, n, z)[0]


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _upper_tail(log_pmf: Callable[[int], float], start: int, stop: int, mode: int) -> float:
    """``sum(exp(log_pmf(k)) for k in start..stop)``, stopping once past the mode the terms no longer add."""
    total = 0.0
    for k in range(start, stop + 1):
        term = math.exp(log_pmf(k))
        total += term
        if k > mode and term < total * 1e-17:
            break
    return min(1.0, total)


def fisher_greater(x1: int, n1: int, x0: int, n0: int) -> float:
    """One-sided p-value of Fisher's exact test that ``x1/n1`` is greater than ``x0/n0``.

    Given the ``x0 + x1`` events of both samples, ``P(X >= x1)`` for ``X`` hypergeometric (``n1`` draws from
    ``n0 + n1`` with ``x0 + x1`` events). Exact at any size, so a few events in a small window are judged
    as what they are (a large-sample approximation is wrong exactly there).
    """
    if x1 <= 0 or n1 <= 0:
        return 1.0
    total, events = n0 + n1, x0 + x1
    low, high = max(0, n1 - (total - events)), min(events, n1)
    if x1 <= low:
        return 1.0
    log_all = _log_comb(total, n1)

    def log_pmf(k: int) -> float:
        return _log_comb(events, k) + _log_comb(total - events, n1 - k) - log_all

    mode = int((n1 + 1) * (events + 1) / (total + 2))
    return _upper_tail(log_pmf, x1, high, mode)


def binomial_greater(x: int, m: int, q: float) -> float:
    """``P(X >= x)`` for ``X ~ Binomial(m, q)``: with ``m = x0 + x1`` the one-sided exact (conditional) test
    that count ``x1`` has a higher rate than ``x0`` (``q`` = ``x1``'s share of the exposure, 1/2 when
    equal). For counts that are not bounded by a number of trials, such as extra outputs."""
    if x <= 0:
        return 1.0
    if x > m:
        return 0.0
    if q <= 0.0 or q >= 1.0:
        return 0.0 if q <= 0.0 else 1.0
    log_q, log_r = math.log(q), math.log1p(-q)

    def log_pmf(k: int) -> float:
        return _log_comb(m, k) + k * log_q + (m - k) * log_r

    return _upper_tail(log_pmf, x, m, int((m + 1) * q))

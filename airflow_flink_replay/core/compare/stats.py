"""Statistics of the noise rule: Wilson score bounds and Newcombe's interval for a difference of rates.

The question for each field is "does the candidate differ from the baseline more often than the baseline
differs from itself?". With ``p0`` = noise rate (A vs A') over ``n0`` aligned outputs and ``p1`` =
candidate rate (A vs B) over ``n1``, we compute the one-sided lower confidence bound of ``p1 - p0`` by
Newcombe's hybrid score method (method 10 in Newcombe 1998), built from the Wilson score interval of each
rate. It behaves well for rates near 0, where the Wald interval fails — exactly where agent fields live.
"""

from __future__ import annotations

import math
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


def wilson_lower(x: int, n: int, z: float) -> float:
    """One-sided Wilson lower bound of ``x/n`` (used when there is no noise run)."""
    return wilson(x, n, z)[0]

"""Numeric noise bands per magnitude range (issue 41, item 3).

The band of a numeric field (how far it moves between the two baselines) was learned over all its values: when
a field spans several orders of magnitude, the absolute band learned on the large values is wider than a large
relative shift of the small ones, and the relative band learned on jittery small values wider than a shift of
the large ones. Bands are now learned per decade of ``max(|a|, |a'|)`` too (the field's band where a decade
has too few A/A pairs), and a candidate difference counts when it is outside both bands of its decade. Each
test failed before the change it covers (the ones marked "kept" guard against over-correcting).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.result import ComparisonResult, FieldStat
from airflow_flink_replay.core.compare.synthetic import write_runs

N = 2000


def field(result: ComparisonResult, path: str) -> FieldStat:
    return next(f for f in result.fields if f.path == path)


def true_amount(i: int) -> float:
    """The output's amount before any noise: log-uniform over 0.01 .. 10,000 (six decades)."""
    return 10 ** random.Random(i).uniform(-2, 4)


def amounts(
    seed: int, jitter: Callable[[float, random.Random], float], shift: Callable[[float], float] = lambda v: v
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": f"r-{i}", "amount": round(jitter(shift(true_amount(i)), rng), 9)} for i in range(N)]


def multiplicative(share: float) -> Callable[[float, random.Random], float]:
    return lambda v, rng: v * (1 + rng.uniform(-share, share))


def test_a_shift_confined_to_small_values_fails(tmp_path: Path) -> None:
    """1 % multiplicative A/A jitter; the candidate moves every value below 1 by +30 %. The field-wide absolute
    band (learned on values in the thousands) is ~ 100, far wider than the 0.003 .. 0.3 these moves are."""
    jitter = multiplicative(0.01)
    small_up = lambda v: v * 1.3 if v < 1 else v  # noqa: E731
    a, a2, b = write_runs(tmp_path, amounts(1, jitter), amounts(2, jitter), amounts(3, jitter, small_up))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL", result.reasons
    stat = field(result, "$.amount")
    assert stat.status == "regression" and 0.28 < stat.candidate_rate < 0.39, stat
    ranges = {k.kind: k for k in stat.kinds if k.candidate_diffs > 10}  # the others: the 1 % beyond any band
    assert set(ranges) == {"values 0.01-0.1", "values 0.1-1", "values 1-10"}, ranges  # 1.3 x 0.8 lands in 1-10
    small = ranges["values 0.1-1"]
    assert small.noise_diffs is not None and small.noise_diffs <= 5
    assert small.mean_move is not None and 0.2 < small.mean_move < 0.26  # +30 % is 23 % of the larger value
    assert small.band_rel is not None and small.band_rel < 0.025
    message = next(r.message for r in result.reasons if r.code == "FIELD_REGRESSION")
    assert "values 0.1-1: " in message and "moved by 2" in message and "the A/A moves by <= " in message, message


def test_the_same_jitter_alone_passes(tmp_path: Path) -> None:
    """Kept: the jitter of every decade is within its own band."""
    jitter = multiplicative(0.01)
    a, a2, b = write_runs(tmp_path, amounts(1, jitter), amounts(2, jitter), amounts(3, jitter))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "PASS", result.reasons
    stat = field(result, "$.amount")
    assert stat.candidate_rate < 0.02 and stat.noise_rate is not None and stat.noise_rate < 0.02


def mixed_jitter(v: float, rng: random.Random) -> float:
    """Small values (probabilities of rare events) jitter by 40 %, large ones by 1 %."""
    return v * (1 + rng.uniform(-0.4, 0.4)) if v < 1 else v * (1 + rng.uniform(-0.01, 0.01))


def test_a_shift_confined_to_large_values_fails(tmp_path: Path) -> None:
    """The small values set a field-wide relative band of ~ 50 %, the values in the thousands an absolute band of
    ~ 80; the candidate moves every value in the hundreds by +10 %: within both field-wide bands, but far outside
    both bands of the decade 100-1,000 (~ 1.8 % and ~ 12)."""
    hundreds_up = lambda v: v * 1.1 if 100 <= v < 1000 else v  # noqa: E731
    a, a2, b = write_runs(
        tmp_path, amounts(1, mixed_jitter), amounts(2, mixed_jitter), amounts(3, mixed_jitter, hundreds_up)
    )
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL", result.reasons
    stat = field(result, "$.amount")
    assert stat.status == "regression", stat
    assert any(k.kind == "values 100-1000" and k.candidate_diffs > 200 for k in stat.kinds), stat.kinds


def test_mixed_jitter_alone_passes(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, amounts(1, mixed_jitter), amounts(2, mixed_jitter), amounts(3, mixed_jitter))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "PASS", result.reasons


def test_per_range_bands_off_gives_the_field_wide_band_back(tmp_path: Path) -> None:
    """With ``numeric_band_by_magnitude: false`` the field-wide bands alone decide: the small-value shift passes."""
    jitter = multiplicative(0.01)
    small_up = lambda v: v * 1.3 if v < 1 else v  # noqa: E731
    a, a2, b = write_runs(tmp_path, amounts(1, jitter), amounts(2, jitter), amounts(3, jitter, small_up))
    result = compare_runs(a, b, a2, key="$.id", config=CompareConfig(numeric_band_by_magnitude=False))
    assert result.verdict == "PASS", result.reasons


def test_a_decade_with_too_few_a_a_pairs_takes_the_field_band(tmp_path: Path) -> None:
    """A tenth of 400 outputs sit at 0.05 and never move between the baselines; the others jitter by 1 %. With
    40 A/A pairs (fewer than ``numeric_band_min_pairs``, 100) the decade 0.01-0.1 gets no band of its own: a
    candidate whose small values jitter by 1 % like the others is judged by the field's band (2 %) and PASSes.
    Trusting 40 pairs (``numeric_band_min_pairs: 20``), the decade's band is 0 and the same candidate FAILs."""

    def outs(seed: int, move_small: bool) -> list[dict[str, Any]]:
        rng = random.Random(seed)
        out = []
        for i in range(400):
            small = i % 10 == 0
            v = 0.05 if small else 1 + (i % 9)
            if move_small or not small:
                v *= 1 + rng.uniform(-0.01, 0.01)
            out.append({"id": f"r-{i}", "amount": round(v, 9)})
        return out

    a, a2, b = write_runs(tmp_path, outs(1, False), outs(2, False), outs(3, True))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "PASS", result.reasons
    assert not any(k.kind == "values 0.01-0.1" for k in field(result, "$.amount").kinds)
    trusting = compare_runs(a, b, a2, key="$.id", config=CompareConfig(numeric_band_min_pairs=20))
    assert trusting.verdict == "FAIL", trusting.reasons
    top = field(trusting, "$.amount").kinds[0]
    assert (top.kind, top.candidate_diffs, top.noise_diffs, top.band_abs) == ("values 0.01-0.1", 40, 0, 0.0)


def test_per_range_bands_merge_across_partitions_on_disk(tmp_path: Path) -> None:
    """The band learned partition by partition (in two processes) is the one learned in memory."""
    jitter = multiplicative(0.01)
    small_up = lambda v: v * 1.3 if v < 1 else v  # noqa: E731
    a, a2, b = write_runs(tmp_path, amounts(1, jitter), amounts(2, jitter), amounts(3, jitter, small_up))
    memory = compare_runs(a, b, a2, key="$.id")
    spilled = compare_runs(a, b, a2, key="$.id", config=CompareConfig(spill_above_mb=0, spill_workers=2))
    assert spilled.verdict == memory.verdict == "FAIL"
    m, s = field(memory, "$.amount"), field(spilled, "$.amount")
    assert (s.candidate_diffs, s.noise_diffs) == (m.candidate_diffs, m.noise_diffs)

    def kinds(stat: FieldStat) -> list[dict[str, Any]]:  # the mean move summed in another order
        return [{**k.model_dump(), "mean_move": round(k.mean_move or 0.0, 9)} for k in stat.kinds]

    assert kinds(s) == kinds(m)

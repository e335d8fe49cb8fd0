"""Distributions, not only rates (issue 41, item 2).

The noise rule compares how often a field differs. A candidate whose decision flips all go one way (more
approvals) at the A/A's rate of random flips both ways passed it, and so did a candidate that adds a citation
where the A/A adds or drops one as often, or that moves every score up by a few A/A standard errors within the
numeric band. Each test below failed before :mod:`airflow_flink_replay.core.compare.shifts` (the ones marked
"kept" guard against over-correcting: symmetric noise, and a pure A/A, never FAIL).
"""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.result import ComparisonResult, Reason
from airflow_flink_replay.core.compare.synthetic import write_jsonl

N = 1000
DECISIONS = ("approve", "reject")


def base(n: int = N, seed: int = 7) -> list[dict[str, Any]]:
    """A deterministic agent's outputs: a decision, a few citations, a score around 10."""
    rng = random.Random(seed)
    return [
        {
            "id": f"t-{i:05d}",
            "decision": DECISIONS[i % 2],
            "citations": [f"kb-{k}" for k in sorted(rng.sample(range(400), 3))],
            "score": round(rng.uniform(9.0, 11.0), 4),
        }
        for i in range(n)
    ]


def compare(tmp_path: Path, a: list, a2: list, b: list, **cfg: Any) -> ComparisonResult:
    pa, pa2, pb = (write_jsonl(tmp_path / f"{name}.jsonl", r) for name, r in (("a", a), ("a2", a2), ("b", b)))
    return compare_runs(pa, pb, pa2, key="$.id", config=CompareConfig(**cfg))


def shift_reason(result: ComparisonResult) -> Reason | None:
    return next((r for r in result.reasons if r.code == "DISTRIBUTION_SHIFT"), None)


def flip(row: dict[str, Any]) -> None:
    row["decision"] = "reject" if row["decision"] == "approve" else "approve"


def flipped(rows: list[dict[str, Any]], rng: random.Random, count: int, only: str | None = None) -> list[dict]:
    """A copy of ``rows`` with ``count`` decisions flipped, chosen at random (among ``only`` when given)."""
    out = copy.deepcopy(rows)
    pool = [i for i, r in enumerate(out) if only is None or r["decision"] == only]
    for i in rng.sample(pool, count):
        flip(out[i])
    return out


def one_way_case() -> tuple[list, list, list]:
    """A' flips 80 decisions both ways at random; B flips 80, all reject -> approve."""
    rng = random.Random(1)
    a = base()
    return a, flipped(a, rng, 80), flipped(a, rng, 80, only="reject")


def test_one_way_flips_at_the_noise_rate_fail_naming_the_transition(tmp_path: Path) -> None:
    a, a2, b = one_way_case()
    result = compare(tmp_path, a, a2, b)
    assert result.verdict == "FAIL", result.reasons
    reason = shift_reason(result)
    assert reason is not None and reason.severity == "fail" and reason.fields == ["$.decision"]
    assert "$.decision reject->approve in 80 of 1000 outputs (8.0%)" in reason.message, reason.message
    assert "the A/A moves it 4.0% either way" in reason.message, reason.message
    assert "a one-way shift" in reason.message
    # the rate of change is the noise's: the field rule alone says nothing
    assert not any(r.code == "FIELD_REGRESSION" for r in result.reasons)


def test_symmetric_flips_at_the_same_rate_pass(tmp_path: Path) -> None:
    """Kept: flips both ways, as the A/A's, are noise in rate and direction."""
    rng = random.Random(2)
    a = base()
    result = compare(tmp_path, a, flipped(a, rng, 80), flipped(a, rng, 80))
    assert result.verdict == "PASS", result.reasons
    assert shift_reason(result) is None


def test_the_rule_can_be_turned_off(tmp_path: Path) -> None:
    a, a2, b = one_way_case()
    result = compare(tmp_path, a, a2, b, distribution_shifts=False)
    assert result.verdict == "PASS", result.reasons


def test_spilled_comparison_finds_the_same_shift(tmp_path: Path) -> None:
    """Counts merge across partitions: the partitioned comparison gives the in-memory reason word for word."""
    a, a2, b = one_way_case()
    memory = shift_reason(compare(tmp_path, a, a2, b))
    spilled = shift_reason(compare(tmp_path, a, a2, b, spill_above_mb=0, spill_part_mb=1, spill_workers=2))
    assert memory is not None and spilled == memory


def more_or_fewer(rows: list[dict[str, Any]], rng: random.Random, count: int, *, one_way: bool) -> list[dict]:
    """A copy with ``count`` outputs citing one source more (``one_way``) or, at random, one more or one fewer."""
    out = copy.deepcopy(rows)
    for i in rng.sample(range(len(out)), count):
        cites = out[i]["citations"]
        if one_way or rng.random() < 0.5:
            cites.append(f"kb-{400 + i}")
        else:
            cites.pop()
    return out


def test_list_item_count_shift_fails(tmp_path: Path) -> None:
    """B cites one more source in 30% of outputs; the A/A adds or drops one in 30%, at random."""
    rng = random.Random(3)
    a = base()
    a2 = more_or_fewer(a, rng, 300, one_way=False)
    b = more_or_fewer(a, rng, 300, one_way=True)
    result = compare(tmp_path, a, a2, b)
    assert result.verdict == "FAIL", result.reasons
    reason = shift_reason(result)
    assert reason is not None and "$.citations" in reason.fields
    assert "items in $.citations" in reason.message, reason.message
    assert "more items in 300 and fewer in 0 of the candidate's outputs" in reason.message, reason.message
    assert not any(r.code == "FIELD_REGRESSION" for r in result.reasons)


def test_item_count_of_a_list_of_objects_is_counted_too(tmp_path: Path) -> None:
    """Tool calls as objects are flattened by index (``$.calls[2].name``): their count is the list's, the same rule."""
    rng = random.Random(6)
    a = [{"id": f"t-{i}", "calls": [{"name": "lookup", "arg": i}, {"name": "policy", "arg": i}]} for i in range(N)]
    a2, b = copy.deepcopy(a), copy.deepcopy(a)
    for i in rng.sample(range(N), 300):
        if rng.random() < 0.5:
            a2[i]["calls"].append({"name": "refund", "arg": i})
        else:
            a2[i]["calls"].pop()
    for i in rng.sample(range(N), 300):
        b[i]["calls"].append({"name": "refund", "arg": i})
    reason = shift_reason(compare(tmp_path, a, a2, b))
    assert reason is not None and "$.calls" in reason.fields, reason
    assert "items in $.calls: mean count 2.00 -> 2.30" in reason.message, reason.message


def orthonormal_noise(n: int, rng: random.Random) -> tuple[list[float], list[float]]:
    """Two noise vectors of mean 0, standard deviation 1 and correlation 0 exactly (so a test's statistic is
    what the case says, whatever the draw)."""

    def centred(v: list[float]) -> list[float]:
        m = sum(v) / len(v)
        return [x - m for x in v]

    def scaled(v: list[float]) -> list[float]:
        sd = math.sqrt(sum(x * x for x in v) / len(v))
        return [x / sd for x in v]

    g = scaled(centred([rng.gauss(0, 1) for _ in range(n)]))
    h = centred([rng.gauss(0, 1) for _ in range(n)])
    along = sum(x * y for x, y in zip(g, h, strict=True)) / n
    return g, scaled([y - along * x for x, y in zip(g, h, strict=True)])


def test_mean_shift_by_three_aa_standard_errors_fails(tmp_path: Path) -> None:
    """Every score moves by Gaussian noise (sd 1) in A' and in B; B's also 3 A/A standard errors higher on
    average (0.3 at 100 outputs). Each move is within the numeric band; the mean is not."""
    n = 100
    rng = random.Random(4)
    a = base(n)
    g, h = orthonormal_noise(n, rng)
    shift = 3 * 1.0 / math.sqrt(n)
    a2, b = copy.deepcopy(a), copy.deepcopy(a)
    for i in range(n):
        a2[i]["score"] = a[i]["score"] + g[i]
        b[i]["score"] = a[i]["score"] + h[i] + shift
    result = compare(tmp_path, a, a2, b)
    assert result.verdict == "FAIL", result.reasons
    reason = shift_reason(result)
    assert reason is not None and reason.fields == ["$.score"]
    assert "$.score: mean shifted by +0.300 " in reason.message, reason.message
    assert "3.0 A/A standard errors" in reason.message, reason.message


def test_the_same_shift_is_immaterial_on_a_huge_window(tmp_path: Path) -> None:
    """Kept: 3 A/A standard errors of 10,000 outputs is 3% of the A/A's move per output, below the relative
    margin (a quarter of it): significant, not material."""
    n = 10_000
    rng = random.Random(5)
    a = base(n)
    g, h = orthonormal_noise(n, rng)
    shift = 3 * 1.0 / math.sqrt(n)
    a2, b = copy.deepcopy(a), copy.deepcopy(a)
    for i in range(n):
        a2[i]["score"] = a[i]["score"] + g[i]
        b[i]["score"] = a[i]["score"] + h[i] + shift
    result = compare(tmp_path, a, a2, b)
    assert shift_reason(result) is None, result.reasons


def noisy(rows: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """One run of a noisy agent: 8% of decisions flipped at random, 30% of citation lists one longer or shorter,
    every score jittered (sd 0.5)."""
    out = copy.deepcopy(rows)
    for row in out:
        if rng.random() < 0.08:
            flip(row)
        if rng.random() < 0.3:
            if rng.random() < 0.5:
                row["citations"].append("kb-999")
            else:
                row["citations"].pop()
        row["score"] = round(row["score"] + rng.gauss(0, 0.5), 4)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pure_aa_noise_never_fails(tmp_path: Path, seed: int) -> None:
    """Kept: A, A' and B are three draws of the same noisy agent; no shift, so never a FAIL."""
    rng = random.Random(f"aa:{seed}")
    truth = base(seed=seed)
    result = compare(tmp_path, noisy(truth, rng), noisy(truth, rng), noisy(truth, rng))
    assert result.verdict != "FAIL", result.reasons
    assert shift_reason(result) is None

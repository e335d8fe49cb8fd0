"""The comparison must not be fooled (issue 13 §2): map-keyed outputs, numeric noise judged by size, rules
that silently miss, and lists of objects whose order does not matter.

Each test failed before the change it covers.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare import CompareConfig, CompareInputError, FieldRule, compare_runs
from airflow_flink_replay.core.compare.synthetic import make_run, write_jsonl, write_runs

N = 400


def fail_fields(result) -> set[str]:
    return {f for r in result.reasons if r.severity == "fail" for f in r.fields}


# ------------------------------------------------------------------------------------------ map-keyed outputs
def sku_outputs(n: int, flip: float = 0.0, skus_per_output: int = 1, seed: int = 0) -> list[dict[str, Any]]:
    """Each output holds a map keyed by its own SKU ids: ``{"decision_by_sku": {"SKU00042": "approve"}}``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        decisions = {}
        for j in range(skus_per_output):
            sku = f"SKU{i * skus_per_output + j:05d}"
            d = "approve" if (i + j) % 3 else "reject"
            if flip and rng.random() < flip:
                d = "reject" if d == "approve" else "approve"
            decisions[sku] = d
        out.append({"id": f"r-{i}", "decision_by_sku": decisions})
    return out


def test_map_keyed_outputs_that_flip_every_decision_fail(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, sku_outputs(N), sku_outputs(N), sku_outputs(N, flip=1.0))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL", result.reasons
    stat = next(f for f in result.fields if f.path == "$.decision_by_sku.*")
    assert stat.candidate_rate == 1.0 and stat.status == "regression"
    assert "$.decision_by_sku.*" in fail_fields(result)
    # the varying ids are collapsed: no field per SKU
    assert not any("SKU" in f.path for f in result.fields)


def test_map_keyed_outputs_rate_counts_outputs_not_leaves(tmp_path: Path) -> None:
    """Three SKUs per output, one of them flipped in 10 % of outputs: the rate is per output (10 %)."""
    a, a2, b = write_runs(
        tmp_path,
        sku_outputs(N, skus_per_output=3),
        sku_outputs(N, skus_per_output=3),
        [
            {**o, "decision_by_sku": {**o["decision_by_sku"], next(iter(o["decision_by_sku"])): "flipped"}}
            if i % 10 == 0
            else o
            for i, o in enumerate(sku_outputs(N, skus_per_output=3))
        ],
    )
    result = compare_runs(a, b, a2, key="$.id")
    stat = next(f for f in result.fields if f.path == "$.decision_by_sku.*")
    assert stat.candidate_rate == pytest.approx(0.1)
    assert result.verdict == "FAIL"


def test_map_keyed_outputs_equal_pass(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, sku_outputs(N), sku_outputs(N), sku_outputs(N))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "PASS", result.reasons


def test_explicit_map_path_collapses_a_small_map(tmp_path: Path) -> None:
    """Too few outputs for detection: ``map_paths`` says it."""
    n = 30
    a, a2, b = write_runs(tmp_path, sku_outputs(n), sku_outputs(n), sku_outputs(n, flip=1.0))
    result = compare_runs(a, b, a2, key="$.id", config=CompareConfig(map_paths=["$.decision_by_sku"]))
    assert {f.path for f in result.fields} == {"$.id", "$.decision_by_sku.*"}
    assert result.verdict == "FAIL"


def test_output_level_rate_catches_a_change_spread_over_many_fields(tmp_path: Path) -> None:
    """Each of 20 fields changes in 1.5 % of outputs (below the 2-point margin), 30 % of outputs change."""
    n, k = 2000, 20
    rng = random.Random(3)

    def outs(change: bool) -> list[dict[str, Any]]:
        recs = [{"id": f"r-{i}", **{f"f{j}": "x" for j in range(k)}} for i in range(n)]
        if change:
            for j in range(k):
                for i in rng.sample(range(n), n * 15 // 1000):
                    recs[i][f"f{j}"] = "y"
        return recs

    a, a2, b = write_runs(tmp_path, outs(False), outs(False), outs(True))
    result = compare_runs(a, b, a2, key="$.id")
    assert all(f.status == "ok" for f in result.fields)
    assert result.outputs is not None and result.outputs.candidate_rate > 0.2
    assert result.outputs.status == "regression"
    assert result.verdict == "FAIL"
    assert "OUTPUT_REGRESSION" in {r.code for r in result.reasons}


# ------------------------------------------------------------------------------- numeric noise judged by size
def scored(n: int, seed: int, jitter: float = 0.0, shift: float = 0.0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "id": f"r-{i}",
            "label": "ok",
            "confidence": round(0.3 + (i % 50) / 100 + shift + rng.uniform(-jitter, jitter), 6),
        }
        for i in range(n)
    ]


def test_scores_jittering_alike_in_both_baselines_and_candidate_pass(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, scored(N, 1, 0.002), scored(N, 2, 0.002), scored(N, 3, 0.002))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "PASS", result.reasons
    conf = next(f for f in result.fields if f.path == "$.confidence")
    assert conf.noise_band_abs is not None and 0.002 < conf.noise_band_abs <= 0.004
    assert conf.status == "ok"


def test_scores_shifted_beyond_the_noise_band_fail(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, scored(N, 1, 0.002), scored(N, 2, 0.002), scored(N, 3, 0.002, shift=0.15))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL", result.reasons
    assert "$.confidence" in fail_fields(result)
    conf = next(f for f in result.fields if f.path == "$.confidence")
    assert conf.candidate_rate == 1.0 and conf.noise_rate is not None and conf.noise_rate < 0.05


def test_jitter_near_zero_is_noise_by_its_size_though_large_relative_to_the_value(tmp_path: Path) -> None:
    """Scores clipped at 0 in both baselines come out at 0.01-0.03 in the candidate, the jitter every score
    has: relative to the value that is 100 %, far beyond the relative band the other scores set. Within the
    absolute band it is noise (a pair counts only when it is outside both bands) — counted, it made a noisy
    A/A/A run FAIL on $.score."""
    def clipped(seed: int, lifted: bool) -> list[dict[str, Any]]:
        rng = random.Random(seed)
        rows = scored(N, seed, 0.02)
        for row in rows[: N // 10]:  # a tenth sit at the clip, 0
            row["confidence"] = round(rng.uniform(0.01, 0.03), 6) if lifted else 0.0
        return rows

    a, a2, b = write_runs(tmp_path, clipped(1, False), clipped(2, False), clipped(3, True))
    result = compare_runs(a, b, a2, key="$.id")
    conf = next(f for f in result.fields if f.path == "$.confidence")
    assert conf.status == "ok" and result.verdict == "PASS", (conf, result.reasons)


def test_numeric_band_off_keeps_counting_every_difference(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, scored(N, 1, 0.002), scored(N, 2, 0.002), scored(N, 3, 0.002))
    result = compare_runs(a, b, a2, key="$.id", config=CompareConfig(numeric_noise_band=False))
    assert result.verdict == "INCONCLUSIVE"


# ------------------------------------------------------------------------------------- rules that silently miss
def accented(n: int, change: bool) -> list[dict[str, Any]]:
    return [
        {"id": f"r-{i}", "priorité": "haute" if change and i % 2 else "basse", "a b": f"v{i}" if change else "v"}
        for i in range(n)
    ]


def test_non_ascii_field_names_are_reported_and_matched_as_written(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, accented(N, False), accented(N, False), accented(N, True))
    result = compare_runs(
        a,
        b,
        a2,
        key="$.id",
        config=CompareConfig(fields=[FieldRule(path="$.priorité", must_not_change=True)]),
        ignore=["$['a b']"],
    )
    paths = {f.path for f in result.fields}
    assert paths == {"$.id", "$.priorité"}  # no JSON escapes, $['a b'] ignored
    assert "MUST_NOT_CHANGE" in {r.code for r in result.reasons}
    assert result.verdict == "FAIL"


@pytest.mark.parametrize("rule", ['$["priorit\\u00e9"]', "$['priorité']", '$["priorité"]'])
def test_rule_spellings_are_normalised_to_one_form(rule: str) -> None:
    assert FieldRule(path=rule).path == "$.priorité"
    assert CompareConfig(ignore=[rule]).ignore == ["$.priorité"]


def test_rule_without_dollar_is_refused(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, accented(30, False), accented(30, False), accented(30, False))
    with pytest.raises(CompareInputError, match="must start with '\\$'"):
        compare_runs(a, b, a2, key="$.id", ignore=["label"])
    with pytest.raises(ValueError, match="must start with '\\$'"):
        CompareConfig(ignore=["label"])


def test_rule_matching_no_path_is_a_warning(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, accented(30, False), accented(30, False), accented(30, False))
    result = compare_runs(
        a,
        b,
        a2,
        key="$.id",
        config=CompareConfig(fields=[FieldRule(path="$.priority", must_not_change=True)]),
        ignore=["$.lable"],
    )
    warnings = result.summary()["warnings"]
    assert any("$.priority" in w for w in warnings) and any("$.lable" in w for w in warnings), warnings
    assert result.verdict == "PASS"


# ------------------------------------------------------------------------------------- lists of objects
def citations(n: int, shuffle: bool, drop: bool = False) -> list[dict[str, Any]]:
    rng = random.Random(7)
    out = []
    for i in range(n):
        cites = [{"doc": f"d{i}-{j}", "score": j} for j in range(3)]
        if shuffle:
            rng.shuffle(cites)
        if drop:
            cites = cites[:2]
        out.append({"id": f"r-{i}", "citations": cites, "nested": [[{"t": "x"}, {"t": "y"}]]})
    return out


def test_lists_of_objects_compared_as_multisets_when_order_does_not_matter(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, citations(N, False), citations(N, False), citations(N, True))
    by_index = compare_runs(a, b, a2, key="$.id")
    assert by_index.verdict == "FAIL"  # by index (the default), a reordering is a change
    multiset = compare_runs(a, b, a2, key="$.id", config=CompareConfig(list_mode="multiset"))
    assert multiset.verdict == "PASS", multiset.reasons
    cit = next(f for f in multiset.fields if f.path == "$.citations")
    assert cit.comparator == "multiset"
    per_path = CompareConfig(fields=[FieldRule(path="$.citations", comparator="multiset")])
    assert compare_runs(a, b, a2, key="$.id", config=per_path).verdict == "PASS"


def test_multiset_still_sees_a_dropped_element(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, citations(N, False), citations(N, False), citations(N, True, drop=True))
    result = compare_runs(a, b, a2, key="$.id", config=CompareConfig(list_mode="multiset"))
    assert result.verdict == "FAIL"
    assert "$.citations" in fail_fields(result)


def test_multiset_counts_duplicates(tmp_path: Path) -> None:
    def outs(dup: bool) -> list[dict[str, Any]]:
        return [{"id": f"r-{i}", "tools": ["a", "a", "b"] if dup else ["a", "b"]} for i in range(N)]

    a, a2, b = write_runs(tmp_path, outs(False), outs(False), outs(True))
    assert compare_runs(a, b, a2, key="$.id").verdict == "PASS"  # lists of scalars: sets by default
    assert compare_runs(a, b, a2, key="$.id", config=CompareConfig(list_mode="multiset")).verdict == "FAIL"


def test_generated_jitter_in_every_run_passes_with_the_band(tmp_path: Path) -> None:
    jitter = {"jitter": 0.002}
    a = write_jsonl(tmp_path / "a.jsonl", make_run(N, "baseline", 1, **jitter))
    a2 = write_jsonl(tmp_path / "a2.jsonl", make_run(N, "baseline_2", 2, **jitter))
    b = write_jsonl(tmp_path / "b.jsonl", make_run(N, "candidate", 3, **jitter))
    assert compare_runs(a, b, a2, key="$.id").verdict == "PASS"


def test_sparse_top_level_fields_are_never_collapsed(tmp_path: Path) -> None:
    """The output object itself is a record: 40 optional top-level fields, two per output, stay fields."""
    recs = [{"id": f"r-{i}", f"opt{i % 40}": i, f"opt{(i + 1) % 40}": "x"} for i in range(N)]
    a, a2, b = write_runs(tmp_path, recs, recs, recs)
    result = compare_runs(a, b, a2, key="$.id")
    assert "$.id" in {f.path for f in result.fields} and "$.*" not in {f.path for f in result.fields}
    assert len(result.fields) == 41

"""More than one A/A pair (``aa_replays`` > 1): the noise is measured on the baseline paired with every other
baseline run, pooled, each pair's own rate shown; the significance tests count the pooled pairs as one pair's
worth (they share the baseline's run); missing and extra outputs are judged against one pair's mean; the
spilled path agrees with memory."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.engine import noise_pairs
from airflow_flink_replay.core.compare.stats import newcombe_lower, z_one_sided
from airflow_flink_replay.exceptions import CompareInputError

N = 400


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(seed: int, flip: float, n: int = N, drop: float = 0.0) -> list[dict[str, Any]]:
    """A noisy agent's run: ``label`` is ``ok`` unless this run's draw flips it (``flip`` of outputs, at random
    positions of their own per ``seed``); ``drop`` of outputs are lost."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        if rng.random() < drop:
            continue
        rows.append({"id": f"r-{i}", "label": "review" if rng.random() < flip else "ok", "n": i})
    return rows


def _files(tmp_path: Path, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Path]:
    return {name: _write(tmp_path / f"{name}.jsonl", rows) for name, rows in runs.items()}


def test_pairs_are_the_baseline_with_every_other_baseline_run() -> None:
    assert noise_pairs(2) == [(0, 1)]
    assert noise_pairs(3) == [(0, 1), (0, 2)]
    assert noise_pairs(5) == [(0, 1), (0, 2), (0, 3), (0, 4)]


def _closer(rows: list[dict[str, Any]], share: float, seed: int) -> list[dict[str, Any]]:
    """``rows`` again with the label of exactly ``share`` of them flipped: a run that agrees with ``rows`` more
    than the agent's noise lets two runs agree."""
    out = [dict(r) for r in rows]
    for i in random.Random(seed).sample(range(len(out)), round(share * len(out))):
        out[i]["label"] = "ok" if out[i]["label"] == "review" else "review"
    return out


def test_a_lucky_baseline_2_no_longer_fails_the_agent_against_itself(tmp_path: Path) -> None:
    """A noisy agent (10% of labels flip in every run: two runs differ in about 18%) whose one baseline-2
    happened to agree with the baseline more (8%): with that pair alone, the candidate — the same agent —
    FAILs; with two more baseline runs the noise is measured on three pairs, close to the agent's own, and the
    same candidate no longer FAILs. Noise rates of each pair are shown."""
    base = _run(1, 0.10)
    lucky = _closer(base, 0.08, seed=2)
    files = _files(
        tmp_path,
        {"a": base, "a2": lucky, "a3": _run(3, 0.10), "a4": _run(4, 0.10), "b": _run(5, 0.10)},
    )
    config = CompareConfig(volatile_noise_rate=None)
    one = compare_runs(files["a"], files["b"], files["a2"], key="$.id", config=config)
    assert one.verdict == "FAIL", one.reasons
    many = compare_runs(
        files["a"], files["b"], files["a2"], key="$.id", config=config, extra_baselines=[files["a3"], files["a4"]]
    )
    assert many.verdict != "FAIL", [r.message for r in many.reasons]  # this candidate: 21.5% vs 17.1%, not sure
    assert many.counts.noise_pairs == 3 and many.summary()["noise_pairs"] == 3
    assert [p.pair for p in many.noise_pairs] == [
        "baseline ~ baseline_2",
        "baseline ~ baseline_3",
        "baseline ~ baseline_4",
    ]
    label = next(f for f in many.fields if f.path == "$.label")
    assert label.noise_n == 3 * N
    assert label.noise_pair_rates is not None and label.noise_pair_rates[0] == 0.08
    assert label.noise_spread is not None and label.noise_spread[1] > 0.14
    assert label.noise_rate == pytest.approx(sum(label.noise_pair_rates) / 3, abs=1e-3)
    assert many.inputs["baseline_3"] == str(files["a3"]) and many.inputs["baseline_4"] == str(files["a4"])


def test_a_real_change_still_fails_with_several_pairs(tmp_path: Path) -> None:
    """The same noisy agent, and a candidate that sends 40% of outputs to review: FAIL, on the pooled noise."""
    files = _files(
        tmp_path,
        {"a": _run(1, 0.1), "a2": _run(2, 0.1), "a3": _run(3, 0.1), "b": _run(5, 0.4)},
    )
    result = compare_runs(files["a"], files["b"], files["a2"], key="$.id", extra_baselines=[files["a3"]])
    assert result.verdict == "FAIL"
    assert "$.label" in next(r for r in result.reasons if r.code == "FIELD_REGRESSION").fields


def test_the_bound_counts_pooled_pairs_as_one_pairs_worth(tmp_path: Path) -> None:
    """Three baseline runs make two pairs that share the baseline's run: the rate is the pooled one, the bound
    counts the pooled counts as one pair's (weight 1/2); with one pair it is the plain bound."""
    files = _files(tmp_path, {"a": _run(1, 0.1), "a2": _run(2, 0.1), "a3": _run(3, 0.1), "b": _run(5, 0.2)})
    config = CompareConfig(alpha=0.05, volatile_noise_rate=None)
    result = compare_runs(files["a"], files["b"], files["a2"], key="$.id", config=config, extra_baselines=[files["a3"]])
    label = next(f for f in result.fields if f.path == "$.label")
    assert label.noise_diffs is not None and label.noise_n == 2 * N
    z = z_one_sided(0.05)  # only the label differs: one test at most, no Bonferroni correction
    x1, n1, x0, n0 = label.candidate_diffs, label.candidate_n, label.noise_diffs, label.noise_n
    assert label.lower_bound == pytest.approx(newcombe_lower(x1, n1, x0 * 0.5, n0 * 0.5, z))  # type: ignore[arg-type]
    assert label.lower_bound < newcombe_lower(x1, n1, x0, n0, z)  # pooled alone, they would claim more precision


def test_missing_outputs_are_judged_against_one_pairs_mean(tmp_path: Path) -> None:
    """Every baseline run loses about 5% of outputs; a candidate that loses as many is within the noise, though
    the pooled count over three pairs is three times one pair's."""
    files = _files(
        tmp_path,
        {
            "a": _run(1, 0.0),
            "a2": _run(2, 0.0, drop=0.05),
            "a3": _run(3, 0.0, drop=0.05),
            "b": _run(5, 0.0, drop=0.05),
        },
    )
    result = compare_runs(files["a"], files["b"], files["a2"], key="$.id", extra_baselines=[files["a3"]])
    assert result.counts.missing_in_baseline_2 is not None
    assert result.counts.missing_in_baseline_2 > 1.5 * result.counts.missing_in_candidate  # pooled over pairs
    assert not [r for r in result.reasons if r.code == "MISSING_OUTPUTS"], result.reasons
    assert result.verdict == "PASS"
    assert sum(p.missing for p in result.noise_pairs) == result.counts.missing_in_baseline_2


def test_the_spilled_comparison_pools_the_same_pairs(tmp_path: Path) -> None:
    files = _files(tmp_path, {"a": _run(1, 0.1), "a2": _run(2, 0.1), "a3": _run(3, 0.1), "b": _run(5, 0.1)})
    args = dict(key="$.id", extra_baselines=[files["a3"]])
    memory = compare_runs(files["a"], files["b"], files["a2"], **args)  # type: ignore[arg-type]
    spilled = compare_runs(
        files["a"],
        files["b"],
        files["a2"],
        config=CompareConfig(spill_above_mb=0, spill_workers=1),
        **args,  # type: ignore[arg-type]
    )
    assert spilled.verdict == memory.verdict
    assert spilled.noise_pairs == memory.noise_pairs
    assert [(f.path, f.noise_diffs, f.noise_n, f.noise_pair_rates) for f in spilled.fields] == [
        (f.path, f.noise_diffs, f.noise_n, f.noise_pair_rates) for f in memory.fields
    ]


def test_more_baselines_need_baseline_2(tmp_path: Path) -> None:
    files = _files(tmp_path, {"a": _run(1, 0.1), "a3": _run(3, 0.1), "b": _run(5, 0.1)})
    with pytest.raises(CompareInputError, match="baseline-2"):
        compare_runs(files["a"], files["b"], None, key="$.id", extra_baselines=[files["a3"]])


def test_one_pair_is_reported_as_one(tmp_path: Path) -> None:
    files = _files(tmp_path, {"a": _run(1, 0.1), "a2": _run(2, 0.1), "b": _run(5, 0.1)})
    result = compare_runs(files["a"], files["b"], files["a2"], key="$.id")
    assert result.counts.noise_pairs == 1
    assert result.noise_pairs == []  # the pair is the comparison's A/A; its figures are the fields' own
    assert all(f.noise_pair_rates is None for f in result.fields)


def test_the_report_shows_each_pair_and_each_fields_spread(tmp_path: Path) -> None:
    from airflow_flink_replay.core.compare.reports import render_html

    base = _run(1, 0.10)
    files = _files(tmp_path, {"a": base, "a2": [dict(r) for r in base], "a3": _run(3, 0.1), "b": _run(5, 0.1)})
    html = render_html(compare_runs(files["a"], files["b"], files["a2"], key="$.id", extra_baselines=[files["a3"]]))
    assert 'id="noise-pairs"' in html and "baseline ~ baseline_3" in html
    assert "over 2 pairs" in html
    assert "pairs 0.0%\u2013" in html  # $.label: the lucky pair's 0% next to the other's
    assert "one pair&#39;s worth of evidence" in html or "one pair's worth of evidence" in html


def test_the_text_rules_weigh_pooled_pairs_alike(tmp_path: Path) -> None:
    """The meaning rule's exact test counts the pooled A/A outputs as one pair's worth, as the fields do: its
    p-value is Fisher's on the weighted counts, while the report shows the pooled ones."""
    from airflow_flink_replay.core.compare.stats import fisher_greater
    from airflow_flink_replay.core.compare.synthetic import make_run, write_jsonl

    runs = {name: make_run(300, name, seed, paraphrase=0.3) for seed, name in enumerate(["a", "a2", "a3", "b"], 1)}
    files = {name: write_jsonl(tmp_path / f"{name}.jsonl", rows) for name, rows in runs.items()}
    result = compare_runs(files["a"], files["b"], files["a2"], key="$.id", extra_baselines=[files["a3"]])
    stats = [m for m in result.meaning if m.noise_n and m.p_value is not None and m.kind != "judge"]
    assert stats, "the paraphrases change decision words between the baselines"
    for m in stats:
        assert m.noise_n == 600
        x0, n0 = round((m.noise_outputs or 0) * 0.5), 300
        assert m.p_value == pytest.approx(fisher_greater(m.candidate_outputs, m.candidate_n, x0, n0))

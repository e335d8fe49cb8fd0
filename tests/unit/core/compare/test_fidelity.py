"""Fidelity: the baseline's outputs against production's own outputs for the same input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from airflow_flink_replay.core.compare import CompareConfig, compare_runs, render_html, render_junit
from airflow_flink_replay.core.compare.fidelity import measure_fidelity, with_fidelity

N = 40


def outputs(path: Path, *, flip_every: int = 0, replay: bool = True, drop: int = 0) -> Path:
    rows = []
    for i in range(N - drop):
        row = {"id": f"r-{i}", "label": "negative" if flip_every and i % flip_every == 0 else "positive",
               "score": 0.5, "summary": f"review {i}"}
        if replay:
            row["_replay"] = {"variant": "baseline", "event_time_ms": 1000 + i}
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def relabelled(source: Path, path: Path, *, every: int) -> Path:
    """``source`` with the label of every ``every``-th output changed."""
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    for i, row in enumerate(rows):
        if i % every == 0:
            row["label"] = "neutral"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_faithful_baseline_equals_production_whatever_the_replay_adds(tmp_path: Path) -> None:
    base = outputs(tmp_path / "a.jsonl")
    result = compare_runs(base, base, base, key="$.id")
    stat = measure_fidelity(base, outputs(tmp_path / "p.jsonl", replay=False), key="$.id", ignore=result.ignore)
    assert (stat.equal, stat.aligned, stat.baseline_outputs, stat.rate, stat.fields) == (N, N, N, 1.0, {})
    judged = with_fidelity(result, stat)
    assert judged.verdict == "PASS" and judged.fidelity == stat
    [reason] = [r for r in judged.reasons if r.code == "FIDELITY"]
    assert reason.severity == "info" and "40 of 40 baseline outputs equal production's" in reason.message


def test_an_unfaithful_baseline_makes_the_verdict_inconclusive_naming_the_fields(tmp_path: Path) -> None:
    base = outputs(tmp_path / "a.jsonl", flip_every=4)  # 10 of 40 differ in label
    result = compare_runs(base, base, base, key="$.id")
    stat = measure_fidelity(base, outputs(tmp_path / "p.jsonl", replay=False), key="$.id", ignore=result.ignore)
    assert stat.rate == 0.75 and stat.fields == {"$.label": 10} and stat.example_keys[0] == "r-0"
    judged = with_fidelity(result, stat)
    assert judged.verdict == "INCONCLUSIVE"
    [reason] = [r for r in judged.reasons if r.code == "LOW_FIDELITY"]
    assert "30 of 40 baseline outputs equal production's" in reason.message and "$.label (10)" in reason.message
    assert 'id="fidelity"' in render_html(judged)
    suite = ET.fromstring(render_junit(judged).split("\n", 1)[1])
    case = next(c for c in suite.iter("testcase") if c.get("name") == "fidelity")
    assert case.find("skipped") is not None


def test_report_only_without_a_floor_and_ignored_fields_are_not_counted(tmp_path: Path) -> None:
    base = outputs(tmp_path / "a.jsonl", flip_every=4)
    config = CompareConfig(fidelity_floor=None, ignore=["$.label"])
    result = compare_runs(base, base, base, key="$.id", config=config)
    stat = measure_fidelity(base, outputs(tmp_path / "p.jsonl", replay=False), key="$.id", ignore=result.ignore,
                            config=config)
    assert stat.rate == 1.0  # the ignored label is not compared
    flipped = measure_fidelity(base, outputs(tmp_path / "p.jsonl", replay=False), key="$.id", ignore=[],
                               config=CompareConfig(fidelity_floor=None))
    assert with_fidelity(result, flipped).verdict == "PASS"


def test_outputs_production_did_not_make_count_against_fidelity(tmp_path: Path) -> None:
    base = outputs(tmp_path / "a.jsonl")
    result = compare_runs(base, base, base, key="$.id")
    stat = measure_fidelity(base, outputs(tmp_path / "p.jsonl", replay=False, drop=10), key="$.id",
                            ignore=result.ignore)
    assert (stat.aligned, stat.equal, stat.rate) == (30, 30, 0.75)
    message = next(r for r in with_fidelity(result, stat).reasons if r.code == "LOW_FIDELITY").message
    assert "10 have no production output to compare with" in message


def test_a_floor_that_does_not_apply_is_said_and_the_verdict_stands(tmp_path: Path) -> None:
    base = outputs(tmp_path / "a.jsonl", flip_every=4)
    result = compare_runs(base, base, base, key="$.id")
    stat = measure_fidelity(base, outputs(tmp_path / "p.jsonl", replay=False), key="$.id", ignore=result.ignore)
    judged = with_fidelity(result, stat, not_enforced="the savepoint was taken while production kept running")
    assert judged.verdict == "PASS" and [r.code for r in judged.reasons] == ["FIDELITY"]
    assert "below the floor 90%, not enforced: the savepoint was taken" in judged.reasons[0].message


def test_a_noisy_agent_is_judged_against_how_well_it_reproduces_itself(tmp_path: Path) -> None:
    """An agent that samples differs from production about as often as from its own second run: that is
    noise, not infidelity; the same replay differing from production far more than from itself is not."""
    base = outputs(tmp_path / "a.jsonl", flip_every=4)  # 30 of 40 equal production's
    base_2 = relabelled(base, tmp_path / "a2.jsonl", every=10)  # baseline vs baseline-2: 36 of 40 equal
    production = outputs(tmp_path / "p.jsonl", replay=False)
    result = compare_runs(base, base, base_2, key="$.id")
    stat = measure_fidelity(base, production, key="$.id", ignore=result.ignore, baseline_2=base_2)
    assert (stat.rate, stat.self_rate) == (0.75, 0.9) and round(stat.relative or 0, 4) == 0.8333
    judged = with_fidelity(result, stat)
    assert judged.verdict == "INCONCLUSIVE"  # 83% of what the agent's own noise allows: below the 90% floor
    message = next(r for r in judged.reasons if r.code == "LOW_FIDELITY").message
    assert "the baseline reproduces itself (baseline-2) in 90.0%: relative to the agent's own noise the " \
           "fidelity is 83%" in message
    noisier = relabelled(base, tmp_path / "a3.jsonl", every=3)  # baseline vs this: 26 of 40 equal
    stat = measure_fidelity(base, production, key="$.id", ignore=result.ignore, baseline_2=noisier)
    assert stat.self_rate == 0.65 and stat.relative == 1.0 and with_fidelity(result, stat).verdict == result.verdict


def test_without_a_second_baseline_the_floor_applies_to_the_rate_itself(tmp_path: Path) -> None:
    base = outputs(tmp_path / "a.jsonl", flip_every=4)
    result = compare_runs(base, base, base, key="$.id")
    stat = measure_fidelity(base, outputs(tmp_path / "p.jsonl", replay=False), key="$.id", ignore=result.ignore)
    assert stat.self_rate is None and stat.relative == stat.rate == 0.75


def test_equal_means_equal_as_the_comparison_judges_it(tmp_path: Path) -> None:
    """A score that moves within the band the two baselines showed and a summary reworded above the text
    threshold are not infidelity; a score far outside the band is."""
    def run(path: str, jitter: float, summary: str) -> Path:
        rows = [{"id": f"r-{i}", "label": "positive", "score": round(0.5 + (jitter if i % 2 else -jitter), 3),
                 "summary": f"review {i}: {summary}"} for i in range(N)]
        path_ = tmp_path / path
        path_.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path_

    base = run("a.jsonl", 0.0, "the kettle arrived broken and the box was crushed")
    base_2 = run("a2.jsonl", 0.02, "the kettle arrived broken, the box was crushed")
    result = compare_runs(base, base, base_2, key="$.id")
    close = measure_fidelity(base, run("p.jsonl", 0.01, "the kettle arrived broken and its box was crushed"),
                             key="$.id", ignore=result.ignore, baseline_2=base_2)
    assert (close.rate, close.self_rate) == (1.0, 1.0)
    far = measure_fidelity(base, run("p2.jsonl", 0.2, "the kettle arrived broken and the box was crushed"),
                           key="$.id", ignore=result.ignore, baseline_2=base_2)
    assert far.rate == 0.0 and far.fields == {"$.score": N}


def test_the_report_judges_the_card_by_the_relative_figure(tmp_path: Path) -> None:
    base = outputs(tmp_path / "a.jsonl", flip_every=4)  # 75 % equal production's
    noisier = relabelled(base, tmp_path / "a3.jsonl", every=3)  # itself: 65 %
    result = compare_runs(base, base, noisier, key="$.id")
    stat = measure_fidelity(base, outputs(tmp_path / "p.jsonl", replay=False), key="$.id", ignore=result.ignore,
                            baseline_2=noisier)
    html = render_html(with_fidelity(result, stat))
    card = html[html.index('id="fidelity"') - 40: html.index('id="fidelity"') + 400]
    assert "bad" not in card and "baseline = baseline-2" in card, card

"""Fidelity: the baseline's outputs against production's own outputs for the same input."""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path

from airflow_flink_replay.core.compare import CompareConfig, compare_runs, fidelity, render_html, render_junit
from airflow_flink_replay.core.compare.fidelity import measure_fidelity, with_fidelity

N = 40


def outputs(path: Path, *, flip_every: int = 0, replay: bool = True, drop: int = 0, n: int = N) -> Path:
    rows = []
    for i in range(n - drop):
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
    noise, not infidelity; the same replay differing from production far more than from itself is not. The floor
    applies to the figure's upper confidence bound: a dip within chance of it is no infidelity (it was: a correct
    A/A of the noisy demo, 79 of 100 equal production against 90 of 100 equal baseline-2, came out INCONCLUSIVE)."""
    def judged_at(n: int, name: str, base_2_every: int) -> tuple[fidelity.FidelityStat, str, str]:
        base = outputs(tmp_path / f"{name}-a.jsonl", flip_every=4, n=n)  # 3 in 4 equal production's
        base_2 = relabelled(base, tmp_path / f"{name}-a2.jsonl", every=base_2_every)
        production = outputs(tmp_path / f"{name}-p.jsonl", replay=False, n=n)
        result = compare_runs(base, base, base_2, key="$.id")
        stat = measure_fidelity(base, production, key="$.id", ignore=result.ignore, baseline_2=base_2)
        judged = with_fidelity(result, stat)
        reason = next(r for r in judged.reasons if r.code in ("FIDELITY", "LOW_FIDELITY"))
        return stat, judged.verdict, reason.message

    stat, verdict, message = judged_at(40, "small", 10)  # baseline vs baseline-2: 36 of 40 equal
    assert (stat.rate, stat.self_rate) == (0.75, 0.9) and round(stat.relative or 0, 4) == 0.8333
    assert verdict == "PASS"  # 83% of what the agent's own noise allows, but 40 outputs cannot tell it from 90%
    assert "relative to the agent's own noise the fidelity is 83% (up to 94% at 95% confidence: within chance " \
           "of the floor)" in message
    stat, verdict, message = judged_at(400, "large", 10)  # the same shares, ten times the evidence
    assert (stat.rate, stat.self_rate) == (0.75, 0.9) and verdict == "INCONCLUSIVE"
    assert "the baseline does not reproduce production" in message and "fidelity is 83%" in message
    stat, verdict, _ = judged_at(40, "noisier", 3)  # baseline vs this: 26 of 40 equal
    assert stat.self_rate == 0.65 and stat.relative == 1.0 and verdict == "PASS"


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


# Several outputs per key: an agent that emits two outputs per input record, 5 keys, 8 records per key (a
# 40-record window), production's outputs spread over 2 partitions of its output topic and read back in any
# order, the replay's read back from result topics in any order.
KEYS = 5
RECORDS = 40


def record_outputs(i: int) -> list[dict]:
    """The two outputs of input record ``i``: its key is ``k-<i % 5>``, its event time ``10_000 + 10 i``."""
    key = f"k-{i % KEYS}"
    return [{"id": key, "kind": "triage", "label": "negative" if i % 3 else "positive", "seen": i // KEYS},
            {"id": key, "kind": "reply", "text": f"thanks for review {i // KEYS} of {key}", "seen": i // KEYS}]


def event_time(i: int) -> int:
    return 10_000 + 10 * i


def replay_run(path: Path, *, variant: str = "baseline", seed: int = 1, timed: bool = True) -> Path:
    """The replay's outputs as its job writes them (``_replay`` with the event time), lines in any order."""
    rows = []
    for i in range(RECORDS):
        for out in record_outputs(i):
            meta = {"variant": variant, "partition": None, "offset": None, "watermark_ms": event_time(i) - 1}
            if timed:
                meta["event_time_ms"] = event_time(i)
            rows.append({**out, "_replay": meta})
    random.Random(seed).shuffle(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def production_run(path: Path, *, timestamps: bool = True, change: tuple[int, str] | None = None,
                   pre_window: bool = True) -> Path:
    """Production's outputs as ``export_outputs`` writes them: 2 partitions read one after the other (each in
    its own offset order, records of a key in any partition), the record before the window's output first,
    and ``change``: (record, new label) for one output that really differs."""
    rows = []
    if pre_window:  # the offsets read at the savepoint include the output of the last record before the window
        rows.append(({"id": "k-4", "kind": "triage", "label": "positive", "seen": -1}, event_time(-1)))
    for i in range(RECORDS):
        for out in record_outputs(i):
            if change and change[0] == i and out["kind"] == "triage":
                out = {**out, "label": change[1]}
            rows.append((out, event_time(i)))
    rng = random.Random(3)
    rng.shuffle(rows)
    parts: list[list[dict]] = [[], []]
    for out, t in rows:
        p = rng.randrange(2)
        parts[p].append({**out, "_replay": {"variant": "production", "event_time_ms": t if timestamps else None,
                                            "partition": p, "offset": len(parts[p])}})
    path.write_text("".join(json.dumps(r) + "\n" for part in parts for r in part))
    return path


def test_several_outputs_per_key_are_matched_per_input_record_in_any_order(tmp_path: Path) -> None:
    """Pairing the n-th output of a key with the n-th counted these byte-identical outputs as different; the
    output of the record before the window is no record of the baseline's and is not counted."""
    base = replay_run(tmp_path / "a.jsonl")
    stat = measure_fidelity(base, production_run(tmp_path / "p.jsonl"), key="$.id", ignore=[])
    assert (stat.baseline_outputs, stat.production_outputs) == (80, 81)
    assert (stat.aligned, stat.equal, stat.rate, stat.fields) == (80, 80, 1.0, {})
    assert (stat.tie, stat.production_outside) == ("input_record", 1)
    message = next(r for r in with_fidelity(compare_runs(base, base, key="$.id"), stat).reasons
                   if r.code == "FIDELITY").message
    assert "80 of 80 baseline outputs equal production's own outputs for the same input (100.0%), matched per " \
           "input record (key + event time); 1 production outputs of other input records" in message


def test_without_timestamps_outputs_are_matched_by_content_within_the_key_and_it_is_said(tmp_path: Path) -> None:
    base = replay_run(tmp_path / "a.jsonl")
    stat = measure_fidelity(base, production_run(tmp_path / "p.jsonl", timestamps=False), key="$.id", ignore=[])
    assert (stat.aligned, stat.equal, stat.rate, stat.tie) == (80, 80, 1.0, "content")
    assert stat.tie_note == "production's outputs carry no timestamp to tie them to their input record"
    message = with_fidelity(compare_runs(base, base, key="$.id"), stat).reasons[-1].message
    assert "matched by content within each key, not per input record: production's outputs carry no" in message
    untimed = measure_fidelity(replay_run(tmp_path / "u.jsonl", timed=False), production_run(tmp_path / "p2.jsonl"),
                               key="$.id", ignore=[])
    assert (untimed.rate, untimed.tie) == (1.0, "content")
    assert untimed.tie_note == "80 of 80 baseline outputs carry no event time (_replay.event_time_ms)"


def test_timestamps_that_are_not_the_input_records_fall_back_to_content(tmp_path: Path) -> None:
    base = replay_run(tmp_path / "a.jsonl")
    production = production_run(tmp_path / "p.jsonl")
    rows = [json.loads(line) for line in production.read_text().splitlines()]
    for row in rows:  # e.g. a sink that writes the processing time
        row["_replay"]["event_time_ms"] += 7
    production.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stat = measure_fidelity(base, production, key="$.id", ignore=[])
    assert (stat.rate, stat.tie) == (1.0, "content") and "none of production's outputs" in stat.tie_note


def test_one_real_difference_is_counted_once_and_named(tmp_path: Path) -> None:
    base = replay_run(tmp_path / "a.jsonl")
    for timestamps in (True, False):
        production = production_run(tmp_path / f"p{timestamps}.jsonl", timestamps=timestamps, change=(17, "neutral"))
        stat = measure_fidelity(base, production, key="$.id", ignore=[])
        assert (stat.aligned, stat.equal, stat.fields, stat.example_keys) == (80, 79, {"$.label": 1}, ["k-2"])


def test_production_that_only_output_the_record_before_the_window_is_waited_for(tmp_path: Path) -> None:
    """Before production caught up with the window its only outputs are older than the window's records:
    that is no reason to give up the tie (a content match would pair them and end the wait early)."""
    production = tmp_path / "p.jsonl"
    production.write_text(json.dumps({"id": "k-4", "kind": "triage", "label": "positive", "seen": -1,
                                      "_replay": {"variant": "production", "event_time_ms": event_time(-1),
                                                  "partition": 0, "offset": 0}}) + "\n")
    stat = measure_fidelity(replay_run(tmp_path / "a.jsonl"), production, key="$.id", ignore=[])
    assert (stat.aligned, stat.tie, stat.production_outside) == (0, "input_record", 1)


def test_the_baselines_agreement_is_matched_per_input_record_too(tmp_path: Path) -> None:
    base = replay_run(tmp_path / "a.jsonl")
    base_2 = replay_run(tmp_path / "a2.jsonl", variant="baseline_2", seed=2)
    stat = measure_fidelity(base, production_run(tmp_path / "p.jsonl"), key="$.id", ignore=[], baseline_2=base_2)
    assert (stat.rate, stat.self_rate) == (1.0, 1.0)


def test_a_unit_beyond_the_greedy_bound_pairs_in_content_order(tmp_path: Path, monkeypatch) -> None:
    """Above GREEDY_MAX outputs on a side, what equal content leaves pairs in content order: linear, and a
    pair that the comparators find equal still counts equal."""
    monkeypatch.setattr(fidelity, "GREEDY_MAX", 1)
    base, production = tmp_path / "a.jsonl", tmp_path / "p.jsonl"
    base.write_text("".join(json.dumps({"id": "x", "n": n, "score": 1}) + "\n" for n in range(3)))
    production.write_text("".join(json.dumps({"id": "x", "n": n, "score": 1.0 if n else 2}) + "\n"
                                  for n in range(3)))
    stat = measure_fidelity(base, production, key="$.id", ignore=[])
    assert (stat.aligned, stat.equal, stat.fields) == (3, 2, {"$.score": 1})


def test_the_agents_agreement_with_itself_pools_every_other_baseline(tmp_path: Path) -> None:
    """With more baselines (aa_replays > 1), how often the baseline reproduces itself is measured against each of
    them and pooled: a lucky baseline-2 (equal to the baseline) no longer sets the bar at 100%."""
    base = outputs(tmp_path / "a.jsonl", flip_every=4)
    lucky = relabelled(base, tmp_path / "a2.jsonl", every=10**6)  # only output 0 differs: 39 of 40 equal
    other = relabelled(base, tmp_path / "a3.jsonl", every=4)  # 30 of 40 equal
    production = outputs(tmp_path / "p.jsonl", replay=False)
    one = measure_fidelity(base, production, key="$.id", ignore=[], baseline_2=lucky)
    both = measure_fidelity(base, production, key="$.id", ignore=[], baseline_2=lucky, extra_baselines=[other])
    assert one.self_rate == 39 / 40
    assert both.self_rate == (39 + 30) / 80
    assert (both.relative or 0) > (one.relative or 0)

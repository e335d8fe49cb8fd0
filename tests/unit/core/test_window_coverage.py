"""Window coverage: how far production had processed the window when the replays read its cassette, and the
verdict it leaves (a baseline served placeholders for calls production made too late is never a difference)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from airflow_flink_replay.core.compare import compare_runs
from airflow_flink_replay.core.compare.synthetic import make_run, write_jsonl
from airflow_flink_replay.core.window_coverage import (
    WindowCoverage,
    WindowUnits,
    count_times,
    records_reached,
    window_units,
    with_coverage,
)

pytestmark = pytest.mark.unit


def test_records_are_reached_by_outputs_with_their_event_time_only() -> None:
    window = count_times([100, 101, 101, 102, 0, -1])  # no timestamp: left out
    assert dict(window) == {100: 1, 101: 2, 102: 1}
    # an output of the record before the window (99) and one after it (103) reach nothing
    outputs = {99: 1, 100: 3, 101: 1, 103: 2}
    assert records_reached(window, outputs) == 2  # 100 once (3 outputs of one record), 101 once of two
    assert records_reached(window, {100: 1, 101: 2, 102: 1}) == 4


def test_coverage_is_complete_only_when_every_record_is_reached_and_it_could_be_told() -> None:
    assert WindowCoverage(records=40, reached=40).complete
    assert not WindowCoverage(records=40, reached=39).complete
    untold = WindowCoverage(records=0, reached=0, note="3 window record(s) carry no event time")
    assert not untold.complete and untold.describe().startswith("3 window record(s)")
    assert "39 of 40" in WindowCoverage(records=40, reached=39, waited_s=2.0, timeout_s=300).describe()


@pytest.fixture
def failing(tmp_path: Path):
    """A comparison that FAILs: the candidate's labels differ."""
    a = write_jsonl(tmp_path / "a.jsonl", make_run(60, "baseline", 1))
    a2 = write_jsonl(tmp_path / "a2.jsonl", make_run(60, "baseline_2", 2))
    b = write_jsonl(tmp_path / "b.jsonl", make_run(60, "candidate", 3, label_change=0.5))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL", result.reasons
    return result


def test_an_uncovered_window_with_unmatched_baseline_calls_is_inconclusive_not_fail(failing) -> None:
    coverage = WindowCoverage(records=40, reached=31, waited_s=300, timeout_s=300)
    judged = with_coverage(failing, coverage, {"baseline": 4, "baseline_2": 0, "candidate": 9})
    assert judged.verdict == "INCONCLUSIVE"
    incomplete = next(r for r in judged.reasons if r.code == "CASSETTE_INCOMPLETE")
    assert incomplete.severity == "inconclusive"
    assert "31 of 40" in incomplete.message and "baseline: 4" in incomplete.message
    assert "candidate: 9" not in incomplete.message  # the candidate's own misses are its own
    assert judged.reasons[0].code == "CASSETTE_INCOMPLETE"


def test_a_covered_window_or_no_unmatched_baseline_call_leaves_the_verdict(failing) -> None:
    for coverage, unmatched in (
        (WindowCoverage(records=40, reached=40, waited_s=3.1, timeout_s=300), {"baseline": 2}),
        (WindowCoverage(records=40, reached=31, waited_s=300, timeout_s=300), {"baseline": 0, "candidate": 5}),
    ):
        judged = with_coverage(failing, coverage, unmatched)
        assert judged.verdict == "FAIL"
        note = next(r for r in judged.reasons if r.code == "CASSETTE_COVERAGE")
        assert note.severity == "info"
    assert with_coverage(failing, None, {"baseline": 3}) is failing


def test_records_carrying_the_key_are_tied_to_their_outputs_by_time_and_key() -> None:
    """A feed stamped with one event time: 4 window records at t=100; outputs of other records at t=100 (after the
    window) would stand in for them by time alone; by time and key they do not."""
    units = window_units([(100, "r1"), (100, "r2"), (100, "r3"), (100, "r4")])
    assert isinstance(units, WindowUnits) and units.keyed is not None and units.total == 4
    later = {100: 6}
    later_units = {(100, "r9"): 3, (100, "r1"): 1, (100, "r10"): 2}
    assert units.reached(later, later_units) == (1, "")
    assert units.reached({100: 4}, {(100, f"r{i}"): 1 for i in (1, 2, 3, 4)}) == (4, "")


def test_keys_that_outputs_do_not_carry_fall_back_to_event_time() -> None:
    """An agent whose outputs do not echo the input's key: every record reached by time, none by key → by time."""
    units = window_units([(100, "a"), (101, "b"), (102, "c")])
    assert isinstance(units, WindowUnits)
    assert units.reached({100: 1, 101: 1, 102: 1}, {(100, None): 1, (101, None): 1, (102, None): 1}) == (3, "")
    # while the window is not reached by time either, it waits (by key)
    assert units.reached({100: 1}, {(100, None): 1}) == (0, "")


def test_a_window_sharing_one_event_time_without_keys_is_not_judged() -> None:
    units = window_units([(100, None)] * 20)
    assert isinstance(units, WindowUnits) and units.keyed is None
    reached, note = units.reached({100: 20}, {})
    assert reached == 20 and "share their event time" in note and "compare_key" in note
    assert not WindowCoverage(records=20, reached=reached, note=note).complete
    # a few records sharing a millisecond are told apart by count, as before
    few = window_units([(100, None), (100, None), (101, None), (102, None)])
    assert isinstance(few, WindowUnits) and few.reached({100: 2, 101: 1, 102: 1}, {}) == (4, "")
    assert window_units([(100, "a"), (0, "b")]) == (
        "1 window record(s) carry no event time: production's progress cannot be told by its outputs")


def test_outputs_carrying_other_keys_are_waited_on_until_they_show_keys_do_not_tie() -> None:
    """Outputs with keys, none of them the window's: by key nothing is reached; once twice the window's outputs
    came at its times without one match, keys are given up for event time (with its note when times repeat)."""
    units = window_units([(100, f"in{i}") for i in range(12)])
    assert isinstance(units, WindowUnits)
    some = {(100, f"out{i}"): 1 for i in range(12)}
    assert units.reached({100: 12}, some) == (0, "")  # the window's own outputs may still come
    plenty = {(100, f"out{i}"): 1 for i in range(24)}
    reached, note = units.reached({100: 24}, plenty)
    assert reached == 12 and "share their event time" in note


def test_tied_by_watermark_every_record_up_to_the_newest_output_is_reached() -> None:
    from airflow_flink_replay.core.window_coverage import records_before

    times = Counter({10: 1, 20: 2, 40: 1})
    assert records_before(times, None) == 0
    assert records_before(times, 9) == 0
    assert records_before(times, 20) == 3  # at the output's time: the window closed after it
    assert records_before(times, 39) == 3
    assert records_before(times, 40) == 4

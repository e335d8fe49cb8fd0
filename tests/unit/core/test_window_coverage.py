"""Window coverage: how far production had processed the window when the replays read its cassette, and the
verdict it leaves (a baseline served placeholders for calls production made too late is never a difference)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_flink_replay.core.compare import compare_runs
from airflow_flink_replay.core.compare.synthetic import make_run, write_jsonl
from airflow_flink_replay.core.window_coverage import WindowCoverage, count_times, records_reached, with_coverage

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

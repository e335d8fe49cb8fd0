"""Capture window decisions (pure): records, duration, explicit end offsets, start offsets at the barrier."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_flink_replay.core.capture_window import (
    CaptureWindowSpec,
    decide_by_offsets,
    link_start_offsets,
)

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


def test_records_window() -> None:
    spec = CaptureWindowSpec(topic="c", start_offsets={0: 3, 1: 2}, min_records=5)
    assert decide_by_offsets(spec, {0: 5, 1: 4}, T0) is None  # 4 past the start
    assert decide_by_offsets(spec, {0: 6, 1: 4}, T0) == ("records", {0: 6, 1: 4})


def test_duration_window_and_whichever_first() -> None:
    spec = CaptureWindowSpec(topic="c", start_offsets={0: 0}, duration_seconds=60, started_at=T0, min_records=100)
    assert decide_by_offsets(spec, {0: 7}, T0 + timedelta(seconds=59)) is None
    assert decide_by_offsets(spec, {0: 7}, T0 + timedelta(seconds=60)) == ("duration", {0: 7})
    assert decide_by_offsets(spec, {0: 100}, T0) == ("records", {0: 100})


def test_explicit_end_offsets() -> None:
    spec = CaptureWindowSpec(topic="c", start_offsets={0: 1, 1: 1}, end_offsets={0: 3, 1: 1})
    assert decide_by_offsets(spec, {0: 2, 1: 5}, T0) is None
    assert decide_by_offsets(spec, {0: 3, 1: 5}, T0) == ("end_offsets", {0: 3, 1: 1})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "the capture window has no end. Fix: give min_records"),
        ({"end_offsets": {0: 0}}, "partition 0: end offset 0 is before start offset 1"),
        ({"end_offsets": {1: 5}}, "end_offsets partitions [1] differ from start_offsets partitions [0]"),
        ({"end_offsets": {0: 5}, "min_records": 3}, "do not combine it with other ends"),
    ],
)
def test_invalid_windows(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        CaptureWindowSpec(topic="c", start_offsets={0: 1}, **kwargs)


def test_topic_shape_change_is_an_error() -> None:
    spec = CaptureWindowSpec(topic="c", start_offsets={0: 0}, min_records=1)
    with pytest.raises(ValueError, match=r"partition\(s\) \[1\] without a start offset"):
        decide_by_offsets(spec, {0: 0, 1: 0}, T0)


def test_stop_with_savepoint_start_offsets_are_exact() -> None:
    after = {0: 12, 1: 9}
    assert link_start_offsets({"mode": "drain", "production_stopped": True}, after, None) == (after, 0)
    # records written after the stop cannot exist; offsets_before only informs
    assert link_start_offsets({"mode": "stop", "production_stopped": True}, after, {0: 10, 1: 9}) == (after, 0)


def test_savepoint_mode_bounds_the_barrier_with_the_offsets_read_before() -> None:
    running = {"mode": "savepoint", "production_stopped": False}
    with pytest.raises(ValueError, match="do not mark the savepoint barrier by themselves") as err:
        link_start_offsets(running, {0: 12}, None)
    assert "offsets_before" in str(err.value)  # names the fix
    start, racing = link_start_offsets(running, {0: 12, 1: 9}, {0: 10, 1: 9})
    assert start == {0: 12, 1: 9} and racing == 2  # the replay starts after the two racing records
    assert link_start_offsets(running, {0: 12}, {0: 12}) == ({0: 12}, 0)
    with pytest.raises(ValueError, match=r"partition\(s\) \[1\]"):
        link_start_offsets(running, {0: 12, 1: 3}, {0: 10})
    with pytest.raises(ValueError, match="recreated"):
        link_start_offsets(running, {0: 5}, {0: 10})

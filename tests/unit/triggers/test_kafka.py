"""CaptureWindowTrigger: serialize() round trip; the deadline is absolute and survives a triggerer restart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_flink_replay.triggers.kafka import CaptureWindowTrigger

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


def test_trigger_serialize_round_trip() -> None:
    trigger = CaptureWindowTrigger(
        topic="capture",
        start_offsets={0: 3, 1: 2},
        kafka_config_id="kafka_x",
        min_records=7,
        duration_seconds=30.0,
        started_at=T0.isoformat(),
        poll_interval=0.5,
        timeout=60,
    )
    path, kwargs = trigger.serialize()
    assert path == "airflow_flink_replay.triggers.kafka.CaptureWindowTrigger"
    assert kwargs["start_offsets"] == {"0": 3, "1": 2}  # JSON-safe keys
    again = CaptureWindowTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)
    spec = again.spec()
    assert spec.start_offsets == {0: 3, 1: 2} and spec.min_records == 7
    assert spec.deadline() == T0 + timedelta(seconds=30)
    # the deadline survives serialization (a triggerer restart does not extend the wait)
    assert kwargs["deadline"] == trigger.deadline

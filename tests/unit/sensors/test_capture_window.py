"""The capture-window sensor (``sensors/capture_window.py``): the window it builds from its arguments, one look at
the topic, the deferral only when the window is not complete yet, and the trigger's outcome.

No broker runs in the unit tests: the hook reads from :class:`tests.fake_kafka.FakeKafka`, a named in-memory
stand-in for the broker's metadata and reading consumer; the hook's and the window's own logic run unchanged.
The sensor against the real broker and Flink: tests/integration/test_capture_window*.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook
from airflow_flink_replay.sensors.capture_window import CaptureWindowSensor
from airflow_flink_replay.triggers.kafka import CaptureWindowTrigger
from tests.fake_kafka import FakeKafka, on_fake_kafka

TOPIC = "reviews-capture"


def _kafka(records: int) -> FakeKafka:
    kafka = FakeKafka()
    kafka.create(TOPIC, partitions=1)
    for i in range(records):
        kafka.add(TOPIC, 0, 1_000 + i, b"{}")
    return kafka


def _sensor(kafka: FakeKafka, **kwargs: Any) -> CaptureWindowSensor:
    args: dict[str, Any] = {"task_id": "capture_window", "start_offsets": {"topic": TOPIC, "offsets": {0: 2}},
                            "min_records": 3, "deferrable": True}  # fmt: skip
    sensor = CaptureWindowSensor(**{**args, **kwargs})
    sensor.__dict__["hook"] = on_fake_kafka(KafkaOffsetsHook, kafka, kafka_config_id="kafka_unit")
    return sensor


def test_a_complete_window_is_returned_at_once_without_deferring() -> None:
    window = _sensor(_kafka(8)).execute({})
    assert (window["topic"], window["start_offsets"], window["end_offsets"]) == (TOPIC, {"0": 2}, {"0": 5})
    assert window["offset_span"] == 3 and window["reason"]


def test_an_incomplete_window_defers_to_the_trigger_with_the_same_window() -> None:
    sensor = _sensor(_kafka(3), poll_interval=0.5, window_timeout=60)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, CaptureWindowTrigger) and deferred.value.method_name == "execute_complete"
    _, kwargs = trigger.serialize()
    assert (kwargs["topic"], kwargs["min_records"], kwargs["poll_interval"], kwargs["timeout"]) == (TOPIC, 3, 0.5, 60)
    assert kwargs["started_at"] == sensor.started_at, "a duration counts from the sensor's first look"


def test_poke_mode_returns_the_window_when_complete_and_false_before() -> None:
    assert _sensor(_kafka(3), deferrable=False).poke({}) is False
    done = _sensor(_kafka(8), deferrable=False).poke({})
    assert done.is_done and done.xcom_value["end_offsets"] == {"0": 5}


def test_the_topic_comes_from_the_argument_or_the_start_offsets_xcom_else_a_fix_is_named() -> None:
    assert _sensor(_kafka(8), start_offsets={0: 2}, topic=TOPIC).execute({})["topic"] == TOPIC
    with pytest.raises(AirflowException, match=r"needs a topic\. Fix: pass topic="):
        _sensor(_kafka(8), start_offsets={0: 2}).execute({})


def test_a_window_with_no_end_rule_is_refused_naming_it() -> None:
    with pytest.raises(AirflowException, match="invalid capture window"):
        _sensor(_kafka(8), min_records=None).execute({})


@pytest.mark.parametrize("templated", ["", "None", None])
def test_an_empty_rendered_number_is_no_rule(templated: Any) -> None:
    """A Jinja template that renders to nothing (``""``, ``"None"``) is an absent rule, not a zero."""
    window = _sensor(_kafka(8), min_records="3", duration_seconds=templated).execute({})
    assert window["end_offsets"] == {"0": 5}


def test_the_triggers_failure_fails_the_task_with_its_message() -> None:
    sensor = _sensor(_kafka(0))
    with pytest.raises(AirflowException, match="capture window failed: window not complete after 60 s"):
        sensor.execute_complete({}, {"status": "error", "message": "window not complete after 60 s"})
    with pytest.raises(AirflowException, match="no event"):
        sensor.execute_complete({}, None)

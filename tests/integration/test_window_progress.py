"""Waiting for production to process the replay window, on the real broker (tansu): the capture topic holds
the window's input records with their event times, production's output topic its outputs stamped with them.

No Flink job here: the records a production would write are produced by the test (a stand-in for
production's sink, named as such), because what is under test is the reading and the waiting. That Flink
Agents and Flink's Kafka sink stamp production's outputs with the input's event time is shown by the gate
tests on the counter agent (tests/integration/test_verdict_trust.py)."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(120)

BASE = 1_800_000_000_000


def _topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, 2, 1) for n in names]).values():
        future.result(10)


def _produce(bootstrap: str, topic: str, records: list[tuple[int, int, dict[str, Any]]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, ts, value in records:
        producer.produce(topic, json.dumps(value).encode(), partition=partition, timestamp=ts)
        producer.flush(10)  # one record a batch: tansu's high watermark is wrong for multi-record batches


@pytest.fixture
def topics(stack, monkeypatch) -> Any:
    from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_WP",
                       json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}}))
    name = f"afr-wp-{uuid.uuid4().hex[:6]}"
    capture, outputs = f"{name}-capture", f"{name}-outputs"
    _topics(stack.kafka_bootstrap, capture, outputs)
    # the record before the window (ts BASE - 5) already has its output; the window: 6 records, two share a time
    _produce(stack.kafka_bootstrap, outputs, [(1, BASE - 5, {"id": "k0", "n": 0})])
    window = [(i % 2, BASE + (i // 2) * 10 + (i == 5), {"id": f"k{i % 3}", "n": i}) for i in range(6)]
    _produce(stack.kafka_bootstrap, capture, window)
    hook = KafkaOffsetsHook("kafka_wp")
    try:
        yield {"hook": hook, "capture": capture, "outputs": outputs, "window": window,
               "bootstrap": stack.kafka_bootstrap}
    finally:
        hook.close()
        AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).delete_topics([capture, outputs])


def _wait(t: dict[str, Any], timeout: float) -> Any:
    from airflow_flink_replay.hooks.window_progress import await_records

    return await_records(t["hook"], t["capture"], {0: (0, 3), 1: (0, 3)}, t["outputs"], {0: 0, 1: 0},
                         timeout=timeout, log=logging.getLogger("test"))


def test_the_wait_ends_when_production_has_output_every_window_record(topics) -> None:
    """Outputs arrive over ~3 s, two for one record, on both partitions, in no particular order: the wait
    returns once the last window record has its output, and not before."""
    outputs = [(i % 2, ts, {"out": i}) for i, (_p, ts, _v) in enumerate(topics["window"])]
    outputs.insert(2, (0, outputs[1][1], {"out": "second output of record 1"}))

    def production_sink_stand_in() -> None:
        for record in reversed(outputs):
            time.sleep(0.5)
            _produce(topics["bootstrap"], topics["outputs"], [record])

    writer = threading.Thread(target=production_sink_stand_in)
    started = time.monotonic()
    writer.start()
    coverage = _wait(topics, timeout=60)
    took = time.monotonic() - started
    writer.join()
    assert coverage.complete and coverage.records == coverage.reached == 6, coverage
    assert 3.0 <= took < 30, took  # 7 outputs 0.5 s apart: the last one was awaited


def test_a_record_production_never_output_times_the_wait_out_incomplete(topics) -> None:
    """Every window record but the last gets its output (the pre-window output does not stand in for it)."""
    outputs = [(0, ts, {"out": i}) for i, (_p, ts, _v) in enumerate(topics["window"][:-1])]
    _produce(topics["bootstrap"], topics["outputs"], outputs)
    coverage = _wait(topics, timeout=4)
    assert not coverage.complete and (coverage.records, coverage.reached) == (6, 5), coverage
    assert 2.5 <= coverage.waited_s <= 5, coverage
    assert "5 of 6" in coverage.describe()


def test_a_feed_stamped_with_one_time_is_tied_by_key_and_not_fooled_by_later_records(stack, monkeypatch) -> None:
    """Every record carries the same event time (a feed stamped with a fixed time, as the noisy demo's is): the
    outputs of records *after* the window, stamped alike, arrive first and reach the window's count by time; the
    wait goes on until the window's own records (their compare key) have outputs, and not before."""
    from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook
    from airflow_flink_replay.hooks.window_progress import await_records

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_WP",
                       json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}}))
    name = f"afr-wp-{uuid.uuid4().hex[:6]}"
    capture, outputs = f"{name}-capture", f"{name}-outputs"
    _topics(stack.kafka_bootstrap, capture, outputs)
    hook = KafkaOffsetsHook("kafka_wp")
    try:
        _produce(stack.kafka_bootstrap, capture, [(0, BASE, {"id": f"w{i}"}) for i in range(4)])
        # a production sink stand-in: the later records' outputs first, then the window's own, 0.5 s apart
        later = [(1, BASE, {"id": f"later{i}", "label": "x"}) for i in range(5)]
        own = [(i % 2, BASE, {"id": f"w{i}", "label": "y"}) for i in range(4)]
        _produce(stack.kafka_bootstrap, outputs, later)

        def production_sink_stand_in() -> None:
            for record in own:
                time.sleep(0.5)
                _produce(stack.kafka_bootstrap, outputs, [record])

        writer = threading.Thread(target=production_sink_stand_in)
        started = time.monotonic()
        writer.start()
        coverage = await_records(hook, capture, {0: (0, 4)}, outputs, {0: 0, 1: 0}, timeout=60,
                                 log=logging.getLogger("test"), key_path="$.id")
        took = time.monotonic() - started
        writer.join()
        assert coverage.complete and coverage.records == coverage.reached == 4, coverage
        assert took >= 2.0, took  # the last of the window's own outputs was awaited
    finally:
        hook.close()
        AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).delete_topics([capture, outputs])

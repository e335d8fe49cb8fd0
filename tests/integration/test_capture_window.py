"""Capture window on real tansu, run as Airflow DAGs under dag.test(): start offsets → N more records →
the deferrable window sensor fires → the manifest lists exactly N records per the per-partition counts →
tampering with the manifest file fails validation.

The production side here is a stand-in QuiesceResult (FAKE: no Flink job in this test — the test that
links the offsets to a real savepoint is test_capture_window_flink.py). Records are produced with
linger.ms=0 and a flush per record: tansu's high watermark is wrong for multi-record batches.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_flink_replay.core.manifest import ManifestTamperedError
from airflow_flink_replay.core.manifest_io import load_manifest
from tests.dag_testing import register_dag

pytestmark = pytest.mark.timeout(180)

RESULTS: dict[str, dict[str, Any]] = {}
AGENT = "4aab10bf863e9ada48b1abaa99285148"
#: FAKE production side (shape of QuiesceResult from the control plane); no Flink job behind it.
QUIESCE = {
    "job_id": "44036137620ed3b3371375cf3538855a",
    "job_name": "support-agent (stand-in)",
    "mode": "drain",
    "savepoint_path": "file:///tmp/stand-in/savepoint-440361-0123456789ab",
    "format_type": "CANONICAL",
    "trigger_id": "t",
    "requested_at": "2026-11-29T09:00:00+00:00",
    "savepoint_completed_at": "2026-11-29T09:00:01+00:00",
    "production_stopped": True,
    "in_flight_work_possible": False,
    "plan": {
        "job_id": "44036137620ed3b3371375cf3538855a",
        "job_name": "support-agent (stand-in)",
        "max_parallelism": None,
        "agent_vertex_id": AGENT,
        "vertices": [
            {
                "id": "13ac5fc714a257b6cff827eb3ec52113",
                "name": "Source: capture",
                "parallelism": 1,
                "max_parallelism": 128,
            },
            {"id": AGENT, "name": "action-execute-operator", "parallelism": 1, "max_parallelism": 128},
        ],
    },
}


def register_and_test(dag: Any, conn_file: str) -> Any:
    """Write the in-test DAG to the metadata DB (as the DAG processor would), then dag.test() it."""
    register_dag(dag, "issue5-tests")
    return dag.test(conn_file_path=conn_file)


def produce(bootstrap: str, topic: str, values: list[tuple[int, int, dict]]) -> None:
    """Produce ``(partition, timestamp_ms, value)`` one by one (linger 0, flush each: tansu)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, ts, value in values:
        producer.produce(topic, key=value["customer"], value=json.dumps(value), partition=partition, timestamp=ts)
        assert producer.flush(10) == 0, "record not delivered: is the broker up?"


@pytest.fixture
def capture_topic(stack: Any) -> Iterator[str]:
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    topic = f"it-capture-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
    yield topic
    admin.delete_topics([topic])[topic].result(10)


def test_window_sensor_and_manifest(stack: Any, airflow_db: Any, capture_topic: str, tmp_path: Path) -> None:
    from airflow.sdk import DAG, task

    from airflow_flink_replay.operators.manifest import (
        CaptureFormat,
        CreateReplayManifestOperator,
        ProductionFacts,
        RecordStartOffsetsOperator,
        WindowScan,
    )
    from airflow_flink_replay.sensors.capture_window import CaptureWindowSensor

    n = 7
    base = int(time.time() * 1000)
    # production traffic before the savepoint: 5 records (p0: 3, p1: 2)
    produce(
        stack.kafka_bootstrap,
        capture_topic,
        [(i % 2, base + i, {"customer": f"c{i % 3}", "seq": i, "phase": "before"}) for i in range(5)],
    )
    window_records = [
        (
            i % 2,
            base + 1000 + 10 * i,
            {"customer": f"c{i % 3}", "seq": i, "phase": "window", "ts": base + 1000 + 10 * i},
        )
        for i in range(n)
    ]
    later_records = [(i % 2, base + 5000 + 10 * i, {"customer": "late", "seq": i, "phase": "after"}) for i in range(4)]
    manifest_uri = f"file://{tmp_path}/runs/r1/manifest.json"
    dag_id = f"issue5_capture_window_{uuid.uuid4().hex[:6]}"

    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        start = RecordStartOffsetsOperator(task_id="start_offsets", topic=capture_topic, quiesce_result=QUIESCE)

        @task
        def resume_production_and_feed(_start: dict) -> None:
            """Production resumed: N records arrive over ~1.5 s, then 4 more (they must not count)."""

            def feed() -> None:
                time.sleep(0.5)
                produce(stack.kafka_bootstrap, capture_topic, window_records)
                time.sleep(1.0)
                produce(stack.kafka_bootstrap, capture_topic, later_records)

            threading.Thread(target=feed, daemon=True).start()

        fed = resume_production_and_feed(start.output)
        window = CaptureWindowSensor(
            task_id="capture_window",
            start_offsets=start.output,
            min_records=n,
            deferrable=True,
            poll_interval=0.5,
            window_timeout=60,
        )
        polled = CaptureWindowSensor(
            task_id="capture_window_poke",
            start_offsets=start.output,
            min_records=n,
            deferrable=False,
            poll_interval=0.5,
            window_timeout=60,
        )
        manifest = CreateReplayManifestOperator(
            task_id="manifest",
            manifest_uri=manifest_uri,
            window=window.output,
            production=QUIESCE,
            capture_format=CaptureFormat(
                value_serializer="json",
                event_time={"source": "field", "field": "$.ts"},
                watermark={"max_out_of_orderness_ms": 1000, "idleness_ms": 5000},
            ),
            production_facts=ProductionFacts(flink_version="2.2.1"),
            scan=WindowScan(expected_records=n),
        )

        @task
        def record(s: dict, w: dict, wp: dict, m: dict) -> None:
            RESULTS[dag_id] = {"start": s, "window": w, "window_poke": wp, "manifest": m}

        fed >> [window, polled]
        window >> manifest
        record(start.output, window.output, polled.output, manifest.output)

    started = time.monotonic()
    dr = register_and_test(dag, stack.connections_file)
    elapsed = time.monotonic() - started
    assert dr.state == "success", RESULTS.get(dag_id)
    out = RESULTS[dag_id]
    print(f"capture-window DAG ran in {elapsed:.1f}s")

    assert out["start"]["offsets"] == {"0": 3, "1": 2}
    assert out["start"]["savepoint_path"] == QUIESCE["savepoint_path"]
    # both the deferred trigger and the poking sensor cut exactly the N window records
    expected_end = {"0": 3 + 4, "1": 2 + 3}
    assert out["window"]["end_offsets"] == expected_end
    assert out["window"]["reason"] == "records"
    assert out["window_poke"]["end_offsets"] == expected_end

    assert out["manifest"]["record_count"] == n
    m = load_manifest(manifest_uri)
    assert m.digest == out["manifest"]["digest"]
    counts = {w.partition: w.record_count for w in m.capture.partitions}
    assert counts == {0: 4, 1: 3} and sum(counts.values()) == n
    assert m.capture.start_offsets() == {0: 3, 1: 2}
    assert m.capture.end_offsets() == {0: 7, 1: 5}
    p0 = m.capture.partitions[0]
    assert p0.first_timestamp_ms == base + 1000 and p0.last_timestamp_ms == base + 1000 + 10 * 6
    assert m.production.savepoint.path == QUIESCE["savepoint_path"]
    assert m.production.savepoint.quiesce_mode == "drain"
    assert m.production.agent.vertex_id == AGENT and m.production.agent.max_parallelism == 128
    assert m.capture.kafka_conn_id == "kafka_default" and m.capture.bootstrap_servers == stack.kafka_bootstrap
    assert m.capture.event_time.field == "$.ts" and m.capture.watermark.idleness_ms == 5000

    # the window's records are exactly the N produced after the start offsets
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": stack.kafka_bootstrap, "group.id": f"it-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(capture_topic, w.partition, w.start_offset) for w in m.capture.partitions])
    seen = []
    deadline = time.monotonic() + 20
    ends = m.capture.end_offsets()
    while len(seen) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error() and msg.offset() < ends[msg.partition()]:
            seen.append(json.loads(msg.value()))
    consumer.close()
    assert sorted(r["seq"] for r in seen) == list(range(n)) and {r["phase"] for r in seen} == {"window"}

    # tampering with the file fails validation (library and CLI)
    path = Path(manifest_uri.removeprefix("file://"))
    doc = json.loads(path.read_text())
    doc["capture"]["partitions"][1]["end_offset"] += 1
    path.write_text(json.dumps(doc, indent=2))
    with pytest.raises(ManifestTamperedError, match="digest: mismatch"):
        load_manifest(manifest_uri)
    from airflow_flink_replay.cli import main

    assert main(["manifest", "validate", manifest_uri]) == 1


def test_window_modes_without_dag(stack: Any, airflow_db: Any, capture_topic: str, monkeypatch: Any) -> None:
    """Duration, explicit end offsets and the scanning time index on the real broker (no DAG needed)."""
    from airflow_flink_replay.core.capture_window import CaptureWindowSpec
    from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook, ScanningTimeIndex
    from airflow_flink_replay.triggers.kafka import check_capture_window

    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_IT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}}),
    )
    hook = KafkaOffsetsHook("kafka_it")
    base = 1_800_000_000_000
    produce(
        stack.kafka_bootstrap, capture_topic, [(i % 2, base + 100 * i, {"customer": "c", "seq": i}) for i in range(6)]
    )  # p0: ts 0,200,400
    try:
        start = {0: 0, 1: 0}
        # timestamp cut-off at base+250: p0 first offset with ts >= cutoff is 2 (ts 400), p1 is 1 (ts 300)
        assert ScanningTimeIndex(hook).offsets_for_time(capture_topic, base + 250, start) == {0: 2, 1: 1}
        spec = CaptureWindowSpec(topic=capture_topic, start_offsets=start, until_timestamp_ms=base + 250)
        result = check_capture_window(hook, spec)
        assert result is not None and result.reason == "timestamp" and result.end_offsets == {0: 2, 1: 1}
        # a cut-off no record has reached yet: not complete
        spec = CaptureWindowSpec(topic=capture_topic, start_offsets=start, until_timestamp_ms=base + 10_000)
        assert check_capture_window(hook, spec) is None
        # explicit end offsets
        spec = CaptureWindowSpec(topic=capture_topic, start_offsets=start, end_offsets={0: 2, 1: 3})
        assert check_capture_window(hook, spec).end_offsets == {0: 2, 1: 3}
        spec = CaptureWindowSpec(topic=capture_topic, start_offsets=start, end_offsets={0: 4, 1: 3})
        assert check_capture_window(hook, spec) is None
        # the deferrable sensor looks once before deferring: a window already complete is returned at once
        # (a trigger firing while the deferral is being recorded makes a real scheduler retry the task)
        from airflow.sdk.exceptions import TaskDeferred

        from airflow_flink_replay.sensors.capture_window import CaptureWindowSensor

        def sensor(ends: dict[int, int]) -> CaptureWindowSensor:
            return CaptureWindowSensor(task_id="w", topic=capture_topic, start_offsets=start, end_offsets=ends,
                                       kafka_config_id="kafka_it", deferrable=True)

        assert sensor({0: 2, 1: 3}).execute({})["end_offsets"] == {"0": 2, "1": 3}
        with pytest.raises(TaskDeferred):
            sensor({0: 4, 1: 3}).execute({})
        # duration: T not elapsed -> not complete; elapsed -> the end offsets at that time
        spec = CaptureWindowSpec(
            topic=capture_topic, start_offsets=start, duration_seconds=60, started_at=datetime.now(UTC)
        )
        assert check_capture_window(hook, spec) is None
        spec = CaptureWindowSpec(
            topic=capture_topic,
            start_offsets=start,
            duration_seconds=0.2,
            started_at=datetime.now(UTC) - timedelta(seconds=1),
        )
        result = check_capture_window(hook, spec)
        assert result is not None and result.reason == "duration" and result.end_offsets == {0: 3, 1: 3}
        # the manifest step checks that records read as declared: a missing event-time field is named
        from airflow_flink_replay.core.manifest import ManifestError
        from airflow_flink_replay.operators.manifest import CaptureFormat, CreateReplayManifestOperator

        op = CreateReplayManifestOperator(
            task_id="m",
            manifest_uri="unused",
            window={"topic": capture_topic, "start_offsets": start, "end_offsets": {0: 3, 1: 3}},
            production={},
            kafka_config_id="kafka_it",
            capture_format=CaptureFormat(event_time={"source": "field", "field": "$.event.ts"}),
        )
        with pytest.raises(ManifestError, match=r"p0@0: event time field \$\.event\.ts not found in the value"):
            op.build_manifest(hook, "r")
        op.capture_format = CaptureFormat()  # now the records read as declared: the empty production side is what fails
        with pytest.raises(ManifestError, match=r"production\.savepoint: missing\. Fix"):
            op.build_manifest(hook, "r")
        # scan: counts and first/last timestamps by consuming
        scans = hook.scan(capture_topic, start, {0: 3, 1: 3})
        assert (scans[1].record_count, scans[1].first_timestamp_ms, scans[1].last_timestamp_ms) == (
            3,
            base + 100,
            base + 500,
        )
    finally:
        hook.close()


@pytest.mark.skipif(
    not os.environ.get("AFR_REAL_KAFKA_BOOTSTRAP"),
    reason="needs a real Apache Kafka broker (AFR_REAL_KAFKA_BOOTSTRAP=host:port): tansu answers every "
    "ListOffsets-by-timestamp with offset 0",
)
def test_broker_time_index_agrees_with_scanning_on_real_kafka(airflow_db: Any, monkeypatch: Any) -> None:
    """On Apache Kafka, the broker's time index and the scanning index give the same offsets."""
    from airflow_flink_replay.hooks.kafka_offsets import BrokerTimeIndex, KafkaOffsetsHook, ScanningTimeIndex

    bootstrap = os.environ["AFR_REAL_KAFKA_BOOTSTRAP"]
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_REAL", json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}})
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"it-time-index-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    hook = KafkaOffsetsHook("kafka_real")
    try:
        base = 1_800_000_000_000
        produce(bootstrap, topic, [(i % 2, base + 100 * i, {"customer": "c", "seq": i}) for i in range(10)])
        start = {0: 0, 1: 0}
        for cutoff in (base, base + 250, base + 899, base + 5000):
            assert BrokerTimeIndex(hook).offsets_for_time(topic, cutoff, start) == ScanningTimeIndex(
                hook
            ).offsets_for_time(topic, cutoff, start)
    finally:
        hook.close()
        admin.delete_topics([topic])[topic].result(30)

"""Test harness for the control-plane tests: Kafka topics on tansu, the keyed-counter job, cleanup.

tansu quirks (see STACK.md) are respected: every record is produced with ``linger.ms=0`` and flushed on
its own, and reading uses ``assign()`` from offset 0 until the topic stays quiet (no high watermark).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_flink_replay.core.flink_models import FlinkPythonProgram
from tests import dag_testing

JOBS_DIR = Path(__file__).resolve().parent
KEYED_COUNTER = JOBS_DIR / "keyed_counter.py"
KEYS = ("a", "b", "c")


def unique(prefix: str) -> str:
    """``prefix-<8 hex>``."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topics(bootstrap: str, *names: str) -> None:
    """Create single-partition topics."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(10)


def delete_topics(bootstrap: str, *names: str) -> None:
    """Delete topics, ignoring errors."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(list(names)).values():
        with contextlib.suppress(Exception):
            future.result(10)


def produce(bootstrap: str, topic: str, seqs: range) -> list[tuple[str, int]]:
    """Produce ``"<key>,<seq>"`` for each seq (keys round-robin a, b, c); returns the records."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    records = [(KEYS[s % len(KEYS)], s) for s in seqs]
    for key, seq in records:
        producer.produce(topic, f"{key},{seq}".encode(), key=key.encode())
        producer.flush(10)
    return records


def read_outputs(bootstrap: str, topic: str, quiet: float = 1.5) -> list[dict[str, Any]]:
    """Every JSON record of ``topic`` from offset 0, until no record arrives for ``quiet`` seconds."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[dict[str, Any]] = []
    try:
        while True:
            msg = consumer.poll(quiet)
            if msg is None:
                return out
            if msg.error():
                continue
            out.append(json.loads(msg.value()))
    finally:
        consumer.close()


def wait_outputs(
    bootstrap: str, topic: str, done: Callable[[list[dict[str, Any]]], bool], timeout: float = 60.0
) -> list[dict[str, Any]]:
    """Read ``topic`` until ``done(outputs)`` holds; fails with the last outputs after ``timeout``."""
    deadline = time.monotonic() + timeout
    outputs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        outputs = read_outputs(bootstrap, topic, quiet=0.7)
        if done(outputs):
            return outputs
        time.sleep(0.5)
    raise AssertionError(f"outputs of {topic} not complete after {timeout:g} s: {outputs}")


def counts(outputs: list[dict[str, Any]]) -> dict[int, int]:
    """seq → count of the ``count`` records."""
    return {o["seq"]: o["count"] for o in outputs if o["kind"] == "count"}


def held(outputs: list[dict[str, Any]]) -> set[int]:
    """seqs released by the held-work timer."""
    return {o["seq"] for o in outputs if o["kind"] == "held"}


def counter_program(
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    connector_jars: list[str],
    *,
    job_name: str,
    hold: bool = True,
    counter_uid: str = "keyed-counter",
    extra_args: list[str] | None = None,
) -> FlinkPythonProgram:
    """The keyed-counter job as a :class:`FlinkPythonProgram`."""
    args = [
        "--bootstrap", bootstrap, "--input-topic", input_topic, "--output-topic", output_topic,
        "--group-id", f"{job_name}-group", "--jars", ",".join(connector_jars), "--job-name", job_name,
        "--counter-uid", counter_uid,
    ]  # fmt: skip
    if hold:
        args.append("--hold")
    return FlinkPythonProgram(entry_point=str(KEYED_COUNTER), program_args=args + list(extra_args or []))


def savepoint_dir_exists(location: str) -> bool:
    """True when a ``file:`` savepoint location holds a ``_metadata`` file."""
    path = Path(location.removeprefix("file:").replace("///", "/", 1) if location.startswith("file:") else location)
    return (path / "_metadata").is_file()


def register_dag(dag: Any, bundle_name: str = "control-plane-tests") -> None:
    """Serialize an in-memory DAG into the test metadata DB (see :func:`tests.dag_testing.register_dag`)."""
    dag_testing.register_dag(dag, bundle_name)


def run_dag_test(dag: Any, conn_file_path: str) -> Any:
    """``register_dag`` then ``dag.test(conn_file_path=...)``; returns the DagRun."""
    register_dag(dag)
    return dag.test(conn_file_path=conn_file_path)

"""The embedded stack is real: Flink runs a stateful job, tansu carries records, Mem0 stores memories."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_flink_replay.local.stack import LocalStack, StackConfig

JOBS = Path(__file__).resolve().parent.parent / "jobs"


@pytest.fixture
def create_topics(stack) -> Iterator[Callable[..., None]]:
    """Creates one-partition topics; the test's topics are deleted after it (a kept stack must not collect them)."""
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    created: list[str] = []

    def create(*names: str) -> None:
        new = [NewTopic(n, num_partitions=1, replication_factor=1) for n in names]
        for name, fut in admin.create_topics(new).items():
            fut.result(10)
            created.append(name)

    yield create
    for fut in admin.delete_topics(created).values() if created else ():
        fut.result(30)


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        producer.produce(topic, value=v.encode())
        producer.flush(10)  # one record per batch: tansu's high watermark is wrong for batches


def _consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[str] = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            out.append(msg.value().decode())
    consumer.close()
    return out


def test_status_reports_every_part_up(stack) -> None:
    status = LocalStack(StackConfig(workdir=Path(stack.workdir))).status()
    assert status["up"], status
    assert status["flink"]["taskmanagers"] >= 1
    assert status["kafka"]["answers"] and status["mem0"]["answers"]
    conns = json.loads(Path(stack.connections_file).read_text())
    assert conns["flink_default"]["host"] == stack.flink_rest_url
    assert set(conns) >= {"flink_default", "kafka_default", "mem0_default", "flink_replay"}
    # a second Flink cluster for the replays: its own JobManager and TaskManager, its own connection
    assert status["replay_flink"]["taskmanagers"] >= 1, status
    assert conns["flink_replay"]["host"] == stack.replay_flink_rest_url != stack.flink_rest_url
    # the connections tell a submitter on this host where Flink is: the provider never reads stack.json
    for conn_id, conf_dir in (("flink_default", stack.flink_conf_dir), ("flink_replay", stack.replay_flink_conf_dir)):
        extra = json.loads(conns[conn_id]["extra"])
        assert extra["flink_home"] == stack.flink_home and extra["flink_conf_dir"] == conf_dir, extra
    procs = status["processes"]
    assert {"flink-jobmanager", "flink-taskmanager", "replay-jobmanager", "replay-taskmanager"} <= set(procs)
    assert len({p["pid"] for p in procs.values()}) == len(procs)


def test_tansu_round_trip_keeps_keys_order_and_timestamps(stack, create_topics) -> None:
    topic = f"smoke-rt-{uuid.uuid4().hex[:8]}"
    create_topics(topic)
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "linger.ms": 0})
    for i in range(5):
        producer.produce(topic, key=b"k", value=f"v{i}".encode(), timestamp=1_700_000_000_000 + i)
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": f"g-{topic}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append((msg.key(), msg.value().decode(), msg.timestamp()[1]))
    consumer.close()
    assert got == [(b"k", f"v{i}", 1_700_000_000_000 + i) for i in range(5)]


def test_flink_runs_a_stateful_job_reading_and_writing_tansu(stack, create_topics) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"smoke-in-{suffix}", f"smoke-out-{suffix}"
    create_topics(source, sink)
    records = ["a,red", "b,red", "a,blue", "a,green", "b,blue", "c,red"]  # a copy job would not pass
    _produce(stack.kafka_bootstrap, source, records)

    env = {**os.environ, "FLINK_CONF_DIR": stack.flink_conf_dir, "JAVA_HOME": stack.java_home}
    run = subprocess.run(
        [f"{stack.flink_home}/bin/flink", "run", "-d", "-py", str(JOBS / "smoke_keyed_counter.py"),
         "--bootstrap", stack.kafka_bootstrap, "--source", source, "--sink", sink,
         "--jars", ",".join(stack.connector_jars)],
        capture_output=True, text=True, env=env, timeout=180,
    )
    match = re.search(r"JobID ([0-9a-f]{32})", run.stdout)
    assert match, f"submission failed:\n{run.stdout}\n{run.stderr}"
    job_id = match.group(1)
    try:
        deadline = time.monotonic() + 120
        state = None
        while time.monotonic() < deadline:
            state = requests.get(f"{stack.flink_rest_url}/jobs/{job_id}", timeout=5).json()["state"]
            if state in ("FINISHED", "FAILED", "CANCELED"):
                break
            time.sleep(1)
        assert state == "FINISHED", state
        outputs = _consume_all(stack.kafka_bootstrap, sink, expected=len(records))
        # Keyed state: each key counts its own records, in order.
        assert sorted(outputs) == sorted(["a,1", "b,1", "a,2", "a,3", "b,2", "c,1"])
        assert [o for o in outputs if o.startswith("a,")] == ["a,1", "a,2", "a,3"]
    finally:
        requests.patch(f"{stack.flink_rest_url}/jobs/{job_id}?mode=cancel", timeout=5)


@pytest.fixture
def smoke_collection(stack) -> Iterator[str]:
    """A fresh Chroma collection name on the stack's server, deleted after the test."""
    import chromadb

    name = f"smoke_{uuid.uuid4().hex[:8]}"
    yield name
    server = stack.mem0_config()["vector_store"]["config"]
    client = chromadb.HttpClient(host=server["host"], port=server["port"])
    if name in {c.name for c in client.list_collections()}:
        client.delete_collection(name)


def test_mem0_memory_on_the_stack_chroma_server(stack, smoke_collection: str, tmp_path: Path) -> None:
    from airflow_flink_replay.memory.offline import build_offline_memory

    config = stack.mem0_config(collection=smoke_collection)
    config["history_db_path"] = str(tmp_path / "history.db")
    memory = build_offline_memory(config, mem0_dir=tmp_path)
    added = memory.add("Customer c-1 complained about a late delivery", user_id="job-a", agent_id="c-1",
                       infer=False)
    assert added["results"] and added["results"][0]["event"] == "ADD"
    memory.add("Customer c-2 loved the blender", user_id="job-a", agent_id="c-2", infer=False)
    memory.add("Other job's memory", user_id="job-b", agent_id="c-1", infer=False)

    mine = memory.get_all(filters={"user_id": "job-a", "agent_id": "c-1"})["results"]
    assert [m["memory"] for m in mine] == ["Customer c-1 complained about a late delivery"]
    hits = memory.search("late delivery complaint", filters={"user_id": "job-a"})["results"]
    assert hits[0]["memory"].startswith("Customer c-1 complained")
    # The store is the stack's server, not an embedded file: a second client sees the same memories.
    again = build_offline_memory(config, mem0_dir=tmp_path)
    assert len(again.get_all(filters={"user_id": "job-a"})["results"]) == 2

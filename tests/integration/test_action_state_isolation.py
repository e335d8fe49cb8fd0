"""Action-state isolation on real tansu under dag.test(): two variants get two fresh compacted topics with
production's partition count; production's name is refused; a topic with data is refused; cleanup deletes
the replay topics (never production's) and records production's end offsets before/after.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from tests.dag_testing import register_dag

pytestmark = pytest.mark.timeout(180)

RESULTS: dict[str, Any] = {}


def register_and_test(dag: Any, conn_file: str) -> Any:
    """Write the in-test DAG to the metadata DB (as the DAG processor would), then dag.test() it."""
    register_dag(dag, "issue5-tests")
    return dag.test(conn_file_path=conn_file)


def _cleanup_policy(admin: AdminClient, topic: str) -> str:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(10)["cleanup.policy"].value


def _topics(admin: AdminClient) -> dict[str, Any]:
    return admin.list_topics(timeout=10).topics  # all topics: naming one would auto-create it on tansu


@pytest.fixture
def production_topic(stack: Any) -> Iterator[str]:
    """A stand-in for production's action-state topic (3 partitions, compacted, with 4 records)."""
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    topic = f"it-prod-action-state-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 3, 1, config={"cleanup.policy": "compact"})])[topic].result(10)
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "linger.ms": 0})
    for i in range(4):
        producer.produce(topic, key=f"k{i}", value=b"recorded-llm-answer", partition=i % 3)
        assert producer.flush(10) == 0, "record not delivered: is the broker up?"
    yield topic
    leftovers = [t for t in _topics(admin) if t.startswith(topic)]
    for _t, f in admin.delete_topics(leftovers).items():
        f.result(10)


def test_two_variants_two_fresh_topics_then_cleanup(
    stack: Any, airflow_db: Any, production_topic: str, tmp_path: Any
) -> None:
    from airflow.sdk import DAG, task

    from airflow_flink_replay.core.manifest import ReplayManifest
    from airflow_flink_replay.core.manifest_io import load_manifest, save_manifest
    from tests.unit.core.test_manifest import _data

    manifest_uri = f"file://{tmp_path}/manifest.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), manifest_uri)

    from airflow_flink_replay.operators.action_state import DeleteReplayTopicsOperator, IsolateActionStateOperator

    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    dag_id = f"issue5_isolation_{uuid.uuid4().hex[:6]}"
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        isolate = IsolateActionStateOperator(
            task_id="isolate",
            production_topic=production_topic,
            variants=["baseline", "candidate"],
            run_key="run-1",
            manifest_uri=manifest_uri,
        )

        @task
        def replay_writes(iso: dict) -> dict:
            """Stand-in for the replay jobs (FAKE: no Flink here): each variant writes to ITS topic only,
            while production keeps writing one record to its own topic meanwhile."""
            topics = {}
            for t in _topics(admin):
                if t in iso["topics"].values():
                    topics[t] = {
                        "partitions": len(_topics(admin)[t].partitions),
                        "config": _cleanup_policy(admin, t),
                    }
            producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "linger.ms": 0})
            for topic in iso["topics"].values():
                producer.produce(topic, key="k0", value=b"replay-answer", partition=0)
                assert producer.flush(10) == 0, "record not delivered: is the broker up?"
            producer.produce(production_topic, key="k9", value=b"production-meanwhile", partition=1)
            assert producer.flush(10) == 0, "record not delivered: is the broker up?"
            return topics

        seen = replay_writes(isolate.output)
        cleanup = DeleteReplayTopicsOperator(task_id="cleanup", isolation=isolate.output)

        @task
        def record(iso: dict, s: dict, c: dict) -> None:
            RESULTS[dag_id] = {"isolation": iso, "seen": s, "cleanup": c}

        seen >> cleanup
        record(isolate.output, seen, cleanup.output)

    started = time.monotonic()
    dr = register_and_test(dag, stack.connections_file)
    print(f"isolation DAG ran in {time.monotonic() - started:.1f}s")
    assert dr.state == "success", RESULTS.get(dag_id)
    out = RESULTS[dag_id]
    iso = out["isolation"]
    topics = iso["topics"]
    assert set(topics) == {"baseline", "candidate"}
    assert len(set(topics.values())) == 2 and production_topic not in topics.values()
    assert topics["candidate"] == f"{production_topic}-replay-run-1-candidate"
    assert iso["partitions"] == 3 and sorted(iso["created"]) == sorted(topics.values())
    assert iso["production_end_offsets_before"] == {"0": 2, "1": 1, "2": 1}
    # both were fresh, compacted, with production's partition count
    assert out["seen"] == {t: {"partitions": 3, "config": "compact"} for t in topics.values()}
    # cleanup: gone, with the evidence
    c = out["cleanup"]
    assert sorted(c["deleted"]) == sorted(topics.values()) and c["missing"] == []
    assert all(t not in _topics(admin) for t in topics.values())
    assert production_topic in _topics(admin)
    assert c["replay_topic_end_offsets"] == {t: {"0": 1, "1": 0, "2": 0} for t in topics.values()}
    assert c["production_end_offsets_after"] == {"0": 2, "1": 2, "2": 1}
    assert c["production_records_written_meanwhile"] == 1
    assert "production was running and may have written them" in c["note"]
    # the manifest records the isolation (re-sealed: it still verifies)
    iso_section = load_manifest(manifest_uri).isolation
    assert iso_section.production_action_state_topic == production_topic
    assert iso_section.action_state_topics == topics


def test_refusals(stack: Any, airflow_db: Any, production_topic: str, monkeypatch: Any) -> None:
    """Production's name, a topic that has data, and deleting production are refused with clear errors."""
    import json

    from airflow.sdk.exceptions import AirflowException

    from airflow_flink_replay.operators.action_state import DeleteReplayTopicsOperator, IsolateActionStateOperator

    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}}),
    )
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})

    same = IsolateActionStateOperator(
        task_id="same", production_topic=production_topic, topics={"candidate": production_topic}
    )
    with pytest.raises(
        AirflowException,
        match=r"refusing to use production's action-state topic .* for replay "
        r"variant 'candidate'.*Fix: give the variant its own topic",
    ):
        same.execute({"run_id": "r"})

    # a topic that already has data (e.g. a previous run's) is refused, and nothing is created for others
    dirty = f"{production_topic}-dirty"
    admin.create_topics([NewTopic(dirty, 3, 1)])[dirty].result(10)
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "linger.ms": 0})
    producer.produce(dirty, key="k", value=b"old", partition=0)
    assert producer.flush(10) == 0, "record not delivered: is the broker up?"
    op = IsolateActionStateOperator(
        task_id="dirty",
        production_topic=production_topic,
        topics={"baseline": f"{production_topic}-fresh-b", "candidate": dirty},
    )
    with pytest.raises(AirflowException, match=r"already has data .* a replay must start with no recorded actions"):
        op.execute({"run_id": "r"})
    assert f"{production_topic}-fresh-b" not in _topics(admin)

    # an existing EMPTY topic with the right partitions is reused (a retry)
    fresh = f"{production_topic}-retry"
    admin.create_topics([NewTopic(fresh, 3, 1)])[fresh].result(10)
    res = IsolateActionStateOperator(
        task_id="retry", production_topic=production_topic, topics={"candidate": fresh}
    ).execute({"run_id": "r"})
    assert res["created"] == [] and res["topics"] == {"candidate": fresh}

    with pytest.raises(AirflowException, match=r"refusing to delete .* production's action-state topic"):
        DeleteReplayTopicsOperator(
            task_id="bad_cleanup", topics=[production_topic], production_topic=production_topic
        ).execute({})
    assert production_topic in _topics(admin)
    # cleanup of topics that are already gone reports them as missing
    out = DeleteReplayTopicsOperator(task_id="c", topics=[fresh, dirty, f"{production_topic}-never"]).execute({})
    assert sorted(out["deleted"]) == sorted([fresh, dirty]) and out["missing"] == [f"{production_topic}-never"]

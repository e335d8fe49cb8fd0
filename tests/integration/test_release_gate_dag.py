"""The release-gate DAG end to end on the real local stack, under dag.test().

Production = the review agent v1 (Flink Agents on the local Flink, Kafka action-state store on tansu,
Mem0 memories on the Chroma server) with the capture tee. The gate replays the captured window from a
drained savepoint for baseline, baseline-2 and the candidate: v2 must FAIL (labels changed for the
documented late-delivery subset, notify_support called for new keys), v1 must PASS. Afterwards
production runs with its state intact, no replay topic or memory fork remains, and production's Mem0
namespace was not changed by the replays.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

pytestmark = pytest.mark.timeout(1500)


def _register(dag: Any) -> None:
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.models.dagbundle import DagBundleModel
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    with create_session() as session:
        session.merge(DagBundleModel(name="replay-e2e"))
        session.flush()
        update_dag_parsing_results_in_db(
            "replay-e2e", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=session
        )


def _task_states(dagrun: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dagrun.get_task_instances()}


@pytest.fixture(scope="module")
def production(stack, airflow_db, tmp_path_factory) -> Any:
    from airflow_flink_replay.local.demo import DemoTopics, deploy_production, write_spec

    suffix = uuid.uuid4().hex[:6]
    topics = DemoTopics.named(f"e2e-{suffix}")
    job_name = f"review-triage-e2e-{suffix}"
    identifier = f"review-triage-e2e-{suffix}"
    job_id = deploy_production(stack, topics, job_name=job_name, job_identifier=identifier, initial_reviews=24)
    work = tmp_path_factory.mktemp("e2e")
    spec_path = write_spec(stack, topics, work / "spec.yaml", name=f"e2e-{suffix}", job_name=job_name,
                           job_identifier=identifier, window_records=30, runs_dir=work / "runs")
    yield {"job_id": job_id, "job_name": job_name, "topics": topics, "spec_path": spec_path,
           "identifier": identifier}
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    for job in hook.list_jobs().jobs:
        if job.name == job_name and job.state == "RUNNING":
            hook.cancel_job(job.jid)


_FEED_START = iter(range(1000, 100_000, 1000))


def _run_gate(stack, production, candidate: str) -> tuple[Any, dict[str, Any]]:
    from airflow_flink_replay.core.replay_spec import ReplaySpec
    from airflow_flink_replay.dag_factory import build_replay_dag
    from airflow_flink_replay.local.demo import ReviewFeeder

    spec = ReplaySpec.from_yaml(production["spec_path"])
    dag = build_replay_dag(spec, dag_id=f"gate_{spec.name.replace('-', '_')}", kind="gate")
    _register(dag)
    with ReviewFeeder(stack.kafka_bootstrap, production["topics"].reviews, start_index=next(_FEED_START), rate=5):
        dagrun = dag.test(run_conf={"candidate": candidate}, conn_file_path=stack.connections_file)
    states = _task_states(dagrun)
    runs = Path(spec.runs_uri.removeprefix("file://"))
    record_path = max(runs.rglob("run_record.json"), key=lambda p: p.stat().st_mtime)
    return dagrun, {"states": states, "record": json.loads(record_path.read_text()), "spec": spec}


def _production_outputs(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from confluent_kafka import Consumer, TopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = admin.list_topics(timeout=10).topics[topic].partitions
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-{uuid.uuid4()}"})
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out, idle = [], 0
    while idle < 10:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            idle += 1
            continue
        idle = 0
        out.append(json.loads(msg.value()))
    consumer.close()
    return out


def test_gate_fails_v2_and_passes_v1_and_leaves_production_intact(stack, production) -> None:
    from airflow_flink_replay.hooks.mem0 import Mem0Hook
    from airflow_flink_replay.local.demo import V1, V2

    # --- candidate v2: FAIL, for the documented reasons
    dagrun, v2 = _run_gate(stack, production, V2)
    record = v2["record"]
    assert record["verdict"] == "FAIL", (v2["states"], record.get("reasons"))
    assert str(dagrun.state) == "failed"
    assert v2["states"]["compare"] == "failed" and v2["states"]["approve"] == "upstream_failed"
    failing = {f for r in record["reasons"] if r["severity"] == "fail" for f in r["fields"]}
    assert "$.label" in failing, record["reasons"]
    assert "tool:notify_support.call" in failing, record["reasons"]
    # production came back, and the downtime was measured
    assert v2["states"]["resume_production"] == "success"
    assert 0 < record["downtime_s"] < 120
    for task in ("delete_replay_topics", "drop_fork_baseline", "drop_fork_baseline_2", "drop_fork_candidate",
                 "verify_production_memory", "run_record"):
        assert v2["states"][task] == "success", (task, v2["states"])
    # every variant replayed exactly the manifest's window
    assert [v["output_records"] for v in record["variants"]] == [30, 30, 30]
    assert record["manifest_digest"] and all(v["output_digest"] for v in record["variants"])

    # --- candidate v1 (production's own agent): PASS, the gate approves
    dagrun, v1 = _run_gate(stack, production, V1)
    assert v1["record"]["verdict"] == "PASS", v1["record"]["reasons"]
    assert str(dagrun.state) == "success"
    assert v1["states"]["approve"] == "success"

    # --- nothing of the replays is left behind
    topics_after = set(AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=10).topics)
    for rec in (record, v1["record"]):
        assert not any(v["action_state_topic"] in topics_after for v in rec["variants"])
    hook = Mem0Hook(config=stack.mem0_config())
    for rec in (record, v1["record"]):
        for variant in rec["variants"]:
            assert hook.count({"user_id": variant["fork_namespace"]}) == 0, variant["fork_namespace"]

    # --- production: running, state intact (per-customer counters continue, never reset), and its memory
    # holds one memory per review it processed: the replays wrote nothing into it.
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    flink = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    assert [j.state for j in flink.list_jobs().jobs if j.name == production["job_name"] and j.state == "RUNNING"]
    outputs = _production_outputs(stack.kafka_bootstrap, production["topics"].outputs)
    by_customer: dict[str, list[int]] = {}
    for out in outputs:
        by_customer.setdefault(out["customer"], []).append(int(out["count"]))
    for customer, counts in by_customer.items():
        assert counts.count(1) == 1, (customer, sorted(counts))  # a lost state would restart at 1
        assert sorted(set(counts)) == list(range(1, max(counts) + 1)), (customer, sorted(counts))
    rows = hook.list_memories({"user_id": production["identifier"]})
    review_ids = [r.payload.get("review_id") or (r.payload.get("metadata") or {}).get("review_id") for r in rows]
    assert len(review_ids) == len(set(review_ids)) >= 24
    assert set(review_ids) == {o["id"] for o in outputs}

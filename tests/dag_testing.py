"""Running in-test DAGs under ``dag.test()``: one helper for every test module."""

from __future__ import annotations

from typing import Any


def register_dag(dag: Any, bundle_name: str = "tests") -> None:
    """Serialize an in-memory DAG into the test metadata DB, so ``dag.test()`` can create its run.

    ``dag.test()`` in Airflow 3.3 only finds DAGs that a bundle (the dags folder) or an earlier parse wrote
    to the DB; DAGs built inside a test are written here the way the DAG processor writes them.
    """
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.models.dagbundle import DagBundleModel
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    with create_session() as session:
        session.merge(DagBundleModel(name=bundle_name))
        session.flush()
        update_dag_parsing_results_in_db(
            bundle_name, None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=session
        )


def deploy_test_production(stack: Any, work_dir: Any, prefix: str, *, window_records: int = 30) -> dict[str, Any]:
    """Deploy the review agent v1 as a production job of its own (unique topics, job name, Mem0 namespace)
    and write its replay spec; returns what the replay tests need. Cancel it with :func:`stop_production`."""
    import uuid

    from airflow_flink_replay.local.demo import DemoTopics, deploy_production, write_spec

    suffix = uuid.uuid4().hex[:6]
    topics = DemoTopics.named(f"{prefix}-{suffix}")
    job_name = identifier = f"review-triage-{prefix}-{suffix}"
    job_id = deploy_production(stack, topics, job_name=job_name, job_identifier=identifier, initial_reviews=24)
    spec_path = write_spec(stack, topics, work_dir / "spec.yaml", name=f"{prefix}-{suffix}", job_name=job_name,
                           job_identifier=identifier, window_records=window_records, runs_dir=work_dir / "runs")
    return {"job_id": job_id, "job_name": job_name, "topics": topics, "spec_path": spec_path,
            "identifier": identifier}


def stop_production(stack: Any, production: dict[str, Any]) -> None:
    """Cancel the test's production job."""
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    for job in hook.list_jobs().jobs:
        if job.name == production["job_name"] and job.state == "RUNNING":
            hook.cancel_job(job.jid)


def running_jobs(stack: Any, name: str) -> list[str]:
    """Ids of the RUNNING Flink jobs called ``name``."""
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    return [j.jid for j in hook.list_jobs().jobs if j.name == name and j.state == "RUNNING"]


def run_replay_dag(
    stack: Any, production: dict[str, Any], conf: dict[str, Any], *, kind: str = "gate", feed_from: int = 1000,
    conn_file: str | None = None, spec: Any = None,
) -> tuple[Any, dict[str, Any]]:
    """Build the replay DAG of ``kind`` for the production's spec and run it under ``dag.test()`` while
    reviews keep flowing into production; returns the DAG run and ``{states, record, spec}``."""
    import json
    from pathlib import Path

    from airflow_flink_replay.core.replay_spec import ReplaySpec
    from airflow_flink_replay.dag_factory import build_replay_dag
    from airflow_flink_replay.local.demo import ReviewFeeder

    spec = spec or ReplaySpec.from_yaml(production["spec_path"])
    dag = build_replay_dag(spec, dag_id=f"{kind}_{spec.name.replace('-', '_')}", kind=kind)  # type: ignore[arg-type]
    register_dag(dag, "replay-e2e")
    with ReviewFeeder(stack.kafka_bootstrap, production["topics"].reviews, start_index=feed_from, rate=5):
        dagrun = dag.test(run_conf=conf, conn_file_path=conn_file or stack.connections_file)
    states = {ti.task_id: str(ti.state) for ti in dagrun.get_task_instances()}
    runs = Path(spec.runs_uri.removeprefix("file://"))
    records = [p for p in runs.rglob("run_record.json") if json.loads(p.read_text())["run_id"] == dagrun.run_id]
    record = json.loads(records[0].read_text()) if records else {}
    return dagrun, {"states": states, "record": record, "spec": spec}

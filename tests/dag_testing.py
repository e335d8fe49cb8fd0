"""Running in-test DAGs under ``dag.test()``: one helper for every test module."""

from __future__ import annotations

import time
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
    return deploy_planned_production(stack, plan_test_production(stack, work_dir, prefix,
                                                                 window_records=window_records))


def plan_test_production(stack: Any, work_dir: Any, prefix: str, *, window_records: int = 30) -> dict[str, Any]:
    """The names of a test production of its own and its replay spec, written; nothing deployed yet (a test
    can start Airflow on the spec while :func:`deploy_planned_production` deploys it)."""
    import uuid

    from airflow_flink_replay.local.demo import DemoTopics, write_spec

    suffix = uuid.uuid4().hex[:6]
    topics = DemoTopics.named(f"{prefix}-{suffix}")
    job_name = identifier = f"review-triage-{prefix}-{suffix}"
    spec_path = write_spec(stack, topics, work_dir / "spec.yaml", name=f"{prefix}-{suffix}", job_name=job_name,
                           job_identifier=identifier, window_records=window_records, runs_dir=work_dir / "runs")
    return {"job_id": None, "job_name": job_name, "topics": topics, "spec_path": spec_path,
            "identifier": identifier}


def deploy_planned_production(stack: Any, production: dict[str, Any]) -> dict[str, Any]:
    """Deploy what :func:`plan_test_production` planned; returns it with the production job's id."""
    from airflow_flink_replay.local.demo import deploy_production

    job_id = deploy_production(stack, production["topics"], job_name=production["job_name"],
                               job_identifier=production["identifier"], initial_reviews=24)
    return {**production, "job_id": job_id}


def stop_production(stack: Any, production: dict[str, Any]) -> None:
    """Cancel the test's production job and remove what it and the replay runs of its spec left on the stack:
    its topics, its Mem0 memories (user_id = its job identifier) and the quiesce savepoints of those runs."""
    import shutil
    from pathlib import Path

    from confluent_kafka.admin import AdminClient

    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.hooks.mem0 import Mem0Hook

    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    cancelled = [job.jid for job in hook.list_jobs().jobs
                 if job.name == production["job_name"] and job.state == "RUNNING"]  # fmt: skip
    for jid in cancelled:
        hook.cancel_job(jid)
    # until they have ended: a job still CANCELLING holds its task slots, and the next module's jobs would find
    # none (NoResourceAvailable: the cassette module's four jobs after the quickstart's production)
    deadline = time.monotonic() + 90
    while cancelled and time.monotonic() < deadline:
        states = {job.jid: job.state for job in hook.list_jobs().jobs}
        if all(states.get(jid) in ("CANCELED", "FINISHED", "FAILED", None) for jid in cancelled):
            break
        time.sleep(1)
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    topics = [t for t in production["topics"].model_dump().values() if t in admin.list_topics(timeout=10).topics]
    for future in admin.delete_topics(topics).values() if topics else ():
        future.result(30)
    memory = Mem0Hook(config=stack.mem0_config())
    rows = memory.list_memories({"user_id": production["identifier"]})
    if rows:
        memory.get_store().delete_ids([r.id for r in rows])
    for folder in run_savepoint_folders(stack, production):
        shutil.rmtree(folder, ignore_errors=True)
        if folder.parent != Path(stack.savepoint_dir) and not any(folder.parent.iterdir()):
            folder.parent.rmdir()  # the DAG's folder, once its last run's savepoint is gone


def run_savepoint_folders(stack: Any, production: dict[str, Any]) -> list[Any]:
    """The quiesce savepoint folders (``<savepoint_dir>/<dag_id>/<run_id>``) of the replay runs of the
    production's spec, found through their run records, that exist."""
    import json
    from pathlib import Path

    from airflow_flink_replay.core.replay_spec import ReplaySpec
    from airflow_flink_replay.operators.flink import run_path_segment

    base = Path(stack.savepoint_dir)
    runs = Path(ReplaySpec.from_yaml(production["spec_path"]).runs_uri.removeprefix("file://"))
    folders = []
    for path in runs.rglob("run_record.json") if runs.exists() else ():
        record = json.loads(path.read_text())
        folder = base / run_path_segment(record["dag_id"], record["run_id"]).strip("/")
        if folder.is_dir() and folder not in folders:
            folders.append(folder)
    return folders


def running_jobs(stack: Any, name: str) -> list[str]:
    """Ids of the RUNNING Flink jobs called ``name``."""
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    return [j.jid for j in hook.list_jobs().jobs if j.name == name and j.state == "RUNNING"]


def run_replay_dag(
    stack: Any, production: dict[str, Any], conf: dict[str, Any], *, kind: str = "gate", feed_from: int = 1000,
    conn_file: str | None = None, spec: Any = None, feed_after_resume: bool = False, retry_delay_s: float | None = None,
    feeder: Any = None, feed_after_savepoint: bool = False,
) -> tuple[Any, dict[str, Any]]:
    """Build the replay DAG of ``kind`` for the production's spec and run it under ``dag.test()`` while
    reviews keep flowing into production; returns the DAG run and ``{states, record, spec}``.

    ``feed_after_resume``: production gets no review until it runs again as a new job, so nothing is in
    flight when it stops (``stop`` mode keeps in-flight agent runs in the savepoint; see docs/limitations.md).
    ``retry_delay_s``: every task keeps its number of retries but waits only this long between them (a drill
    whose fault lasts the whole run: the retries fail the same way, sooner).
    ``feeder``: what feeds production instead of reviews at 5 a second (a ``PacedFeeder``).
    ``feed_after_savepoint``: production gets no review until it has a savepoint newer than the run's start
    (``savepoint`` mode: production keeps running, so without this the savepoint may hold agent runs in flight;
    Flink Agents 0.2.0 can crash a TaskManager natively restoring some of them, docs/limitations.md)."""

    from airflow_flink_replay.core.replay_spec import ReplaySpec
    from airflow_flink_replay.dag_factory import build_replay_dag
    from airflow_flink_replay.local.demo import ReviewFeeder

    spec = spec or ReplaySpec.from_yaml(production["spec_path"])
    revive_dead_taskmanagers(stack)
    dag = build_replay_dag(spec, dag_id=f"{kind}_{spec.name.replace('-', '_')}", kind=kind)  # type: ignore[arg-type]
    if retry_delay_s is not None:
        from datetime import timedelta

        for task in dag.tasks:
            task.retry_delay, task.retry_exponential_backoff = timedelta(seconds=retry_delay_s), 0
    register_dag(dag, "replay-e2e")
    feeder = feeder or ReviewFeeder(stack.kafka_bootstrap, production["topics"].reviews, start_index=feed_from, rate=5)
    if feed_after_resume:
        feeder = AfterResume(feeder, stack, production["job_name"])  # type: ignore[assignment]
    elif feed_after_savepoint:
        feeder = _AfterSavepoint(feeder, stack, production["job_name"])  # type: ignore[assignment]
    with feeder:
        dagrun = dag.test(run_conf=conf, conn_file_path=conn_file or stack.connections_file)
    _log_task_times(stack, dagrun)
    states = {ti.task_id: str(ti.state) for ti in dagrun.get_task_instances()}
    return dagrun, {"states": states, "record": run_record_of(spec.runs_uri, dagrun.run_id), "spec": spec}


def xcoms_of(dagrun: Any) -> dict[tuple[str, str], Any]:
    """Every XCom of ``dagrun``, by ``(task id, key)``."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(select(XComModel.task_id, XComModel.key, XComModel.value).where(
            XComModel.dag_id == dagrun.dag_id, XComModel.run_id == dagrun.run_id)).all()  # fmt: skip
    return {(task, key): value for task, key, value in rows}


def run_record_of(runs_uri: str, run_id: str) -> dict[str, Any]:
    """The run record of ``run_id`` below ``runs_uri`` (a local folder or any fsspec URI: ``memory://`` is the
    test process's own), or ``{}``."""
    import json

    import fsspec

    fs, root = fsspec.core.url_to_fs(runs_uri)
    for path in fs.glob(f"{root.rstrip('/')}/**/run_record.json"):
        record = json.loads(fs.cat_file(path))
        if record["run_id"] == run_id:
            return record
    return {}


def _log_task_times(stack: Any, dagrun: Any) -> None:
    """Append each task's start and duration to the stack's ``logs/suite-tasks.jsonl`` (for tuning the suite)."""
    import json
    from pathlib import Path

    tis = sorted(dagrun.get_task_instances(), key=lambda ti: (ti.start_date is None, ti.start_date or 0))
    first = next((ti.start_date for ti in tis if ti.start_date), None)
    rows = [{"task": ti.task_id, "state": str(ti.state),
             "at": round((ti.start_date - first).total_seconds(), 1) if ti.start_date and first else None,
             "s": round(ti.duration or 0.0, 1)} for ti in tis]
    with (Path(stack.workdir) / "logs" / "suite-tasks.jsonl").open("a") as log:
        log.write(json.dumps({"dag": dagrun.dag_id, "run": dagrun.run_id, "tasks": rows}) + "\n")


def production_outputs(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every record of production's outputs topic, read from the start (idle for 10 polls = the end)."""
    import json
    import uuid

    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    parts = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics[topic].partitions
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


def assert_production_state_intact(stack: Any, production: dict[str, Any]) -> list[dict[str, Any]]:
    """Production's keyed state survived the replay runs: each customer's counter starts at 1 once and then
    counts on without a gap or a restart (a lost state would start again at 1). Returns the outputs."""
    outputs = production_outputs(stack.kafka_bootstrap, production["topics"].outputs)
    assert outputs, "production wrote no output"
    by_customer: dict[str, list[int]] = {}
    for out in outputs:
        by_customer.setdefault(out["customer"], []).append(int(out["count"]))
    for customer, counts in by_customer.items():
        assert counts.count(1) == 1, (customer, sorted(counts))
        assert sorted(set(counts)) == list(range(1, max(counts) + 1)), (customer, sorted(counts))
    return outputs


def assert_no_replay_leftovers(stack: Any, record: dict[str, Any]) -> None:
    """No replay action-state topic, memory fork or replay Flink job of the run ``record`` is left."""
    from confluent_kafka.admin import AdminClient

    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.hooks.mem0 import Mem0Hook

    topics = set(AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=10).topics)
    assert record["variants"], record
    assert not [v["action_state_topic"] for v in record["variants"] if v["action_state_topic"] in topics]
    isolation = (record.get("action_state") or {}).get("isolation") or {}
    results = [t for kinds in (isolation.get("result_topics") or {}).values() for t in kinds.values()]
    assert not [t for t in results if t in topics], results
    memory = Mem0Hook(config=stack.mem0_config())
    assert {v["fork_namespace"]: memory.count({"user_id": v["fork_namespace"]}) for v in record["variants"]} == {
        v["fork_namespace"]: 0 for v in record["variants"]
    }
    for url in {stack.flink_rest_url, stack.replay_flink_rest_url or stack.flink_rest_url}:
        jobs = FlinkRestHook(settings=FlinkRestSettings(base_url=url)).list_jobs().jobs
        assert not [j.name for j in jobs if record["run_id"] in j.name and j.state == "RUNNING"], url


class AfterResume:
    """Runs ``feeder`` only once production runs as a job other than the ones running now (resumed)."""

    def __init__(self, feeder: Any, stack: Any, job_name: str) -> None:
        import threading

        self.feeder, self.stack, self.job_name = feeder, stack, job_name
        self.before = set(running_jobs(stack, job_name))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="feed-after")
        self._started = False

    def ready(self) -> bool:
        """Production runs again as a new job."""
        return bool(set(running_jobs(self.stack, self.job_name)) - self.before)

    def _run(self) -> None:
        import contextlib

        while not self._stop.wait(0.5):
            with contextlib.suppress(Exception):  # Flink answers slowly while a job starts: look again
                if self.ready():
                    self.feeder.__enter__()
                    self._started = True
                    return

    def __enter__(self) -> AfterResume:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        if self._started:
            self.feeder.__exit__(*exc)


class _AfterSavepoint(AfterResume):
    """Runs ``feeder`` only once production's running job has a completed savepoint taken after now."""

    def __init__(self, feeder: Any, stack: Any, job_name: str) -> None:
        import time

        super().__init__(feeder, stack, job_name)
        self.since_ms = int(time.time() * 1000)

    def ready(self) -> bool:
        from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

        hook = FlinkRestHook(settings=FlinkRestSettings(base_url=self.stack.flink_rest_url))
        for job_id in self.before:
            latest = hook.get_checkpoints(job_id).latest_savepoint
            if latest is not None and (latest.trigger_timestamp or 0) >= self.since_ms:
                return True
        return False


def connections_with_mem0_down(stack: Any, conn_id: str, folder: Any) -> str:
    """A copy of the stack's connections file with ``conn_id``: a Mem0 connection to the stack's memory store
    config but a port nothing listens on (the store is down). Returns the file's path."""
    import json
    from pathlib import Path

    broken = json.loads(json.dumps(stack.mem0_config()))
    broken["vector_store"]["config"]["port"] = 1  # nothing listens there
    conns = json.loads(Path(stack.connections_file).read_text())
    conns[conn_id] = {"conn_type": "mem0", "extra": json.dumps(broken)}
    path = Path(folder) / "connections.json"
    path.write_text(json.dumps(conns))
    return str(path)


def stack_flink_default(stack: Any) -> str:
    """The stack's ``flink_default`` connection (as in its connections file) as an ``AIRFLOW_CONN_*`` value."""
    import json
    from pathlib import Path

    return json.dumps(json.loads(Path(stack.connections_file).read_text())["flink_default"])


def revive_dead_taskmanagers(stack: Any) -> None:
    """Start a fresh TaskManager for a cluster that has none. PyFlink's embedded Python can crash a
    TaskManager natively when Python jobs end (a pemja SIGSEGV was seen on the replay cluster in CI; see
    docs/limitations.md); a real deployment's supervisor restarts it, the local stack has none."""
    from pathlib import Path

    from airflow_flink_replay.local.stack import LocalStack, StackConfig, flink_taskmanagers

    local = LocalStack(StackConfig(workdir=Path(stack.workdir)))
    for cluster, url in (("production", stack.flink_rest_url), ("replay", stack.replay_flink_rest_url)):
        if url and flink_taskmanagers(url) < 1:
            local.restart_taskmanager(cluster)

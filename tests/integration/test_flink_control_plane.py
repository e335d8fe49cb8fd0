"""Quiesce (drain / stop / savepoint) → resume on the real local Flink, run as Airflow DAGs under dag.test().

One keyed-counter job (Kafka in/out on tansu, checkpointing, bundle size 20 / 200 ms) goes through every
mode in turn; after each resume the per-key counters must continue exactly where they stopped. The job
also holds every record as pending work in state, released only by an event-time timer far in the
future: drain must flush that work before its savepoint; stop and savepoint must carry it inside.

A second test drains a real Flink Agents job (``tests/jobs/gated_agent.py`` in the production pipeline)
while agent runs are in flight: chat-model calls awaited asynchronously (held by a gate file until the stop
is under way) and later events of the same key queued behind them. Flink Agents 0.2.0's
``ActionExecutionOperator.endInput()`` yields to the mailbox until no key is in progress (pending inputs
included), and Flink 2.2 calls ``endInput`` only when a stop drains (``StopMode.DRAIN``), so every event
must have its output before the job is FINISHED and the restored job must repeat none.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter
from tests.dag_testing import stack_flink_default
from tests.jobs import harness

pytestmark = pytest.mark.timeout(900)

RESULTS: dict[str, dict[str, Any]] = {}
#: The gated agent's factory (tests/jobs/gated_agent.py imports flink_agents: Flink side only, not imported here).
GATED_AGENT = "tests.jobs.gated_agent:build_agent"


@pytest.fixture(scope="module")
def flink(stack: Any) -> FlinkRestHook:
    return FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url, retries=2))


@pytest.fixture(autouse=True)
def flink_conn_env(stack: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """flink_default also as an env var — the very connection of the stack's connections file, not a second
    one: Airflow caches the secrets backends of the first dag.test() in a process, so a connections file
    passed later may not be consulted by inline triggers."""
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DEFAULT", stack_flink_default(stack))


@pytest.fixture
def started_jobs(flink: FlinkRestHook) -> Any:
    """Job ids the test started; every one still alive is cancelled at the end."""
    ids: list[str] = []
    yield ids
    for job_id in ids:
        try:
            if flink.get_job(job_id).state not in ("FINISHED", "CANCELED", "FAILED"):
                flink.cancel_job(job_id)
        except Exception:
            pass


def at(iso: str) -> datetime:
    """A result timestamp (ISO 8601) as an aware datetime."""
    return datetime.fromisoformat(iso)


def flink_time(ms: int) -> datetime:
    """A Flink epoch-ms timestamp as an aware datetime."""
    return datetime.fromtimestamp(ms / 1000, UTC)


def expected_count(seq: int) -> int:
    """Keys round-robin a, b, c: record ``seq`` is the (seq // 3 + 1)-th of its key."""
    return seq // 3 + 1


def run_dag(stack: Any, dag_id: str, build: Any) -> dict[str, Any]:
    """Build a DAG with ``build(dag)`` (which wires a ``record`` task), run it with dag.test()."""
    from airflow.sdk import DAG

    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        build(dag)
    dr = harness.run_dag_test(dag, stack.connections_file)
    assert dr.state == "success", f"{dag_id} ended {dr.state}: {RESULTS.get(dag_id)}"
    return RESULTS[dag_id]


def quiesce_resume_dag(dag_id: str, job_id: str, mode: str, program: Any, format_type: str = "CANONICAL") -> Any:
    from airflow.sdk import task

    from airflow_flink_replay.operators.flink import (
        QuiesceAndSavepointOperator,
        QuiesceRef,
        ResumeJobOperator,
    )

    def build(dag: Any) -> None:
        quiesce = QuiesceAndSavepointOperator(
            task_id="quiesce", job_id=job_id, mode=mode, format_type=format_type, timeout=120, deferrable=True
        )
        resume = ResumeJobOperator(
            task_id="resume", program=program, quiesce=QuiesceRef(result=quiesce.output), timeout=180, deferrable=True
        )

        @task
        def record(q: dict[str, Any], r: dict[str, Any]) -> None:
            RESULTS[dag_id] = {"quiesce": q, "resume": r}

        quiesce >> resume
        record(quiesce.output, resume.output)

    return build


def test_each_mode_stops_savepoints_and_resumes_where_the_counter_stopped(
    stack: Any, flink: FlinkRestHook, started_jobs: list[str], airflow_db: Any
) -> None:
    from airflow.sdk import task

    from airflow_flink_replay.operators.flink import (
        QuiesceAndSavepointOperator,
        Resubmission,
        ResumeJobOperator,
    )

    bootstrap = stack.kafka_bootstrap
    name = harness.unique("cp-counter")
    topic_in, topic_out = f"{name}-in", f"{name}-out"
    harness.create_topics(bootstrap, topic_in, topic_out)
    program = harness.counter_program(bootstrap, topic_in, topic_out, stack.connector_jars, job_name=name)
    submitter = RestPythonSubmitter(flink, flink_home=stack.flink_home)
    started_at = datetime.now(UTC)
    try:
        harness.produce(bootstrap, topic_in, range(0, 9))
        k1 = submitter.submit(program).job_id
        started_jobs.append(k1)
        flink.wait_for_job_state(k1, ("RUNNING",), timeout=120, all_tasks_running=True)
        out = harness.wait_outputs(bootstrap, topic_out, lambda o: len(harness.counts(o)) == 9)
        assert harness.held(out) == set(), "held work is only released at end of input"

        # --- drain: every held record is flushed before the savepoint; the counter continues.
        drained = run_dag(
            stack, f"{name}-drain", quiesce_resume_dag(f"{name}-drain", k1, "drain", program.model_dump())
        )
        q, r = drained["quiesce"], drained["resume"]
        started_jobs.append(r["job_id"])
        assert q["mode"] == "drain" and q["production_stopped"] and not q["in_flight_work_possible"]
        assert harness.savepoint_dir_exists(q["savepoint_path"]), q["savepoint_path"]
        assert f"/{name}-drain/" in q["savepoint_path"], "savepoint lives in the run's directory"
        drained_job = flink.get_job(k1)
        assert drained_job.state == "FINISHED"
        assert q["format_type"] == "CANONICAL"
        assert started_at < at(q["requested_at"]) < at(q["savepoint_completed_at"]) < datetime.now(UTC)
        # wait_for_finished (default): the job's own end time, not a guess; the stop ended it after the request
        assert at(q["job_stopped_at"]) == flink_time(drained_job.end_time)
        assert at(q["requested_at"]) < at(q["job_stopped_at"])
        assert at(r["stopped_at"]) == at(q["requested_at"]) and at(r["running_at"]) > at(q["job_stopped_at"])
        vertices = {v["name"]: v for v in q["plan"]["vertices"]}
        counter_vertex = next(v for n, v in vertices.items() if n.startswith("keyed-counter"))
        assert (counter_vertex["parallelism"], counter_vertex["max_parallelism"]) == (1, 128)
        assert q["plan"]["agent_vertex_id"] is None  # a plain PyFlink job has no agent operator
        out = harness.read_outputs(bootstrap, topic_out)
        assert harness.held(out) == set(range(9)), "drain must flush the pending (held) work"
        assert r["job_id"] != k1 and r["savepoint_path"] == q["savepoint_path"] and not r["reattached"]
        assert 0 < r["downtime_seconds"] < 120
        assert flink.get_job(r["job_id"]).state == "RUNNING"

        harness.produce(bootstrap, topic_in, range(9, 18))
        out = harness.wait_outputs(bootstrap, topic_out, lambda o: len(harness.counts(o)) == 18)
        assert harness.counts(out) == {s: expected_count(s) for s in range(18)}

        # --- stop (no drain), in Flink's NATIVE format: held records of batch 2 stay inside the savepoint.
        stopped = run_dag(
            stack,
            f"{name}-stop",
            quiesce_resume_dag(f"{name}-stop", r["job_id"], "stop", program.model_dump(), format_type="NATIVE"),
        )
        q2, r2 = stopped["quiesce"], stopped["resume"]
        started_jobs.append(r2["job_id"])
        assert q2["mode"] == "stop" and q2["production_stopped"] and harness.savepoint_dir_exists(q2["savepoint_path"])
        assert q2["format_type"] == "NATIVE"
        recorded = {c.external_path: c for c in flink.get_checkpoints(r["job_id"]).savepoints()}
        assert recorded[q2["savepoint_path"]].savepoint_format == "NATIVE", recorded  # what Flink wrote
        assert at(r["running_at"]) < at(q2["requested_at"]) < at(q2["savepoint_completed_at"])
        assert at(q2["job_stopped_at"]) == flink_time(flink.get_job(r["job_id"]).end_time)
        assert harness.held(harness.read_outputs(bootstrap, topic_out)) == set(range(9)), "stop must not flush"
        harness.produce(bootstrap, topic_in, range(18, 27))
        out = harness.wait_outputs(bootstrap, topic_out, lambda o: len(harness.counts(o)) == 27)
        assert harness.counts(out) == {s: expected_count(s) for s in range(27)}

        # --- savepoint (no stop): production keeps running, resume is a no-op.
        snap = run_dag(
            stack, f"{name}-sp", quiesce_resume_dag(f"{name}-sp", r2["job_id"], "savepoint", program.model_dump())
        )
        q3, r3 = snap["quiesce"], snap["resume"]
        assert q3["mode"] == "savepoint" and not q3["production_stopped"] and q3["in_flight_work_possible"]
        assert q3["format_type"] == "CANONICAL" and q3["job_stopped_at"] is None  # production never stopped
        assert at(r2["running_at"]) < at(q3["requested_at"]) < at(q3["savepoint_completed_at"]) < datetime.now(UTC)
        assert "in-flight work may be inside" in q3["note"]
        assert harness.savepoint_dir_exists(q3["savepoint_path"])
        assert r3["reattached"] and r3["job_id"] == r2["job_id"]
        assert flink.get_job(r2["job_id"]).state == "RUNNING"

        # The savepoint restores: cancel production, resume from the savepoint alone, counters continue.
        flink.cancel_job(r2["job_id"])
        flink.wait_for_job_state(r2["job_id"], ("CANCELED",), timeout=60)
        harness.produce(bootstrap, topic_in, range(27, 36))
        restore_id = f"{name}-restore"

        def build_restore(dag: Any) -> None:
            resume = ResumeJobOperator(
                task_id="resume",
                program=program.model_dump(),
                resubmission=Resubmission(savepoint_path=q3["savepoint_path"]),
                deferrable=True,
            )

            @task
            def record(res: dict[str, Any]) -> None:
                RESULTS[restore_id] = {"resume": res}

            record(resume.output)

        r4 = run_dag(stack, restore_id, build_restore)["resume"]
        started_jobs.append(r4["job_id"])
        assert r4["downtime_seconds"] is None  # no quiesce result: no stop time known
        out = harness.wait_outputs(bootstrap, topic_out, lambda o: len(harness.counts(o)) == 36)
        assert harness.counts(out) == {s: expected_count(s) for s in range(36)}

        # --- a final drain releases everything held across the stop-mode and savepoint-mode restores.
        final_id = f"{name}-final"

        def build_final(dag: Any) -> None:
            quiesce = QuiesceAndSavepointOperator(
                task_id="quiesce", job_id=r4["job_id"], mode="drain", deferrable=False
            )

            @task
            def record(q: dict[str, Any]) -> None:
                RESULTS[final_id] = {"quiesce": q}

            record(quiesce.output)

        run_dag(stack, final_id, build_final)
        out = harness.read_outputs(bootstrap, topic_out)
        released = Counter(o["seq"] for o in out if o["kind"] == "held")
        assert set(released) == set(range(36)) and max(released.values()) == 1, released
    finally:
        harness.delete_topics(bootstrap, topic_in, topic_out)


def gated_agent_program(stack: Any, name: str, source: str, sink: str, action_state: str) -> Any:
    """The production pipeline (``production_job.py``) running the gated agent of ``tests/jobs/gated_agent.py``."""
    from airflow_flink_replay.core.flink_models import FlinkPythonProgram
    from airflow_flink_replay.local.demo import PRODUCTION_JOB_SCRIPT

    args = [
        "--agent-factory", GATED_AGENT, "--bootstrap", stack.kafka_bootstrap, "--source-topic", source,
        "--sink-topic", sink, "--action-state-topic", action_state, "--job-identifier", name,
        "--agent-uid", "afr-agent", "--jars", ",".join(stack.connector_jars), "--job-name", name,
    ]  # fmt: skip
    return FlinkPythonProgram(entry_point=PRODUCTION_JOB_SCRIPT, program_args=args, job_name=name)


def produce_items(bootstrap: str, topic: str, ids: range, keys: int, gate: str | None = None) -> list[str]:
    """Produce ``{"id": "e<n>", "customer": "k<n % keys>", "gate"}`` keyed by customer; returns the ids."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for n in ids:
        item = {"id": f"e{n:03d}", "customer": f"k{n % keys}", **({"gate": gate} if gate else {})}
        producer.produce(topic, json.dumps(item).encode(), key=item["customer"].encode())
        producer.flush(10)  # one record per batch (tansu)
    return [f"e{n:03d}" for n in ids]


def wait_committed(bootstrap: str, group: str, topic: str, offset: int, timeout: float = 120) -> None:
    """Until ``group`` committed ``offset`` on partition 0 of ``topic``. The Kafka source commits on a completed
    checkpoint, so every record before ``offset`` has then reached every operator's state (the agent's too)."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline, committed = time.monotonic() + timeout, -1
    try:
        while time.monotonic() < deadline:
            committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
            if committed >= offset:
                return
            time.sleep(0.5)
    finally:
        consumer.close()
    raise AssertionError(f"group {group} committed {committed} on {topic}, not {offset}, within {timeout:g} s")


class GateOpener:
    """Creates the gate file once job ``job_id`` has a savepoint IN_PROGRESS (the drain is under way), so the
    gated model calls are still in flight when the stop is requested; after ``timeout`` it opens anyway (the
    job must never stay blocked) and ``opened_by_stop`` stays False."""

    def __init__(self, flink: FlinkRestHook, job_id: str, gate: Any, timeout: float = 90) -> None:
        import threading

        self.flink, self.job_id, self.gate, self.timeout = flink, job_id, gate, timeout
        self.opened_by_stop = False
        self.opened_at: datetime | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import time

        import requests

        deadline = time.monotonic() + self.timeout
        try:
            while time.monotonic() < deadline:
                # raw statistics: the hook's CheckpointStats keeps completed checkpoints only
                stats = requests.get(f"{self.flink.base_url}/jobs/{self.job_id}/checkpoints", timeout=10).json()
                if any(c.get("is_savepoint") and c.get("status") == "IN_PROGRESS" for c in stats.get("history", [])):
                    self.opened_by_stop = True
                    return
                time.sleep(0.2)
        finally:
            self.opened_at = datetime.now(UTC)
            self.gate.touch()

    def __enter__(self) -> GateOpener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.gate.touch()
        self._thread.join(timeout=30)


def test_drain_finishes_in_flight_agent_runs_and_the_restored_job_repeats_none(
    stack: Any, flink: FlinkRestHook, started_jobs: list[str], airflow_db: Any, tmp_path: Any
) -> None:
    """A Flink Agents job with runs in flight (one async chat-model call per key held open, five more events per
    key queued behind it) is drained by QuiesceAndSavepointOperator(mode="drain"), then resumed."""
    bootstrap = stack.kafka_bootstrap
    name = harness.unique("cp-agent")
    source, sink, action_state = f"{name}-in", f"{name}-out", f"{name}-action-state"
    harness.create_topics(bootstrap, source, sink, action_state)
    program = gated_agent_program(stack, name, source, sink, action_state)
    gate = tmp_path / "gate"
    try:
        job_id = RestPythonSubmitter(flink, flink_home=stack.flink_home).submit(program).job_id
        started_jobs.append(job_id)
        flink.wait_for_job_state(job_id, ("RUNNING",), timeout=180, all_tasks_running=True)
        ids = produce_items(bootstrap, source, range(24), keys=4, gate=str(gate))
        wait_committed(bootstrap, f"afr-{name}", source, len(ids))  # all 24 are inside the agent operator
        assert harness.read_outputs(bootstrap, sink, quiet=0.5) == [], "the gate holds every run"

        with GateOpener(flink, job_id, gate) as opener:
            drained = run_dag(
                stack, f"{name}-drain", quiesce_resume_dag(f"{name}-drain", job_id, "drain", program.model_dump())
            )
        q, r = drained["quiesce"], drained["resume"]
        started_jobs.append(r["job_id"])
        job = flink.get_job(job_id)
        assert job.state == "FINISHED" and q["production_stopped"] and not q["in_flight_work_possible"]
        agent = next(v for v in q["plan"]["vertices"] if v["id"] == q["plan"]["agent_vertex_id"])
        assert "action-execute-operator" in agent["name"]
        assert opener.opened_by_stop and opener.opened_at and opener.opened_at > at(q["requested_at"])

        # Every event has exactly one output, answered after the stop was requested and before the job FINISHED.
        outputs = harness.read_outputs(bootstrap, sink)
        assert sorted(o["id"] for o in outputs) == ids, "drain must finish every in-flight and queued run"
        requested_ms = at(q["requested_at"]).timestamp() * 1000
        assert all(o["gate_open"] and requested_ms < o["answered_at_ms"] <= job.end_time for o in outputs), outputs
        # In flight at the stop: one model call per key had started; the other 20 events were still queued.
        in_flight = sorted(o["customer"] for o in outputs if o["started_at_ms"] < requested_ms)
        assert in_flight == ["k0", "k1", "k2", "k3"], outputs

        # The job restored from the drained savepoint repeats none of them; new events still get answers.
        assert r["savepoint_path"] == q["savepoint_path"] and flink.get_job(r["job_id"]).state == "RUNNING"
        more = produce_items(bootstrap, source, range(24, 28), keys=4)
        outputs = harness.wait_outputs(bootstrap, sink, lambda o: {x["id"] for x in o} >= set(more), timeout=120)
        assert Counter(o["id"] for o in outputs) == Counter(ids + more), "the restored job repeated a run"
    finally:
        gate.touch()
        harness.delete_topics(bootstrap, source, sink, action_state)

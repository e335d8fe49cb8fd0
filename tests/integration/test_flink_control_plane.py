"""Quiesce (drain / stop / savepoint) → resume on the real local Flink, run as Airflow DAGs under dag.test().

One keyed-counter job (Kafka in/out on tansu, checkpointing, bundle size 20 / 200 ms) goes through every
mode in turn; after each resume the per-key counters must continue exactly where they stopped. The job
also holds every record as pending work in state, released only by an event-time timer far in the
future: drain must flush that work before its savepoint; stop and savepoint must carry it inside.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Any

import pytest

from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter
from tests.jobs import harness

pytestmark = pytest.mark.timeout(900)

RESULTS: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="module")
def flink(stack: Any) -> FlinkRestHook:
    return FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url, retries=2))


@pytest.fixture(autouse=True)
def flink_conn_env(stack: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """flink_default also as an env var: Airflow caches the secrets backends of the first dag.test() in a
    process, so a connections file passed later may not be consulted by inline triggers."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLINK_DEFAULT", json.dumps({"conn_type": "flink_rest", "host": stack.flink_rest_url})
    )


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


def quiesce_resume_dag(dag_id: str, job_id: str, mode: str, program: Any) -> Any:
    from airflow.sdk import task

    from airflow_flink_replay.operators.flink import QuiesceAndSavepointOperator, ResumeJobOperator

    def build(dag: Any) -> None:
        quiesce = QuiesceAndSavepointOperator(task_id="quiesce", job_id=job_id, mode=mode, timeout=120, deferrable=True)
        resume = ResumeJobOperator(
            task_id="resume", program=program, quiesce_result=quiesce.output, timeout=180, deferrable=True
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

    from airflow_flink_replay.operators.flink import QuiesceAndSavepointOperator, ResumeJobOperator

    bootstrap = stack.kafka_bootstrap
    name = harness.unique("cp-counter")
    topic_in, topic_out = f"{name}-in", f"{name}-out"
    harness.create_topics(bootstrap, topic_in, topic_out)
    program = harness.counter_program(bootstrap, topic_in, topic_out, stack.connector_jars, job_name=name)
    submitter = RestPythonSubmitter(flink, flink_home=stack.flink_home)
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
        assert flink.get_job(k1).state == "FINISHED"
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

        # --- stop (no drain): held records of batch 2 stay inside the savepoint.
        stopped = run_dag(
            stack, f"{name}-stop", quiesce_resume_dag(f"{name}-stop", r["job_id"], "stop", program.model_dump())
        )
        q2, r2 = stopped["quiesce"], stopped["resume"]
        started_jobs.append(r2["job_id"])
        assert q2["mode"] == "stop" and q2["production_stopped"] and harness.savepoint_dir_exists(q2["savepoint_path"])
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
                task_id="resume", program=program.model_dump(), savepoint_path=q3["savepoint_path"], deferrable=True
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

"""Failure paths and retries of the control plane on the real local Flink, run under dag.test().

Each failure asserts the text a user sees: the exception Airflow hands to the task's failure callback.
Retries: a quiesce task that loses its worker right after the stop/savepoint completed (simulated by a
subclass that raises once after finishing) must, on its retry, reattach instead of stopping or taking a
savepoint twice.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter
from airflow_flink_replay.operators.flink import (
    QuiesceAndSavepointOperator,
    QuiesceRef,
    Resubmission,
    ResumeJobOperator,
)
from tests.dag_testing import stack_flink_default
from tests.jobs import harness

pytestmark = pytest.mark.timeout(600)

ERRORS: dict[str, str] = {}
RESULTS: dict[str, Any] = {}
FINISHED: dict[str, list[str]] = {}


def _record_failure(context: Any) -> None:
    ERRORS[context["ti"].dag_id] = str(context["exception"])
    print(f"USER-VISIBLE ERROR of {context['ti'].dag_id}: {context['exception']}\n--- end ---")


def _run(stack: Any, dag_id: str, tasks: Any, conn_file: str | None = None) -> Any:
    """Run a DAG built by ``tasks()`` inside the DAG context; returns the DagRun state."""
    from airflow.sdk import DAG

    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        tasks()
    return harness.run_dag_test(dag, conn_file or stack.connections_file).state


@pytest.fixture(autouse=True)
def flink_conn_env(stack: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """flink_default also as an env var — the very connection of the stack's connections file, not a second
    one: Airflow caches the secrets backends of the first dag.test() in a process, so a connections file
    passed later may not be consulted by inline triggers."""
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DEFAULT", stack_flink_default(stack))


@pytest.fixture(scope="module")
def flink(stack: Any) -> FlinkRestHook:
    return FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url, retries=2))


def _start_counter(stack: Any, flink: FlinkRestHook, name: str, **kwargs: Any) -> tuple[str, Any]:
    topic_in, topic_out = f"{name}-in", f"{name}-out"
    harness.create_topics(stack.kafka_bootstrap, topic_in, topic_out)
    program = harness.counter_program(
        stack.kafka_bootstrap, topic_in, topic_out, stack.connector_jars, job_name=name, **kwargs
    )
    job_id = RestPythonSubmitter(flink, flink_home=stack.flink_home).submit(program).job_id
    flink.wait_for_job_state(job_id, ("RUNNING",), timeout=120, all_tasks_running=True)
    return job_id, program


def _cleanup(stack: Any, flink: FlinkRestHook, name: str, *job_ids: str) -> None:
    for job_id in job_ids:
        try:
            if flink.get_job(job_id).state not in ("FINISHED", "CANCELED", "FAILED"):
                flink.cancel_job(job_id)
        except Exception:
            pass
    harness.delete_topics(stack.kafka_bootstrap, f"{name}-in", f"{name}-out")


def test_unknown_job_id_names_the_job(stack: Any, airflow_db: Any) -> None:
    dag_id = harness.unique("cp-unknown")
    missing = "0123456789abcdef0123456789abcdef"
    state = _run(
        stack,
        dag_id,
        lambda: QuiesceAndSavepointOperator(
            task_id="quiesce", job_id=missing, mode="drain", on_failure_callback=_record_failure
        ),
    )
    assert state == "failed"
    assert f"Flink job {missing} not found at {stack.flink_rest_url}" in ERRORS[dag_id]


def test_rest_unreachable_fails_after_retries_and_names_the_url(
    stack: Any, airflow_db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    conns = json.loads(Path(stack.connections_file).read_text())
    conns["flink_down"] = {
        "conn_type": "flink_rest",
        "host": f"http://127.0.0.1:{port}",
        "extra": json.dumps({"retries": 2, "backoff_factor": 0.05}),
    }
    conn_file = tmp_path / "connections.json"
    conn_file.write_text(json.dumps(conns))
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DOWN", json.dumps(conns["flink_down"]))
    dag_id = harness.unique("cp-unreachable")
    state = _run(
        stack,
        dag_id,
        lambda: QuiesceAndSavepointOperator(
            task_id="quiesce",
            job_id="0123456789abcdef0123456789abcdef",
            flink_conn_id="flink_down",
            on_failure_callback=_record_failure,
        ),
        conn_file=str(conn_file),
    )
    assert state == "failed"
    assert f"Flink REST at http://127.0.0.1:{port} is unreachable" in ERRORS[dag_id]
    assert "failed after 2 retries" in ERRORS[dag_id]


@pytest.fixture(scope="module")
def slow_job(stack: Any, flink: FlinkRestHook) -> Iterator[str]:
    """A counter whose operator sleeps 300 ms per record behind a backlog: its barriers are slow."""
    name = harness.unique("cp-slow")
    job_id, _ = _start_counter(stack, flink, name, hold=False, extra_args=["--slow-ms", "300"])
    harness.produce(stack.kafka_bootstrap, f"{name}-in", range(60))
    yield job_id
    _cleanup(stack, flink, name, job_id)


def test_savepoint_to_unwritable_directory_fails_with_flinks_cause(
    stack: Any, airflow_db: Any, slow_job: str, flink: FlinkRestHook
) -> None:
    dag_id = harness.unique("cp-unwritable")
    state = _run(
        stack,
        dag_id,
        lambda: QuiesceAndSavepointOperator(
            task_id="quiesce",
            job_id=slow_job,
            mode="savepoint",
            target_directory="file:///proc/flink-replay-savepoints",
            timeout=60,
            deferrable=True,
            on_failure_callback=_record_failure,
        ),
    )
    assert state == "failed"
    error = ERRORS[dag_id]
    assert f"Flink savepoint of job {slow_job} failed" in error
    assert "no checkpoint is used instead" in error
    assert "/proc/flink-replay-savepoints" in error  # Flink's own cause names the directory
    assert flink.get_job(slow_job).state == "RUNNING"


@pytest.fixture
def held_job(stack: Any, flink: FlinkRestHook, tmp_path: Path) -> Iterator[str]:
    """A counter whose operator holds one record until the test ends (a gate file): no barrier can pass it,
    so a savepoint cannot complete however fast or slow the machine is."""
    name = harness.unique("cp-held")
    gate = tmp_path / "closed"
    gate.touch()
    job_id, _ = _start_counter(stack, flink, name, hold=False, extra_args=["--gate", str(gate)])
    harness.produce(stack.kafka_bootstrap, f"{name}-in", range(1))
    held, deadline = Path(f"{gate}.held"), time.monotonic() + 120
    while not held.exists():
        assert time.monotonic() < deadline, "the gated record never reached the operator"
        time.sleep(0.2)
    try:
        yield job_id
    finally:
        gate.unlink(missing_ok=True)
        _cleanup(stack, flink, name, job_id)


def test_savepoint_exceeding_the_timeout_fails(stack: Any, airflow_db: Any, held_job: str) -> None:
    dag_id = harness.unique("cp-timeout")
    state = _run(
        stack,
        dag_id,
        lambda: QuiesceAndSavepointOperator(
            task_id="quiesce",
            job_id=held_job,
            mode="savepoint",
            timeout=1.0,
            deferrable=True,
            on_failure_callback=_record_failure,
        ),
    )
    assert state == "failed"
    error = ERRORS[dag_id]
    assert f"Flink savepoint of job {held_job} did not complete within 1 s" in error
    assert "no checkpoint is used instead" in error


class CrashOnceAfterFinish(QuiesceAndSavepointOperator):
    """Simulates a worker lost right after the stop/savepoint completed (first try only)."""

    def _finish(self, context: Any, operation: Any) -> dict[str, Any]:
        result = super()._finish(context, operation)
        FINISHED.setdefault(self.dag_id, []).append(result["savepoint_path"])
        if context["ti"].try_number == 1:
            raise RuntimeError("worker lost after the savepoint completed (simulated)")
        return result


class ForgetfulFlink(FlinkRestHook):
    """A Flink that no longer remembers this task's savepoint/stop operations (its async-operation cache expired,
    ``rest.async.store-duration``): the first trigger id is the one a new attempt would use."""

    def find_operation(self, job_id: str, trigger_ids: Any) -> Any:
        return next(iter(trigger_ids)), None


class CrashOnceFlinkForgets(CrashOnceAfterFinish):
    """As above, and on the retry Flink no longer remembers the trigger id: the retry must find this run's
    savepoint in the checkpoint statistics instead."""

    @cached_property
    def hook(self) -> FlinkRestHook:
        return ForgetfulFlink(self.flink_conn_id)


@pytest.fixture(scope="module")
def retried(stack: Any, flink: FlinkRestHook, airflow_db: Any) -> Iterator[dict[str, Any]]:
    """One counter job; a savepoint-mode quiesce and then a stop-mode quiesce, each retried once."""
    name = harness.unique("cp-retry")
    job_id, program = _start_counter(stack, flink, name, hold=True)
    harness.produce(stack.kafka_bootstrap, f"{name}-in", range(9))
    harness.wait_outputs(stack.kafka_bootstrap, f"{name}-out", lambda o: len(harness.counts(o)) == 9)
    out: dict[str, Any] = {"job_id": job_id, "program": program, "name": name}
    env = pytest.MonkeyPatch()
    env.setenv("AIRFLOW_CONN_FLINK_DEFAULT", stack_flink_default(stack))
    try:
        for mode, cls in (("savepoint", CrashOnceFlinkForgets), ("stop", CrashOnceAfterFinish)):
            dag_id = f"{name}-{mode}"

            def tasks(mode: str = mode, cls: Any = cls, dag_id: str = dag_id) -> None:
                from airflow.sdk import task

                quiesce = cls(
                    task_id="quiesce",
                    job_id=job_id,
                    mode=mode,
                    timeout=60,
                    deferrable=True,
                    retries=1,
                    # Flink caches checkpoint statistics for web.refresh-interval (3 s): a retry that must
                    # find the savepoint there comes after that, as real retries (minutes) do.
                    retry_delay=timedelta(seconds=4 if cls is CrashOnceFlinkForgets else 0),
                )

                @task
                def record(q: dict[str, Any]) -> None:
                    RESULTS[dag_id] = q

                record(quiesce.output)

            out[mode] = {"state": _run(stack, dag_id, tasks), "dag_id": dag_id}
        time.sleep(4)  # checkpoint statistics are cached for web.refresh-interval
        out["stats"] = flink.get_checkpoints(job_id)
        yield out
    finally:
        env.undo()
        _cleanup(stack, flink, name, job_id)


@pytest.mark.parametrize("mode", ["savepoint", "stop"])
def test_retry_after_the_stop_does_not_stop_or_savepoint_twice(retried: dict[str, Any], mode: str) -> None:
    run = retried[mode]
    assert run["state"] == "success"
    result = RESULTS[run["dag_id"]]
    first_try, second_try = FINISHED[run["dag_id"]]
    assert first_try == second_try == result["savepoint_path"], "the retry reused the first try's savepoint"
    assert result["reused"] is True
    savepoints = [s.external_path for s in retried["stats"].savepoints()]
    assert savepoints.count(result["savepoint_path"]) == 1
    assert len(savepoints) == 2, f"one savepoint per quiesce run, no second one: {savepoints}"
    run_dir = Path(result["savepoint_path"].removeprefix("file:")).parent
    assert len(list(run_dir.glob("savepoint-*"))) == 1


def test_resume_with_unmappable_state_shows_cannot_map(
    stack: Any, flink: FlinkRestHook, retried: dict[str, Any], airflow_db: Any
) -> None:
    savepoint = RESULTS[retried["stop"]["dag_id"]]["savepoint_path"]
    renamed = retried["program"].model_copy(
        update={"program_args": [*retried["program"].program_args, "--counter-uid", "keyed-counter-renamed"]}
    )
    dag_id = harness.unique("cp-cannot-map")
    state = _run(
        stack,
        dag_id,
        lambda: ResumeJobOperator(
            task_id="resume",
            program=renamed.model_dump(),
            resubmission=Resubmission(savepoint_path=savepoint),
            timeout=120,
            deferrable=True,
            on_failure_callback=_record_failure,
        ),
    )
    leftover = [j.jid for j in flink.list_jobs().by_name(retried["name"]) if j.state == "RUNNING"]
    for job_id in leftover:
        flink.cancel_job(job_id)
    assert state == "failed"
    headline = ERRORS[dag_id].splitlines()[0]
    assert "Cannot map checkpoint/savepoint state for operator" in headline, headline
    assert "Python process exits with code" not in ERRORS[dag_id]
    assert not leftover


class FailsAfterStop(QuiesceAndSavepointOperator):
    """A quiesce that loses its worker after Flink stopped the job, on every try (no result reaches XCom)."""

    def _finish(self, context: Any, operation: Any) -> dict[str, Any]:
        super()._finish(context, operation)
        raise RuntimeError("worker lost after the stop (simulated)")


def test_resume_brings_production_back_when_quiesce_failed_after_the_stop(
    stack: Any, flink: FlinkRestHook, airflow_db: Any
) -> None:
    name = harness.unique("cp-lost")
    job_id, program = _start_counter(stack, flink, name, hold=False)
    new_jobs: list[str] = []
    try:
        harness.produce(stack.kafka_bootstrap, f"{name}-in", range(6))
        harness.wait_outputs(stack.kafka_bootstrap, f"{name}-out", lambda o: len(harness.counts(o)) == 6)
        dag_id = f"{name}-dag"

        def tasks() -> None:
            from airflow.sdk import task

            quiesce = FailsAfterStop(task_id="quiesce", job_id=job_id, mode="stop", deferrable=True)
            resume = ResumeJobOperator(
                task_id="resume",
                program=program.model_dump(),
                quiesce=QuiesceRef(result=quiesce.output, production_job_id=job_id),
                deferrable=True,
            )

            @task(trigger_rule="all_done")
            def record(r: Any) -> None:
                RESULTS[dag_id] = r

            quiesce >> resume
            record(resume.output)

        _run(stack, dag_id, tasks)
        resumed = RESULTS[dag_id]
        new_jobs.append(resumed["job_id"])
        assert flink.get_job(job_id).state == "FINISHED"
        assert f"/{dag_id}/" in resumed["savepoint_path"], "resumed from the savepoint of this run"
        assert flink.get_job(resumed["job_id"]).state == "RUNNING"
        harness.produce(stack.kafka_bootstrap, f"{name}-in", range(6, 9))
        out = harness.wait_outputs(stack.kafka_bootstrap, f"{name}-out", lambda o: len(harness.counts(o)) == 9)
        assert harness.counts(out) == {s: s // 3 + 1 for s in range(9)}
    finally:
        _cleanup(stack, flink, name, job_id, *new_jobs)

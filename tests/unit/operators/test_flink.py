"""QuiesceAndSavepointOperator and ResumeJobOperator with a stubbed Flink hook: each defers to its trigger on
the first-try path and on the reattach path, hands what it knew to ``execute_complete`` through ``carry``,
and asks the trigger to cancel the job on kill only for a job the task itself submitted. Under dag.test()
against the scripted Flink of ``tests/fake_flink.py``: the requests they send and the pages they link;
deterministic trigger ids; resume picks only a savepoint of its own run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_flink_replay.core.flink_models import (
    AsyncOperationStatus,
    CheckpointStats,
    FlinkPythonProgram,
    ProductionPlan,
    QuiesceResult,
)
from airflow_flink_replay.lifecycle import resume as resume_procedure
from airflow_flink_replay.operators.flink import (
    QuiesceAndSavepointOperator,
    QuiesceCarry,
    QuiesceRef,
    ResumeCarry,
    ResumeJobOperator,
    operation_trigger_id,
    savepoint_of_run,
)
from airflow_flink_replay.triggers.flink import FlinkAsyncOperationTrigger, FlinkJobStateTrigger
from tests.fake_flink import JOB, FakeFlink
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)
from tests.unit.operators.stubs import StubFlinkHook, StubSubmitter, context, job

PROD = "a" * 32


def _quiesce(hook: StubFlinkHook) -> QuiesceAndSavepointOperator:
    op = QuiesceAndSavepointOperator(
        task_id="quiesce", job_id=PROD, mode="drain", target_directory="file:///sp", deferrable=True,
        wait_for_finished=False,
    )
    op.__dict__["hook"] = hook  # the cached_property's slot
    return op


def test_quiesce_defers_to_the_savepoint_trigger_after_one_stop() -> None:
    hook = StubFlinkHook([job(PROD, "prod")])
    ctx = context("quiesce")
    with pytest.raises(TaskDeferred) as deferred:
        _quiesce(hook).execute(ctx)
    trigger = deferred.value.trigger
    first_id = operation_trigger_id("dag", ctx["ti"].run_id, "quiesce", -1, PROD, "drain", 0)
    assert isinstance(trigger, FlinkAsyncOperationTrigger)
    assert (trigger.job_id, trigger.request_id, deferred.value.method_name) == (PROD, first_id, "execute_complete")
    assert set(trigger.carry) == set(QuiesceCarry.__annotations__) and trigger.carry["reused"] is False
    assert [c for c in hook.calls if c[0] == "stop_with_savepoint"] == [("stop_with_savepoint", first_id)]
    assert ctx["ti"].pushed  # the Flink link is persisted before waiting


def test_quiesce_retry_reattaches_to_the_running_stop_and_completes_from_carry() -> None:
    hook = StubFlinkHook([job(PROD, "prod")])
    ctx = context("quiesce", try_number=2)
    first_id = operation_trigger_id("dag", ctx["ti"].run_id, "quiesce", -1, PROD, "drain", 0)
    hook.savepoints[first_id] = AsyncOperationStatus.model_validate({"status": {"id": "IN_PROGRESS"}})
    with pytest.raises(TaskDeferred) as deferred:
        _quiesce(hook).execute(ctx)
    trigger = deferred.value.trigger
    assert trigger.request_id == first_id and trigger.carry["reused"] is True
    assert not [c for c in hook.calls if c[0] in ("stop_with_savepoint", "trigger_savepoint")]  # never twice

    # the triggerer's event brings the carry back: the result is built from it alone
    hook.jobs[PROD] = job(PROD, "prod", "FINISHED")
    event = {"status": "success", "location": "file:///sp/savepoint-1", "completed_at": datetime.now(UTC).isoformat(),
             "carry": trigger.carry}
    result = _quiesce(hook).execute_complete(ctx, event)
    assert QuiesceResult.model_validate(result).model_dump(include={"savepoint_path", "trigger_id", "reused"}) == {
        "savepoint_path": "file:///sp/savepoint-1", "trigger_id": first_id, "reused": True}


def _quiesced(job_name: str = "prod") -> dict[str, Any]:
    now = datetime.now(UTC)
    return QuiesceResult(
        job_id=PROD, job_name=job_name, mode="drain", savepoint_path="file:///sp/savepoint-1", format_type="CANONICAL",
        trigger_id="t", requested_at=now, savepoint_completed_at=now, production_stopped=True,
        in_flight_work_possible=False,
        plan=ProductionPlan.from_job(job(PROD, job_name)),
    ).model_dump(mode="json")


def _resume(hook: StubFlinkHook, **kwargs: Any) -> ResumeJobOperator:
    op = ResumeJobOperator(task_id="resume_production", program={"entry_point": "/prod.py", "job_name": "prod"},
                           quiesce=QuiesceRef(result=_quiesced()), deferrable=True, **kwargs)
    op.__dict__["hook"] = hook
    return op


@pytest.mark.parametrize("cancel_on_kill", [False, True])
def test_resume_submits_then_defers_and_cancels_on_kill_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, cancel_on_kill: bool
) -> None:
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED")])  # production, stopped by the quiesce
    submitter = StubSubmitter("b" * 32)
    monkeypatch.setattr(resume_procedure, "get_submitter", lambda kind, h: submitter)
    with pytest.raises(TaskDeferred) as deferred:
        _resume(hook, cancel_on_kill=cancel_on_kill).execute(context("resume_production"))
    trigger = deferred.value.trigger
    assert isinstance(trigger, FlinkJobStateTrigger)
    assert (trigger.job_id, trigger.target_states) == ("b" * 32, ["RUNNING"])
    assert trigger.cancel_on_kill is cancel_on_kill
    assert set(trigger.carry) == set(ResumeCarry.__annotations__) and trigger.carry["reattached"] is False
    assert [s["savepoint_path"] for s in submitter.submitted] == ["file:///sp/savepoint-1"]


def test_resume_reattaches_to_running_production_and_never_cancels_it(monkeypatch: pytest.MonkeyPatch) -> None:
    live = "c" * 32
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED"), job(live, "prod", "RUNNING")])
    monkeypatch.setattr(resume_procedure, "get_submitter", lambda kind, h: pytest.fail("reattach must not submit"))
    with pytest.raises(TaskDeferred) as deferred:
        _resume(hook, cancel_on_kill=True).execute(context("resume_production"))
    trigger = deferred.value.trigger
    assert trigger.job_id == live and trigger.carry["reattached"] is True
    assert trigger.cancel_on_kill is False  # production that this task did not start stays up


# ------------------------------------------------- trigger ids, savepoints of a run, under dag.test


def test_trigger_ids_are_deterministic_per_task_instance_and_attempt() -> None:
    a = operation_trigger_id("dag", "run", "task", -1, "job", "drain", 0)
    assert a == operation_trigger_id("dag", "run", "task", -1, "job", "drain", 0)
    assert len(a) == 32 and int(a, 16) >= 0
    assert a != operation_trigger_id("dag", "run2", "task", -1, "job", "drain", 0)
    assert a != operation_trigger_id("dag", "run", "task", -1, "job", "drain", 1)


def test_quiesce_and_resume_under_dag_test_send_their_requests_and_link_the_right_pages(
    fake: tuple[FakeFlink, str], airflow_db: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quiesce (drain, NATIVE, deferred) → resume against the fake endpoint under dag.test(): the stop and run
    bodies, the result's format and timestamps, and each task's Flink link through ``FlinkJobLink.get_link``
    (the drained job is FINISHED: the dashboard shows it under #/job/completed/, the resumed one under running)."""
    from datetime import UTC, datetime

    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.models.xcom import XComModel
    from airflow.sdk import DAG, task
    from airflow.utils.session import create_session

    from airflow_flink_replay.links.flink import FlinkJobLink
    from airflow_flink_replay.operators.flink import (
        QuiesceAndSavepointOperator,
        ResumeJobOperator,
        run_path_segment,
    )
    from tests.jobs.harness import run_dag_test, unique

    state, url = fake
    end_ms = 1_795_000_000_123
    state.on("GET", "/jobs/j1", (200, JOB), (200, {**JOB, "state": "FINISHED", "end-time": end_ms}))
    state.on("POST", "/jobs/j1/stop", (202, {"request-id": "echoed"}))
    done = {"status": {"id": "COMPLETED"}, "operation": {"location": "file:/sp/run/savepoint-j1"}}
    state.on("GET", "/jobs/j1/savepoints/*", (200, {"status": {"id": "IN_PROGRESS"}}), (200, done))
    state.on("GET", "/jobs/overview", (200, {"jobs": []}))
    state.on("GET", "/jars", (200, {"files": [{"id": "py_flink-python.jar", "name": "flink-python-2.2.1.jar"}]}))
    state.on("POST", "/jars/py_flink-python.jar/run", (200, {"jobid": "j2"}))
    state.on("GET", "/jobs/j2", (200, {**JOB, "jid": "j2"}))
    conn = {"conn_type": "flink_rest", "host": url, "extra": {"retries": 1}}
    conn_file = tmp_path / "conns.json"
    conn_file.write_text(json.dumps({"flink_links": conn}))
    # a conn id of its own: Airflow caches the secrets backends (conn file) of the first dag.test() in a process
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_LINKS", json.dumps(conn))
    seen: dict[str, Any] = {}
    dag_id = unique("cp-links")
    program = FlinkPythonProgram(module="jobs.prod", job_name="prod")
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        quiesce = QuiesceAndSavepointOperator(
            task_id="quiesce", job_id="j1", mode="drain", target_directory="file:///sp", format_type="native",
            flink_conn_id="flink_links", poll_interval=0.05, deferrable=True,
        )  # fmt: skip
        resume = ResumeJobOperator(
            task_id="resume", program=program, quiesce=QuiesceRef(result=quiesce.output), flink_conn_id="flink_links",
            poll_interval=0.05, deferrable=True,
        )  # fmt: skip

        @task
        def links(q: dict[str, Any], r: dict[str, Any], **context: Any) -> None:
            ti = context["ti"]
            seen["quiesce"], seen["resume"] = q, r
            for task_id in ("quiesce", "resume"):
                key = TaskInstanceKey(ti.dag_id, task_id, ti.run_id, 1, -1)
                seen[f"{task_id}_link"] = FlinkJobLink().get_link(ti.task.dag.get_task(task_id), ti_key=key)

        quiesce >> resume
        links(quiesce.output, resume.output)
    started = datetime.now(UTC)
    dr = run_dag_test(dag, str(conn_file))
    assert {ti.task_id: ti.state for ti in dr.get_task_instances()} == dict.fromkeys(
        ("quiesce", "resume", "links"), "success"
    )

    (stop,) = state.bodies[("POST", "/jobs/j1/stop")]
    trigger_id = operation_trigger_id(dag_id, dr.run_id, "quiesce", -1, "j1", "drain", 0)
    assert stop == {
        "drain": True,
        "formatType": "NATIVE",
        "targetDirectory": "file:///sp" + run_path_segment(dag_id, dr.run_id).rstrip("/"),
        "triggerId": trigger_id,
    }
    assert f"/jobs/j1/savepoints/{trigger_id}" in state.paths("GET")  # the trigger polled that very id
    q = seen["quiesce"]
    assert (q["format_type"], q["mode"], q["savepoint_path"]) == ("NATIVE", "drain", "file:/sp/run/savepoint-j1")
    requested, completed = (
        datetime.fromisoformat(q["requested_at"]),
        datetime.fromisoformat(q["savepoint_completed_at"]),
    )
    assert started <= requested <= completed <= datetime.now(UTC)
    assert datetime.fromisoformat(q["job_stopped_at"]) == datetime.fromtimestamp(end_ms / 1000, UTC)
    (run,) = state.bodies[("POST", "/jars/py_flink-python.jar/run")]
    assert run == {
        "entryClass": "org.apache.flink.client.python.PythonDriver",
        "programArgsList": ["-pym", "jobs.prod"],
        "savepointPath": "file:/sp/run/savepoint-j1",
        "allowNonRestoredState": False,
        "flinkConfiguration": {"pipeline.name": "prod"},
    }
    assert seen["resume"]["job_id"] == "j2" and seen["resume"]["stopped_at"] == q["requested_at"]

    assert seen["quiesce_link"] == f"{url}/#/job/completed/j1/overview"
    assert seen["resume_link"] == f"{url}/#/job/running/j2/overview"
    with create_session() as session:  # what the UI's extra-links endpoint reads
        stored = {
            x.task_id: XComModel.deserialize_value(x)
            for x in session.query(XComModel).filter_by(dag_id=dag_id, key=FlinkJobLink().xcom_key)
        }
    assert stored == {"quiesce": seen["quiesce_link"], "resume": seen["resume_link"]}


def test_resume_only_picks_a_savepoint_of_this_run() -> None:
    run = "manual__2026-11-29T09:00:00+00:00"
    run_dir = "manual__2026-11-29T09_00_00_00_00"  # the quiesce's sanitized run directory
    stats = CheckpointStats.model_validate(
        {
            "latest": {
                "savepoint": {
                    "id": 9,
                    "status": "COMPLETED",
                    "is_savepoint": True,
                    "external_path": f"file:/sp/other_dag/{run_dir}/savepoint-9",
                }
            },
            "history": [
                {
                    "id": 7,
                    "status": "COMPLETED",
                    "is_savepoint": True,
                    "external_path": f"file:/sp/replay/{run_dir}/sp-7",
                },
                {"id": 8, "status": "COMPLETED", "is_savepoint": False, "external_path": "file:/chk/chk-8"},
            ],
        }
    )
    assert savepoint_of_run(stats, "replay", run) == f"file:/sp/replay/{run_dir}/sp-7"
    assert savepoint_of_run(stats, "replay", "manual__2026-11-30T09:00:00+00:00") is None


# ------------------------------------------------- production always comes back (this run's stop)


class StopInFlight(StubFlinkHook):
    """Production RUNS while this run's stop is in progress; the stop completes after ``polls`` status reads,
    and only then does the job finish."""

    def __init__(self, trigger_id: str, polls: int, *, fails: bool = False) -> None:
        super().__init__([job(PROD, "prod", "RUNNING")])
        self.trigger_id, self.polls, self.fails = trigger_id, polls, fails
        self.savepoints[trigger_id] = AsyncOperationStatus.model_validate({"status": {"id": "IN_PROGRESS"}})

    def get_savepoint_status(self, job_id: str, trigger_id: str) -> AsyncOperationStatus:
        if trigger_id == self.trigger_id and self.polls == 0:
            if self.fails:
                done = {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": {"stack-trace": "timeout"}}}
            else:
                done = {"status": {"id": "COMPLETED"}, "operation": {"location": "file:///sp/dag/run/savepoint-9"}}
                self.jobs[PROD] = job(PROD, "prod", "FINISHED")
            self.savepoints[trigger_id] = AsyncOperationStatus.model_validate(done)
        self.polls -= 1
        return super().get_savepoint_status(job_id, trigger_id)


def _resume_without_quiesce_result(hook: StubFlinkHook) -> ResumeJobOperator:
    op = ResumeJobOperator(
        task_id="resume_production", program={"entry_point": "/prod.py", "job_name": "prod"},
        quiesce=QuiesceRef(production_job_id=PROD, mode="stop"), poll_interval=0.01, deferrable=True,
    )  # fmt: skip
    op.__dict__["hook"] = hook
    return op


def _stop_id(ctx: dict[str, Any], attempt: int = 0) -> str:
    return operation_trigger_id("dag", ctx["ti"].run_id, "quiesce", -1, PROD, "stop", attempt)


def test_resume_waits_for_this_runs_stop_in_flight_then_resubmits_from_its_savepoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The quiesce task died while Flink was stopping production: the job still RUNS, but it is not
    "running" — resume waits for the stop, then resubmits from the savepoint it produced (never reattaches)."""
    ctx = context("resume_production")
    hook = StopInFlight(_stop_id(ctx), polls=3)
    submitter = StubSubmitter("b" * 32)
    monkeypatch.setattr(resume_procedure, "get_submitter", lambda kind, h: submitter)
    with pytest.raises(TaskDeferred) as deferred:
        _resume_without_quiesce_result(hook).execute(ctx)
    assert deferred.value.trigger.job_id == "b" * 32 and deferred.value.trigger.carry["reattached"] is False
    assert [s["savepoint_path"] for s in submitter.submitted] == ["file:///sp/dag/run/savepoint-9"]
    assert hook.polls < 0  # it polled until the stop completed


def test_resume_reattaches_when_this_runs_stop_failed_and_production_kept_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = context("resume_production")
    hook = StopInFlight(_stop_id(ctx), polls=1, fails=True)
    monkeypatch.setattr(
        resume_procedure, "get_submitter", lambda kind, h: pytest.fail("a kept-running job is reattached")
    )
    with pytest.raises(TaskDeferred) as deferred:
        _resume_without_quiesce_result(hook).execute(ctx)
    trigger = deferred.value.trigger
    assert (trigger.job_id, trigger.carry["reattached"], trigger.cancel_on_kill) == (PROD, True, False)


def test_resume_submission_is_never_refused_by_the_metaspace_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter

    headroom: list[float | None] = []

    class Recording(RestPythonSubmitter):
        def submit(self, program: Any, **kwargs: Any) -> Any:
            headroom.append(self.min_metaspace_headroom_mb)
            return StubSubmitter("b" * 32).submit(program, **kwargs)

    hook = StubFlinkHook([job(PROD, "prod", "FINISHED")])
    monkeypatch.setattr(resume_procedure, "get_submitter", lambda kind, h: Recording(h, min_metaspace_headroom_mb=96))
    with pytest.raises(TaskDeferred):
        _resume(hook).execute(context("resume_production"))
    assert headroom == [0]  # bringing production back wins; the quiesce checked the headroom before stopping


def test_quiesce_refuses_to_stop_production_without_room_for_its_resubmission() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    hook = StubFlinkHook([job(PROD, "prod")])
    hook.metaspace_free_mb = 40.0
    with pytest.raises(AirflowFailException) as refused:
        _quiesce(hook).execute(context("quiesce"))
    message = str(refused.value)
    assert message.startswith("Production was NOT stopped: its JobManager at http://flink.test has 40 MB")
    assert "less than the 96 MB (min_metaspace_headroom_mb" in message and "Fix: " in message
    assert not [c for c in hook.calls if c[0] in ("stop_with_savepoint", "trigger_savepoint")]
    hook.metaspace_free_mb = 200.0
    with pytest.raises(TaskDeferred):
        _quiesce(hook).execute(context("quiesce"))
    assert [c[0] for c in hook.calls].count("stop_with_savepoint") == 1


def test_resume_is_skipped_when_the_run_never_stopped_production() -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    op = ResumeJobOperator(task_id="r", program={"entry_point": "/x.py"}, quiesce=QuiesceRef(mode="existing"),
                           flink_conn_id="no_such_conn")
    with pytest.raises(AirflowSkipException):
        op.execute({})  # skips before any connection is looked up
    # a run that failed before preflight named production's job: nothing was stopped, nothing to resume
    never = ResumeJobOperator(task_id="r2", program={"entry_point": "/x.py"}, quiesce=QuiesceRef(production_job_id=""),
                              flink_conn_id="no_such_conn")
    with pytest.raises(AirflowSkipException, match="never stopped"):
        never.execute({})

"""QuiesceAndSavepointOperator and ResumeJobOperator with a stubbed Flink hook: each defers to its trigger on
the first-try path and on the reattach path, hands what it knew to ``execute_complete`` through ``carry``,
and asks the trigger to cancel the job on kill only for a job the task itself submitted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_flink_replay.core.flink_models import AsyncOperationStatus, ProductionPlan, QuiesceResult
from airflow_flink_replay.operators import flink as flink_ops
from airflow_flink_replay.operators.flink import (
    QuiesceAndSavepointOperator,
    QuiesceCarry,
    ResumeCarry,
    ResumeJobOperator,
    operation_trigger_id,
)
from airflow_flink_replay.triggers.flink import FlinkAsyncOperationTrigger, FlinkJobStateTrigger
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
                           quiesce_result=_quiesced(), deferrable=True, **kwargs)
    op.__dict__["hook"] = hook
    return op


@pytest.mark.parametrize("cancel_on_kill", [False, True])
def test_resume_submits_then_defers_and_cancels_on_kill_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, cancel_on_kill: bool
) -> None:
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED")])  # production, stopped by the quiesce
    submitter = StubSubmitter("b" * 32)
    monkeypatch.setattr(flink_ops, "get_submitter", lambda kind, h: submitter)
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
    monkeypatch.setattr(flink_ops, "get_submitter", lambda kind, h: pytest.fail("reattach must not submit"))
    with pytest.raises(TaskDeferred) as deferred:
        _resume(hook, cancel_on_kill=True).execute(context("resume_production"))
    trigger = deferred.value.trigger
    assert trigger.job_id == live and trigger.carry["reattached"] is True
    assert trigger.cancel_on_kill is False  # production that this task did not start stays up

"""AssertProductionOperator with a stubbed Flink hook: it passes only when production RUNS from this run's
savepoint (or this run never stopped it), and otherwise fails loudly naming the savepoint and the command
that restores production from it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay.core.flink_models import AsyncOperationStatus, ProductionPlan, QuiesceResult
from airflow_flink_replay.operators.flink import QuiesceRef, operation_trigger_id
from airflow_flink_replay.operators.production_check import AssertProductionOperator
from tests.unit.operators.stubs import StubFlinkHook, context, job

PROD, NEW, OTHER = "a" * 32, "b" * 32, "c" * 32
SAVEPOINT = "file:///sp/dag/manual__2026-12-01/savepoint-1"
PROGRAM = {"entry_point": "/jobs/prod.py", "job_name": "prod", "program_args": ["--in", "reviews"]}


def _quiesced(stopped: bool = True) -> dict[str, Any]:
    now = datetime.now(UTC)
    return QuiesceResult(
        job_id=PROD, job_name="prod", mode="stop" if stopped else "savepoint", savepoint_path=SAVEPOINT,
        format_type="CANONICAL", trigger_id="t", requested_at=now, savepoint_completed_at=now,
        production_stopped=stopped, in_flight_work_possible=not stopped,
        plan=ProductionPlan.from_job(job(PROD, "prod")),
    ).model_dump(mode="json")  # fmt: skip


def _check(hook: StubFlinkHook, *, quiesce_result: Any = None, quiesce_mode: str = "stop") -> AssertProductionOperator:
    quiesce = QuiesceRef(result=quiesce_result, mode=quiesce_mode, production_job_id=PROD)
    op = AssertProductionOperator(task_id="assert_production", job_name="prod", quiesce=quiesce, program=PROGRAM,
                                  timeout=5)  # fmt: skip
    op.__dict__["hook"] = hook
    return op


def test_passes_when_production_runs_from_this_runs_savepoint() -> None:
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED"), job(NEW, "prod")])
    hook.restored[NEW] = SAVEPOINT.replace("file:///", "file:/")  # Flink's spelling of the same location
    result = _check(hook, quiesce_result=_quiesced()).execute(context("assert_production"))
    assert result == {"production": "resumed", "job_id": NEW, "savepoint": SAVEPOINT,
                      "restored_from": "file:/sp/dag/manual__2026-12-01/savepoint-1"}  # fmt: skip


@pytest.mark.parametrize(
    ("jobs", "restored", "finding"),
    [
        ([job(PROD, "prod", "FINISHED")], None, "live jobs: none"),
        ([job(PROD, "prod", "FINISHED"), job(NEW, "prod")], "file:/sp/older/sp-0", "restored from file:/sp/older"),
        ([job(PROD, "prod", "FINISHED"), job(NEW, "prod"), job(OTHER, "prod")], SAVEPOINT, "live jobs: ["),
    ],
    ids=["nothing-runs", "wrong-savepoint", "two-copies"],
)
def test_fails_loudly_naming_the_savepoint_and_the_restore_command(
    jobs: list[Any], restored: str | None, finding: str
) -> None:
    hook = StubFlinkHook(jobs)
    for jid in (NEW, OTHER):
        if restored:
            hook.restored[jid] = restored
    with pytest.raises(AirflowFailException) as failed:
        _check(hook, quiesce_result=_quiesced()).execute(context("assert_production"))
    message = str(failed.value)
    assert message.startswith("PRODUCTION IS NOT RUNNING AS IT SHOULD after this replay run: ")
    assert finding in message
    assert f"Restore production 'prod' from savepoint {SAVEPOINT}: " in message
    assert f"$FLINK_HOME/bin/flink run -d -m flink.test -s {SAVEPOINT} " in message
    assert "-py /jobs/prod.py --in reviews" in message


def test_never_touched_production_passes_when_the_same_job_still_runs_alone() -> None:
    hook = StubFlinkHook([job(PROD, "prod")])
    result = _check(hook, quiesce_result=_quiesced(stopped=False)).execute(context("assert_production"))
    assert result["production"] == "untouched"
    assert _check(hook, quiesce_mode="existing").execute(context("assert_production"))["production"] == "untouched"
    hook.jobs[NEW] = job(NEW, "prod")  # a second copy next to a production this run never stopped
    with pytest.raises(AirflowFailException, match="this run never stopped job"):
        _check(hook, quiesce_result=_quiesced(stopped=False)).execute(context("assert_production"))


def test_without_a_quiesce_result_this_runs_failed_stop_means_untouched() -> None:
    """The quiesce task died, its stop failed and production kept running: nothing to restore."""
    ctx = context("assert_production")
    hook = StubFlinkHook([job(PROD, "prod")])
    first = operation_trigger_id("dag", ctx["ti"].run_id, "quiesce", -1, PROD, "stop", 0)
    failed = {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": {"stack-trace": "expired"}}}
    hook.savepoints[first] = AsyncOperationStatus.model_validate(failed)
    assert _check(hook).execute(ctx)["production"] == "untouched"


def test_without_a_quiesce_result_a_stopped_job_not_resumed_fails() -> None:
    ctx = context("assert_production")
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED")])
    first = operation_trigger_id("dag", ctx["ti"].run_id, "quiesce", -1, PROD, "stop", 0)
    done = {"status": {"id": "COMPLETED"}, "operation": {"location": SAVEPOINT}}
    hook.savepoints[first] = AsyncOperationStatus.model_validate(done)
    with pytest.raises(AirflowFailException, match=f"from savepoint {SAVEPOINT}"):
        _check(hook).execute(ctx)

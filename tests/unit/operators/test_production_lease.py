"""Production's lease through the operators that touch production (issue 42 §10), on a real lease folder and the
stubbed Flink hook: the stop window holds it from before the stop until production RUNS again; a second run waits
for it or fails having touched nothing; ``resume_production`` resumes only what its own run stopped; and
``assert_production`` never prescribes a restore while another run holds the lease, nor blames this run for what
a later run did to production."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskDeferred

from airflow_flink_replay.core.flink_models import ProductionPlan, QuiesceResult
from airflow_flink_replay.core.production_lease import LeaseHolder, LeaseRecord, Production
from airflow_flink_replay.exceptions import FlinkRestError
from airflow_flink_replay.hooks.production_lease import ProductionLeaseHook
from airflow_flink_replay.lifecycle import resume as resume_procedure
from airflow_flink_replay.operators.flink import QuiesceAndSavepointOperator, QuiesceRef, ResumeJobOperator
from airflow_flink_replay.operators.production_check import AssertProductionOperator
from airflow_flink_replay.operators.production_lease import LeaseSettings
from tests.unit.operators.stubs import StubFlinkHook, context, job
from tests.unit.operators.test_stop_window import PROD, RESUMED, Window, _run, _stack

OTHER_RUN = LeaseHolder(dag_id="flink_agents_release_gate", run_id="ci__7", task_id="quiesce")
NEW = "d" * 32
SAVEPOINT = "file:///sp/dag/manual__2026-12-01/savepoint-1"
PROGRAM = {"entry_point": "/prod.py", "job_name": "prod"}


def _lease(folder: Path) -> ProductionLeaseHook:
    return ProductionLeaseHook(str(folder), Production.of("http://flink.test", "prod"))


def _this_run(task_id: str) -> LeaseHolder:
    ti = context(task_id)["ti"]
    return LeaseHolder(dag_id=ti.dag_id, run_id=ti.run_id, task_id=task_id)


def _other_run_cycled_production(folder: Path, *, savepoint: str = "file:///sp/gate/ci__7/savepoint-9") -> None:
    """Another run took the lease, stopped production and resumed it, and released the lease."""
    _lease(folder).acquire(OTHER_RUN, ttl_s=60, wait_s=0)
    _lease(folder).release(OTHER_RUN, by="quiesce", savepoint=savepoint)


def _quiesced(*, window: bool = False) -> dict[str, Any]:
    stamp = datetime.now(UTC)
    result = QuiesceResult(
        job_id=PROD, job_name="prod", mode="drain", savepoint_path=SAVEPOINT, format_type="CANONICAL", trigger_id="t",
        requested_at=stamp, savepoint_completed_at=stamp, production_stopped=True, in_flight_work_possible=False,
        plan=ProductionPlan.from_job(job(PROD, "prod")),
    ).model_dump(mode="json")  # fmt: skip
    if window:
        result["window"] = {
            "resumed": {
                "job_id": RESUMED,
                "job_name": "prod",
                "savepoint_path": SAVEPOINT,
                "submitted_at": stamp.isoformat(),
                "running_at": stamp.isoformat(),
                "stopped_at": stamp.isoformat(),
                "submitter": "rest",
                "reattached": False,
            }
        }
    return result


# ------------------------------------------------------------------------------------------------- quiesce
class LeasedWindow(Window):
    """The stop window, noting inside it (at the offsets) who holds production's lease."""

    seen: list[LeaseRecord | None]

    def _read_offsets(self, quiesce: QuiesceResult) -> dict[str, Any]:
        self.seen.append(_lease(Path(str(self.lease.folder))).current())  # type: ignore[union-attr]
        return super()._read_offsets(quiesce)


def test_the_stop_window_holds_the_lease_from_before_the_stop_until_production_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    steps: list[str] = []
    hook, submitter = _stack(monkeypatch, steps, runs_at_once=True)
    op = LeasedWindow(steps=steps, overlap_resume=False, job_name="prod", lease=LeaseSettings(str(tmp_path)))
    op.seen = []
    ctx = context("quiesce")
    result = QuiesceResult.model_validate(_run(op, hook, ctx))
    assert steps == ["savepoint", "offsets", "memory_cut", "resubmit"] and len(submitter.submitted) == 1
    inside = op.seen[0]
    assert inside is not None and inside.released_at is None and inside.holder.label == "dag/manual__2026-12-01"
    assert inside.job_id == PROD
    released = _lease(tmp_path).current()
    assert released is not None and released.released_by == "quiesce" and released.savepoint == result.savepoint_path
    pushed = ctx["ti"].pushed["lease"]  # the UI's XCom and the run record's lease
    assert pushed["holder"] == "dag/manual__2026-12-01" and pushed["released_at"] and pushed["waited_s"] == 0


def test_a_second_run_waits_for_the_lease_then_fails_naming_the_holder_having_touched_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    steps: list[str] = []
    hook, submitter = _stack(monkeypatch, steps, runs_at_once=True)
    held = _lease(tmp_path).acquire(OTHER_RUN, ttl_s=60, wait_s=0)
    ctx = context("quiesce")
    started = time.monotonic()
    with pytest.raises(AirflowFailException) as refused:
        _run(Window(steps=steps, job_name="prod", lease=LeaseSettings(str(tmp_path), wait=0.5)), hook, ctx)
    assert time.monotonic() - started >= 0.5
    message = str(refused.value)
    assert "is held by run flink_agents_release_gate/ci__7 (task quiesce" in message
    assert "touched nothing (no stop, no savepoint)" in message and "lease_wait_minutes" in message
    assert steps == [] and not submitter.submitted  # no stop, no savepoint, no resubmission
    assert not [c for c in hook.calls if c[0] in ("stop_with_savepoint", "trigger_savepoint")]
    assert _lease(tmp_path).current() == held
    assert ctx["ti"].pushed["lease"]["held_by"] == "flink_agents_release_gate/ci__7"


def test_a_run_that_waited_quiesces_the_job_the_other_run_resumed(tmp_path: Path) -> None:
    """The preflight found job PROD; the other run stopped it and resumed production as NEW while this run waited:
    this run's stop targets NEW, and the lease names it."""
    hook = StubFlinkHook([job(PROD, "prod")])
    _lease(tmp_path).acquire(OTHER_RUN, ttl_s=60, wait_s=0)

    def other_run_finishes() -> None:
        time.sleep(0.3)
        hook.jobs[PROD], hook.jobs[NEW] = job(PROD, "prod", "FINISHED"), job(NEW, "prod")
        _lease(tmp_path).release(OTHER_RUN, by="quiesce", savepoint="file:///sp/gate/ci__7/savepoint-9")

    op = QuiesceAndSavepointOperator(task_id="quiesce", job_id=PROD, mode="drain", target_directory="file:///sp",
                                     deferrable=True, lease=LeaseSettings(str(tmp_path), wait=10))  # fmt: skip
    op.__dict__["hook"] = hook
    other = threading.Thread(target=other_run_finishes)
    other.start()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context("quiesce"))
    other.join()
    assert deferred.value.trigger.job_id == NEW
    assert [c for c in hook.calls if c[0] == "stop_with_savepoint"] and op.job_id == NEW
    held = _lease(tmp_path).current()
    assert held is not None and held.released_at is None and held.job_id == NEW and held.waited_s >= 0.2


def test_a_quiesce_that_fails_before_the_stop_releases_the_lease(tmp_path: Path) -> None:
    hook = StubFlinkHook([job(PROD, "prod")])
    hook.metaspace_free_mb = 10.0  # the resubmission would not fit: production is not stopped
    op = QuiesceAndSavepointOperator(task_id="quiesce", job_id=PROD, mode="drain", target_directory="file:///sp",
                                     lease=LeaseSettings(str(tmp_path)))  # fmt: skip
    op.__dict__["hook"] = hook
    with pytest.raises(AirflowFailException, match="Production was NOT stopped"):
        op.execute(context("quiesce"))
    released = _lease(tmp_path).current()
    assert released is not None and released.released_by == "quiesce"


def test_a_window_that_could_not_resume_production_keeps_the_lease_for_the_resume_task(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    steps: list[str] = []
    hook, submitter = _stack(monkeypatch, steps, runs_at_once=True)
    real = submitter.submit

    def unreachable(program: Any, **kwargs: Any) -> Any:
        raise FlinkRestError("connection refused", operation="submit production")

    submitter.submit = unreachable  # type: ignore[method-assign]
    with pytest.raises(Exception, match="resume_production task retries it"):
        _run(Window(steps=steps, overlap_resume=False, job_name="prod", lease=LeaseSettings(str(tmp_path))), hook)
    held = _lease(tmp_path).current()
    assert held is not None and held.released_at is None  # production is down: nobody else may stop it
    with pytest.raises(AirflowFailException):  # another run is kept out
        _run(Window(steps=[], job_name="prod", lease=LeaseSettings(str(tmp_path), wait=0)), hook, _other_context())
    submitter.submit = real  # type: ignore[method-assign]
    resume = ResumeJobOperator(task_id="resume_production", program=PROGRAM, quiesce=QuiesceRef(result=_quiesced()),
                               job_name="prod", deferrable=False, lease=LeaseSettings(str(tmp_path)))  # fmt: skip
    resume.__dict__["hook"] = hook
    ctx = context("resume_production")
    assert resume.execute(ctx)["job_id"] == RESUMED
    released = _lease(tmp_path).current()
    assert released is not None and released.generation == held.generation
    assert released.released_by == "resume_production" and ctx["ti"].pushed["lease"]["released_at"]


def _other_context() -> dict[str, Any]:
    ctx = context("quiesce")
    ctx["ti"].dag_id, ctx["ti"].run_id = OTHER_RUN.dag_id, OTHER_RUN.run_id
    return ctx


# -------------------------------------------------------------------------------------------------- resume
def test_the_lease_and_the_quiesce_the_resume_answers_for_are_rendered_as_their_own_types() -> None:
    """``LeaseSettings`` and ``QuiesceRef`` are NamedTuples: Airflow renders their templated members into new tuples
    of the same class (what the resume then reads: ``lease.folder``, ``quiesce.mode``)."""
    quiesced = _quiesced()
    op = ResumeJobOperator(
        task_id="resume_production",
        program=PROGRAM,
        quiesce=QuiesceRef(result=QuiesceResult.model_validate(quiesced), mode="{{ params.mode }}"),
        lease=LeaseSettings("{{ params.runs }}/_leases", ttl=30),
    )
    assert op.quiesce.result == quiesced  # a model given at DAG time is kept as the JSON XCom holds
    op.render_template_fields({"params": {"runs": "/runs", "mode": "drain"}})
    assert op.lease == LeaseSettings("/runs/_leases", ttl=30) and type(op.lease) is LeaseSettings
    assert type(op.quiesce) is QuiesceRef and op.quiesce.mode == "drain" and op.quiesce.result == quiesced


def _resume(hook: StubFlinkHook, folder: Path, quiesce: dict[str, Any] | None) -> ResumeJobOperator:
    op = ResumeJobOperator(
        task_id="resume_production",
        program=PROGRAM,
        quiesce=QuiesceRef(result=quiesce, production_job_id=PROD),
        job_name="prod",
        deferrable=False,
        lease=LeaseSettings(str(folder)),
    )
    op.__dict__["hook"] = hook
    return op


def test_resume_in_a_run_that_never_held_the_lease_touches_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The issue's second run: its quiesce never got the lease; the first run has stopped production (its job is
    FINISHED) and is about to resume it. This run's resume must not resubmit production."""
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED")])
    monkeypatch.setattr(resume_procedure, "get_submitter", lambda kind, h: pytest.fail("must not submit"))
    _lease(tmp_path).acquire(OTHER_RUN, ttl_s=60, wait_s=0)
    with pytest.raises(AirflowSkipException, match=r"never held production's lease.*held by run flink_agents_release"):
        _resume(hook, tmp_path, None).execute(context("resume_production"))


def test_resume_leaves_production_to_the_run_that_took_over_the_lease(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED")])
    monkeypatch.setattr(resume_procedure, "get_submitter", lambda kind, h: pytest.fail("must not submit"))
    _lease(tmp_path).acquire(_this_run("quiesce"), ttl_s=0.1, wait_s=0)
    time.sleep(0.2)  # this run's lease expired (its worker died); another run took it over
    _lease(tmp_path).acquire(OTHER_RUN, ttl_s=60, wait_s=0)
    with pytest.raises(AirflowFailException, match=r"held by run flink_agents_release_gate/ci__7.*does not resubmit"):
        _resume(hook, tmp_path, _quiesced()).execute(context("resume_production"))


def test_resume_returns_the_windows_result_when_a_later_run_stopped_production_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED"), job(RESUMED, "prod", "FINISHED"), job(NEW, "prod")])
    monkeypatch.setattr(resume_procedure, "get_submitter", lambda kind, h: pytest.fail("must not submit"))
    _lease(tmp_path).acquire(_this_run("quiesce"), ttl_s=60, wait_s=0)
    _lease(tmp_path).release(_this_run("quiesce"), by="quiesce")
    _lease(tmp_path).acquire(OTHER_RUN, ttl_s=60, wait_s=0)  # stopping production right now
    result = _resume(hook, tmp_path, _quiesced(window=True)).execute(context("resume_production"))
    assert result["job_id"] == RESUMED and _lease(tmp_path).current().holder == OTHER_RUN  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------- assert_production
def _check(hook: StubFlinkHook, folder: Path | None, quiesce: dict[str, Any] | None) -> AssertProductionOperator:
    op = AssertProductionOperator(task_id="assert_production", job_name="prod",
                                  quiesce=QuiesceRef(result=quiesce, mode="drain", production_job_id=PROD),
                                  program=PROGRAM, timeout=2, lease=LeaseSettings(str(folder)) if folder else None)
    op.__dict__["hook"] = hook
    return op


def test_assert_never_prescribes_a_restore_while_another_run_holds_the_lease(tmp_path: Path, capfd) -> None:
    """The issue's exact case: this run's quiesce never got the lease; the other run has production stopped."""
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED")])
    _lease(tmp_path).acquire(OTHER_RUN, ttl_s=60, wait_s=0)
    result = _check(hook, tmp_path, None).execute(context("assert_production"))
    assert result["production"] == "held_by_other" and result["by"] == "flink_agents_release_gate/ci__7"
    out = capfd.readouterr()
    log = out.out + out.err
    assert "held by run flink_agents_release_gate/ci__7" in log and "will resume it" in log
    assert "Restore production" not in log
    assert _lease(tmp_path).current().holder == OTHER_RUN  # type: ignore[union-attr]  # left alone
    with pytest.raises(AirflowFailException, match=r"NOT RUNNING AS IT SHOULD.* Restore production 'prod' from"):
        _check(hook, None, None).execute(context("assert_production"))  # without the lease: the message


def test_assert_in_a_run_that_never_held_the_lease_accepts_the_job_another_run_resumed(tmp_path: Path) -> None:
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED"), job(NEW, "prod")])
    _other_run_cycled_production(tmp_path)
    result = _check(hook, tmp_path, None).execute(context("assert_production"))
    assert result == {"production": "resumed_by_other", "job_id": NEW, "savepoint": None, "restored_from": None,
                      "by": "flink_agents_release_gate/ci__7"}  # fmt: skip
    checked = _lease(tmp_path).current()
    assert checked is not None and checked.holder.task_id == "assert_production" and checked.released_at


def test_assert_does_not_blame_this_run_for_what_a_later_run_did(tmp_path: Path) -> None:
    """This run resumed production in its window and released the lease; another run then stopped and resumed it
    from its own savepoint. Production runs (one job): that is not this run's failure."""
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED"), job(RESUMED, "prod", "FINISHED"), job(NEW, "prod")])
    hook.restored[NEW] = "file:/sp/gate/ci__7/savepoint-9"
    _lease(tmp_path).acquire(_this_run("quiesce"), ttl_s=60, wait_s=0)
    _lease(tmp_path).release(_this_run("quiesce"), by="quiesce", savepoint=SAVEPOINT)
    _other_run_cycled_production(tmp_path)
    result = _check(hook, tmp_path, _quiesced(window=True)).execute(context("assert_production"))
    assert result["production"] == "resumed_by_other" and result["job_id"] == NEW
    with pytest.raises(AirflowFailException, match="restored from file:/sp/gate/ci__7"):
        _check(hook, None, _quiesced(window=True)).execute(context("assert_production"))  # without the lease


def test_a_later_run_s_check_is_not_taken_for_a_stop(tmp_path: Path) -> None:
    """Another run's assert_production held the lease after this run gave production back, only to check it: this
    run's own check still verifies production runs from this run's savepoint."""
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED"), job(RESUMED, "prod")])
    hook.restored[RESUMED] = SAVEPOINT
    _lease(tmp_path).acquire(_this_run("quiesce"), ttl_s=60, wait_s=0)
    _lease(tmp_path).release(_this_run("quiesce"), by="quiesce", savepoint=SAVEPOINT)
    checker = OTHER_RUN.model_copy(update={"task_id": "assert_production"})
    _lease(tmp_path).try_acquire(checker, ttl_s=60, check_only=True)
    _lease(tmp_path).release(checker, by="assert_production")
    result = _check(hook, tmp_path, _quiesced(window=True)).execute(context("assert_production"))
    assert result["production"] == "resumed" and result["restored_from"] == SAVEPOINT


def test_assert_releases_the_lease_also_when_production_is_down(tmp_path: Path) -> None:
    hook = StubFlinkHook([job(PROD, "prod", "FINISHED")])
    held = _lease(tmp_path).acquire(_this_run("quiesce"), ttl_s=60, wait_s=0)  # the resume failed: still held
    ctx = context("assert_production")
    with pytest.raises(AirflowFailException, match=f"Restore production 'prod' from savepoint {SAVEPOINT}"):
        _check(hook, tmp_path, _quiesced()).execute(ctx)
    released = _lease(tmp_path).current()
    assert released is not None and released.generation == held.generation
    assert released.released_by == "assert_production" and ctx["ti"].pushed["lease"]["released_at"]

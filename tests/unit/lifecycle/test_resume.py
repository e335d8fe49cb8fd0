"""The resume procedure and its reattach rules without Airflow's task machinery, against the scripted Flink of
``tests/fake_flink.py`` (a real ``FlinkRestHook`` over HTTP; the submission recorded by a stub submitter): an
earlier try's resubmission is reattached to, this run's stop in flight is waited out, a stop that failed leaves
production to reattach to, a quiesce that never stopped production is a no-op, and a resume without a savepoint
of this run names the latest one instead of guessing. The operator's side (deferral, lease, XCom) is
tests/unit/operators/test_flink.py and test_production_lease.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_flink_replay.core.flink_models import FlinkPythonProgram, ProductionPlan, QuiesceResult
from airflow_flink_replay.exceptions import LifecycleError, LifecycleRefusedError, NothingToResume
from airflow_flink_replay.lifecycle import resume as resume_procedure
from airflow_flink_replay.lifecycle.quiesce import TaskRun, operation_trigger_id
from airflow_flink_replay.lifecycle.resume import Resume, check_something_to_resume
from tests.fake_flink import JOB, FakeFlink, make_hook
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)
from tests.unit.operators.stubs import StubSubmitter, job

RUN = TaskRun("replay", "manual__2026-12-01", "resume_production")
PROGRAM = FlinkPythonProgram(entry_point="/prod.py", job_name="prod")
SAVEPOINT = "file:/sp/replay/manual__2026-12-01/savepoint-1"


def _quiesced(*, mode: str = "drain", window: bool = False) -> QuiesceResult:
    now = datetime.now(UTC)
    result = QuiesceResult(
        job_id="j1", job_name="prod", mode=mode, savepoint_path=SAVEPOINT, format_type="CANONICAL", trigger_id="t",  # type: ignore[arg-type]
        requested_at=now, savepoint_completed_at=now, production_stopped=mode != "savepoint",
        in_flight_work_possible=mode == "savepoint", plan=ProductionPlan.from_job(job("j1", "prod")),
    )  # fmt: skip
    if window:
        resumed = {"job_id": "j2", "job_name": "prod", "savepoint_path": SAVEPOINT, "submitted_at": now.isoformat(),
                   "running_at": now.isoformat(), "stopped_at": now.isoformat(), "submitter": "rest"}  # fmt: skip
        result = QuiesceResult.model_validate({**result.model_dump(mode="json"), "window": {"resumed": resumed}})
    return result


def _resume(url: str, **kwargs: Any) -> Resume:
    return Resume(make_hook(url, retries=0), PROGRAM, RUN, poll_interval=0.01, **kwargs)


@pytest.fixture
def submitter(monkeypatch: pytest.MonkeyPatch) -> StubSubmitter:
    recorded = StubSubmitter("j9")
    monkeypatch.setattr(resume_procedure, "get_submitter", lambda kind, hook: recorded)
    return recorded


def _overview(*jobs: tuple[str, str]) -> tuple[int, Any]:
    return 200, {"jobs": [{"jid": jid, "name": "prod", "state": state, "start-time": 1} for jid, state in jobs]}


def test_a_run_that_never_stopped_production_has_nothing_to_resume() -> None:
    with pytest.raises(NothingToResume, match="quiesce_mode=existing"):
        check_something_to_resume("existing", {"job_id": "j1"}, "j1", None)
    with pytest.raises(NothingToResume, match="never stopped"):
        check_something_to_resume("drain", None, "", None)
    check_something_to_resume("drain", None, "j1", None)  # production's job named: its stop may have happened


def test_an_earlier_tries_resubmission_is_reattached_to_never_submitted_again(
    fake: tuple[FakeFlink, str], submitter: StubSubmitter
) -> None:
    state, url = fake
    state.on("GET", "/jobs/overview", _overview(("j1", "FINISHED"), ("j2", "RUNNING")))
    target = _resume(url, quiesce=_quiesced()).bring_back()
    assert (target["job_id"], target["reattached"], target["savepoint"]) == ("j2", True, SAVEPOINT)
    assert not submitter.submitted


def test_the_stopped_production_is_resubmitted_from_this_runs_savepoint(
    fake: tuple[FakeFlink, str], submitter: StubSubmitter
) -> None:
    state, url = fake
    state.on("GET", "/jobs/overview", _overview(("j1", "FINISHED")))
    state.on("GET", "/jobs/j9", (200, {**JOB, "jid": "j9"}))
    resume = _resume(url, quiesce=_quiesced())
    target = resume.bring_back()
    assert (target["job_id"], target["reattached"], resume.submitted_job_id) == ("j9", False, "j9")
    assert [s["savepoint_path"] for s in submitter.submitted] == [SAVEPOINT]
    result = resume.wait_until_running(target)
    assert result.job_id == "j9" and result.stopped_at == resume.quiesce.requested_at  # type: ignore[union-attr]
    assert result.downtime_seconds is not None and not result.reattached


def test_without_a_quiesce_result_resume_waits_for_this_runs_stop_then_resubmits_from_it(
    fake: tuple[FakeFlink, str], submitter: StubSubmitter
) -> None:
    """The quiesce task died while Flink was stopping production: the job still RUNS, but this run's stop is in
    flight, so it is not "running" — resume waits until the stop completed and resubmits from its savepoint."""
    state, url = fake
    first = operation_trigger_id(RUN.dag_id, RUN.run_id, "quiesce", -1, "j1", "stop", 0)
    done = {"status": {"id": "COMPLETED"}, "operation": {"location": SAVEPOINT}}
    state.on("GET", f"/jobs/j1/savepoints/{first}", (200, {"status": {"id": "IN_PROGRESS"}}), (200, done))
    state.on("GET", "/jobs/j1", (200, {**JOB, "state": "FINISHED", "end-time": 1_795_000_000_000}))
    state.on("GET", "/jobs/overview", _overview(("j1", "FINISHED")))
    target = _resume(url, production_job_id="j1", quiesce_mode="stop").bring_back()
    assert (target["job_id"], target["reattached"]) == ("j9", False)
    assert target["stopped_at"] == datetime.fromtimestamp(1_795_000_000, UTC).isoformat()  # the job's end
    assert [s["savepoint_path"] for s in submitter.submitted] == [SAVEPOINT]
    assert state.calls[("GET", f"/jobs/j1/savepoints/{first}")] == 2  # polled until the stop completed


def test_a_stop_that_failed_leaves_production_running_to_reattach_to(
    fake: tuple[FakeFlink, str], submitter: StubSubmitter
) -> None:
    state, url = fake
    first = operation_trigger_id(RUN.dag_id, RUN.run_id, "quiesce", -1, "j1", "stop", 0)
    failed = {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": {"stack-trace": "savepoint timeout"}}}
    state.on("GET", f"/jobs/j1/savepoints/{first}", (200, failed))
    state.on("GET", "/jobs/j1", (200, JOB))  # RUNNING
    state.on("GET", "/jobs/overview", _overview(("j1", "RUNNING")))
    target = _resume(url, production_job_id="j1", quiesce_mode="stop").bring_back()
    assert (target["job_id"], target["reattached"], target["savepoint"]) == ("j1", True, None)
    assert not submitter.submitted


def test_without_any_savepoint_of_this_run_resume_names_the_latest_instead_of_guessing(
    fake: tuple[FakeFlink, str], submitter: StubSubmitter
) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, {**JOB, "state": "CANCELED"}))
    state.on("GET", "/jobs/overview", _overview(("j1", "CANCELED")))
    latest = {"id": 4, "status": "COMPLETED", "is_savepoint": True, "external_path": "file:/sp/older/savepoint-4"}
    state.on("GET", "/jobs/j1/checkpoints", (200, {"counts": {}, "history": [], "latest": {"savepoint": latest}}))
    with pytest.raises(LifecycleError, match=r"no savepoint to resume .* Latest savepoint of job j1: file:/sp/older"):
        _resume(url, production_job_id="j1", quiesce_mode="stop").bring_back()
    assert not submitter.submitted


def test_a_quiesce_that_never_stopped_production_makes_resume_a_no_op(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, JOB))
    resume = _resume(url, quiesce=_quiesced(mode="savepoint"))
    assert resume.resumed_in_window() is None
    result = resume.never_stopped()
    assert result is not None and (result.job_id, result.reattached, result.stopped_at) == ("j1", True, None)
    assert _resume(url, quiesce=_quiesced()).never_stopped() is None  # drain stopped it


def test_the_windows_resubmission_counts_only_while_it_still_runs(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j2", (200, {**JOB, "jid": "j2"}), (200, {**JOB, "jid": "j2", "state": "FAILED"}))
    resume = _resume(url, quiesce=_quiesced(window=True))
    found = resume.resumed_in_window()
    assert found is not None and found.job_id == "j2"
    assert resume.resumed_in_window() is None  # failed since: resume brings production back itself


class Lease:
    """Production's lease as the procedure reads it: this run's generations, the others' since, the holder now."""

    def __init__(self, *, mine: bool, later: bool = False, free: bool = True, holder: Any = None) -> None:
        self.mine, self.later, self.free, self.holder = mine, later, free, holder
        self.record: Any = None

    def history(self) -> list[Any]:
        return []

    def of_this_run(self, history: Any = None) -> list[Any]:
        return ["mine"] if self.mine else []

    def others_since(self, history: Any) -> list[Any]:
        return [type("R", (), {"holder": self.holder})()] if self.later else []

    def held_by_other(self) -> Any:
        return None if self.free else self.holder

    def acquire_now(self, *, check_only: bool = False) -> Any:
        if not self.free:
            return None
        self.record = type("R", (), {"job_id": "j7"})()
        return self.record


class Holder:
    def describe(self) -> str:
        return "run gate/ci__7 (task quiesce)"


def test_the_lease_decides_whose_production_it_is_to_resume(fake: tuple[FakeFlink, str]) -> None:
    _, url = fake
    resume = _resume(url, quiesce=_quiesced(window=True))
    with pytest.raises(NothingToResume, match=r"never held production's lease.*held by run gate/ci__7"):
        resume.hold_lease(Lease(mine=False, free=False, holder=Holder()))  # type: ignore[arg-type]
    handed_over = resume.hold_lease(Lease(mine=True, later=True, holder=Holder()))  # type: ignore[arg-type]
    assert handed_over is not None and handed_over.job_id == "j2"  # the later run resumes production
    plain = _resume(url, quiesce=_quiesced())
    with pytest.raises(LifecycleRefusedError, match=r"held by run gate/ci__7.*does not resubmit"):
        plain.hold_lease(Lease(mine=True, free=False, holder=Holder()))  # type: ignore[arg-type]
    assert plain.hold_lease(Lease(mine=True)) is None and plain.stopped_job_id == "j7"  # type: ignore[arg-type]

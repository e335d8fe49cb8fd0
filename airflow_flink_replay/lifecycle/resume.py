"""Production back from this run's savepoint (step 4 of the chain), with the rules that keep a retry from
starting a second copy of it.

:class:`Resume` takes the Flink REST hook and plain values and returns typed results: a :class:`ResumeResult`
when production already runs, or a :class:`ResumeCarry` naming the job to wait for until it RUNS (resubmitted by
this task, or reattached to). It never defers, links a page or pushes XCom: ``ResumeJobOperator``
(``operators/flink.py``) wires it and waits in the triggerer.

The reattach rules. Resume answers for production's job as it was before the quiesce and for THIS run's stop
(the quiesce's deterministic trigger ids, :mod:`.quiesce`):

- a job with production's name other than the stopped one (an earlier try's resubmission) is reattached to;
- a job that RUNS while this run's stop is in flight is not "running": resume waits for the stop to end, then
  reattaches (the stop failed) or resubmits from the savepoint it produced (found by the operation, or in THIS
  run's quiesce directory) — never from an older savepoint or a checkpoint;
- a quiesce that never stopped production (``savepoint`` mode) makes resume a no-op, and a run that never
  stopped production (``existing`` mode, or failed before it named production) has nothing to resume;
- with production's lease: a run that never held it never stopped production; a lease another run holds now
  is that run's production to resume.

The resubmission is never refused by the metaspace guard: production coming back wins (the quiesce checked the
headroom before it stopped anything).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypedDict

from airflow_flink_replay.core.flink_models import (
    LIVE_STATES,
    FlinkPythonProgram,
    QuiesceResult,
    ResumeResult,
    SubmittedJob,
)
from airflow_flink_replay.exceptions import FlinkRestError, LifecycleError, LifecycleRefusedError, NothingToResume
from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter, SubmitterKind, get_submitter
from airflow_flink_replay.lifecycle.quiesce import (
    MODES,
    ProductionLease,
    TaskRun,
    flink_time,
    operation_trigger_ids,
    run_path_segment,
)

if TYPE_CHECKING:
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
    from airflow_flink_replay.hooks.flink_savepoints import StopOutcome

__all__ = ["Resume", "ResumeCarry", "check_something_to_resume", "resubmit_production"]

_log = logging.getLogger(__name__)


class ResumeCarry(TypedDict):
    """The production job resume waits for until it RUNS; what ``ResumeJobOperator`` hands to
    ``execute_complete`` through the trigger's ``carry``."""

    job_id: str
    job_name: str
    savepoint: str | None
    submitted_at: str  # ISO timestamp
    stopped_at: str | None  # ISO timestamp
    reattached: bool


def resubmit_production(
    hook: FlinkRestHook,
    program: FlinkPythonProgram,
    *,
    savepoint: str,
    name: str | None,
    submitter: SubmitterKind = "rest",
    allow_non_restored_state: bool = False,
    timeout: float = 300.0,
) -> SubmittedJob:
    """Submit production from ``savepoint`` (named ``name`` when it differs from the program's). The
    metaspace guard never refuses it: production coming back wins (the quiesce checked the headroom
    before it stopped anything)."""
    chosen = get_submitter(submitter, hook)
    if isinstance(chosen, RestPythonSubmitter):
        chosen.min_metaspace_headroom_mb = 0
    return chosen.submit(
        program,
        savepoint_path=savepoint,
        allow_non_restored_state=allow_non_restored_state,
        job_name=name if name and name != program.job_name else None,
        timeout=timeout,
    )


def check_something_to_resume(
    quiesce_mode: str | None, quiesce_result: Any, production_job_id: str | None, savepoint_path: str | None
) -> None:
    """Refuse a resume in a run that never stopped production (before any connection is looked up).

    :raises NothingToResume: ``existing`` mode, or no quiesce result, no production job id and no savepoint.
    """
    if quiesce_mode == "existing":
        raise NothingToResume("quiesce_mode=existing: this run never stopped production, nothing to resume")
    if not (quiesce_result or production_job_id or savepoint_path):
        raise NothingToResume(
            "nothing to resume: no quiesce result, no production job id and no savepoint_path (the run failed "
            "before it identified production, so production was never stopped)"
        )


def _carry(
    job_id: str,
    name: str,
    savepoint: str | None,
    submitted_at: datetime,
    stopped_at: datetime | None,
    *,
    reattached: bool,
) -> ResumeCarry:
    return {
        "job_id": job_id,
        "job_name": name,
        "savepoint": savepoint,
        "submitted_at": submitted_at.isoformat(),
        "stopped_at": stopped_at.isoformat() if stopped_at else None,
        "reattached": reattached,
    }


@dataclass
class Resume:
    """Production resubmitted from this run's savepoint, or reattached to (see the module's docstring).

    :param flink: the Flink REST hook.
    :param program: how to submit production.
    :param task: the resume's task instance (its DAG run names this run's stop).
    :param quiesce: the quiesce's result (None: the quiesce task left none).
    :param savepoint_path: the savepoint to restore (overrides the quiesce result's).
    :param job_name: production's job name (default: the quiesce result's, else the program's).
    :param production_job_id: production's job id before the quiesce (when the quiesce left no result).
    :param quiesce_mode: the run's quiesce mode; with ``quiesce_task_id`` it gives this run's stop's trigger ids.
    :param stop_timeout: seconds to wait for this run's stop to end when it is still in flight.
    :param log: where the steps are logged (the task's log).
    """

    flink: FlinkRestHook
    program: FlinkPythonProgram
    task: TaskRun
    quiesce: QuiesceResult | None = None
    savepoint_path: str | None = None
    job_name: str | None = None
    production_job_id: str | None = None
    quiesce_mode: str | None = None
    quiesce_task_id: str = "quiesce"
    submitter: SubmitterKind = "rest"
    allow_non_restored_state: bool = False
    timeout: float = 300.0
    poll_interval: float = 0.25
    all_tasks_running: bool = True
    stop_timeout: float = 900.0
    log: Any = _log
    #: the job this task submitted, if it did (cancelled on kill only when asked)
    submitted_job_id: str | None = field(default=None, init=False)
    #: the job this run's quiesce stopped
    stopped_job_id: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.stopped_job_id = self.quiesce.job_id if self.quiesce is not None else self.production_job_id

    @property
    def name(self) -> str | None:
        """Production's job name."""
        return self.job_name or (self.quiesce.job_name if self.quiesce else None) or self.program.job_name

    def resumed_in_window(self) -> ResumeResult | None:
        """The stop window's result when the window resubmitted production and that job still RUNS."""
        resumed = self.quiesce.window.resumed if self.quiesce is not None and self.quiesce.window else None
        if resumed is None:
            return None
        job = self.flink.get_job(resumed.job_id)
        if job.state != "RUNNING":
            self.log.warning("Production job %s, resumed inside the stop window, is %s now", resumed.job_id, job.state)
            return None
        self.log.info(
            "Production job %s was resumed inside the stop window after %s s of downtime: nothing to do",
            resumed.job_id,
            resumed.downtime_seconds,
        )
        return resumed

    def never_stopped(self) -> ResumeResult | None:
        """Production as it runs when the quiesce never stopped it (``savepoint`` mode), else None."""
        if self.quiesce is None or self.quiesce.production_stopped:
            return None
        self.log.info(
            "Quiesce mode %r never stopped production (job %s): nothing to resume",
            self.quiesce.mode,
            self.quiesce.job_id,
        )
        running = self.flink.get_job(self.quiesce.job_id)
        now = datetime.now(UTC)
        kept = _carry(self.quiesce.job_id, running.name, self.quiesce.savepoint_path, now, None, reattached=True)
        return self.result(kept, running_at=now)

    def hold_lease(self, lease: ProductionLease) -> ResumeResult | None:
        """Take production's lease for the resume (this run's own, renewed, or a free one). Returns the stop
        window's result when another run stopped production after this run's window resumed it (that run resumes
        it), None to go on (with the job this run's quiesce stopped as the lease recorded it).

        :raises NothingToResume: this run never held the lease, so it never stopped production.
        :raises LifecycleRefusedError: another run holds the lease now: production is its to resume.
        """
        history = lease.history()
        if not lease.of_this_run(history):
            holder = lease.held_by_other()
            raise NothingToResume(
                "This run never held production's lease, so it never stopped production"
                + (f" (the lease is held by {holder.describe()}, which resumes it)" if holder else "")
                + ": nothing to resume"
            )
        resumed = self.quiesce.window.resumed if self.quiesce is not None and self.quiesce.window else None
        later = lease.others_since(history)
        if resumed is not None and later:
            self.log.warning("Production, resumed by this run's stop window as job %s, was stopped again since by %s, "
                             "which resumes it", resumed.job_id, later[-1].holder.describe())  # fmt: skip
            return resumed
        if lease.acquire_now() is None:
            holder = lease.held_by_other()
            raise LifecycleRefusedError(
                f"Production's lease is held by {holder.describe() if holder else 'another run'}, no longer by this "
                "run (its lease expired and was taken over): that run stops and resumes production, so this run does "
                "not resubmit it. Check that run's assert_production task"
            )
        self.stopped_job_id = (lease.record.job_id if lease.record else None) or self.stopped_job_id
        return None

    def bring_back(self) -> ResumeCarry:
        """Reattach to production, or resubmit it from this run's savepoint (production may be stopped).

        :raises LifecycleError: no savepoint to resume from; this run's stop still in flight at ``stop_timeout``.
        """
        name, job_id = self.name, self.stopped_job_id
        stopped_at = self.quiesce.requested_at if self.quiesce else None
        savepoint = self.savepoint_path or (self.quiesce.savepoint_path if self.quiesce else None)
        if name:
            # an earlier try of this task resubmitted production already: reattach (never a second copy)
            live = [j for j in self.flink.list_jobs().by_name(name, states=LIVE_STATES) if j.jid != job_id]
            if live:
                self.log.info("Production job %r already runs as %s: reattaching, not resubmitting", name, live[0].jid)
                return _carry(live[0].jid, name, savepoint, datetime.now(UTC), stopped_at, reattached=True)
        if self.quiesce is None and job_id:
            # the quiesce task left no result (failed, timed out, killed): its stop may still be in flight
            outcome = self.stop_outcome(job_id)
            if outcome.kept_running:
                self.log.info("No stop of this run took effect: production job %s still RUNS, reattaching", job_id)
                return _carry(job_id, name or "", None, datetime.now(UTC), None, reattached=True)
            stopped_at = flink_time(outcome.end_time)
            if outcome.savepoint and not savepoint:
                self.log.warning(
                    "The quiesce task left no result, but production job %s is %s with savepoint %s of this run: "
                    "resuming from it",
                    job_id,
                    outcome.job_state,
                    outcome.savepoint,
                )
            savepoint = savepoint or outcome.savepoint
        if not savepoint:
            raise LifecycleError(
                "ResumeJobOperator: no savepoint to resume from (the quiesce task produced no result, this run has "
                f"no savepoint of job {job_id} and no savepoint_path was given). Production is not running."
                f"{self._latest_savepoint_hint(job_id)}"
            )
        return self.resubmit(savepoint, stopped_at)

    def stop_outcome(self, job_id: str) -> StopOutcome:
        """What this run's stop did to ``job_id``, once it is no longer in flight (``FlinkRestHook.stop_outcome``)."""
        mode = self.quiesce_mode if self.quiesce_mode in MODES else None
        dag_id, run_id = self.task.dag_id, self.task.run_id
        ids = operation_trigger_ids(dag_id, run_id, self.quiesce_task_id, -1, job_id, mode) if mode else []
        try:
            return self.flink.stop_outcome(
                job_id,
                ids,
                run_path_segment(dag_id, run_id),
                stopping=mode != "savepoint",
                timeout=self.stop_timeout,
                poll_interval=max(self.poll_interval, 0.5),
            )
        except FlinkRestError as err:
            raise LifecycleError(str(err)) from err

    def resubmit(self, savepoint: str, stopped_at: datetime | None) -> ResumeCarry:
        """Resubmit production from ``savepoint`` (:func:`resubmit_production`)."""
        submitted = resubmit_production(
            self.flink,
            self.program,
            savepoint=savepoint,
            name=self.name,
            submitter=self.submitter,
            allow_non_restored_state=self.allow_non_restored_state,
            timeout=self.timeout,
        )
        self.submitted_job_id = submitted.job_id
        self.log.info(
            "Resubmitted production from %s as job %s (%s, %.1f s)",
            savepoint,
            submitted.job_id,
            submitted.submitter,
            submitted.seconds,
        )
        return _carry(
            submitted.job_id, self.name or "", savepoint, submitted.submitted_at, stopped_at, reattached=False
        )

    def _latest_savepoint_hint(self, job_id: str | None) -> str:
        if not job_id:
            return " Pass savepoint_path (the production job's latest savepoint is in the Flink UI)."
        try:
            latest = self.flink.get_checkpoints(job_id).latest_savepoint
        except FlinkRestError:
            latest = None
        return f" Latest savepoint of job {job_id}: {latest.external_path}" if latest else ""

    def wait_until_running(self, target: ResumeCarry) -> ResumeResult:
        """Wait here (not in the triggerer) until ``target``'s job RUNS.

        :raises LifecycleError: it failed, or did not RUN in ``timeout`` (Flink's cause in the message).
        """
        try:
            job = self.flink.wait_for_job_state(
                target["job_id"],
                ("RUNNING",),
                timeout=self.timeout,
                poll_interval=self.poll_interval,
                all_tasks_running=self.all_tasks_running,
            )
        except FlinkRestError as err:
            raise LifecycleError(str(err)) from err
        return self.result(target, running_at=datetime.now(UTC), job_name=target["job_name"] or job.name)

    def result(self, target: ResumeCarry, *, running_at: datetime, job_name: str | None = None) -> ResumeResult:
        """The resume's result once ``target``'s job RUNS (since ``running_at``)."""
        result = ResumeResult(
            job_id=target["job_id"],
            job_name=target["job_name"] if job_name is None else job_name,
            savepoint_path=target["savepoint"],
            submitted_at=datetime.fromisoformat(target["submitted_at"]),
            running_at=running_at,
            stopped_at=datetime.fromisoformat(target["stopped_at"]) if target["stopped_at"] else None,
            submitter=self.submitter,
            reattached=target["reattached"],
        )
        downtime = result.downtime_seconds
        self.log.info(
            "Production job %s RUNNING again%s",
            result.job_id,
            f" after {downtime:.2f} s of downtime" if downtime is not None else "",
        )
        return result

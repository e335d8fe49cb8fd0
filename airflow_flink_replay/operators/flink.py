"""Quiesce production with a savepoint, and resume it from that savepoint.

``QuiesceAndSavepointOperator`` (modes ``drain`` | ``stop`` | ``savepoint``) and ``ResumeJobOperator``.
Both are deferrable (Databricks-provider style: ``deferrable`` defaults to ``[operators]
default_deferrable``, ``defer()`` to a trigger, finish in ``execute_complete``) and idempotent on retry:

- the quiesce task derives its Flink ``triggerId`` from (dag, run, task, map index, job, mode). Flink
  acknowledges a repeated ``triggerId`` without starting a second savepoint/stop, so a retry reattaches
  to the same operation; when Flink no longer remembers it, a completed savepoint of this run is found in
  the job's checkpoint statistics (the savepoint lives in a per-run directory) and reused. It never stops
  or savepoints twice and never falls back to a checkpoint. Before it stops production it checks that
  production's JobManager has the metaspace headroom for the resubmission (which is never refused).
- the resume task answers for production's job as it was before the quiesce and for THIS run's stop (the
  same deterministic trigger ids): a job that RUNS while that stop is in flight is not "running", so
  resume waits for the stop to end, then reattaches (the stop failed) or resubmits from its savepoint. It
  never starts a second copy of production: an earlier try's resubmission is reattached to, and a quiesce
  that never stopped production makes resume a no-op. The lookups live in :class:`FlinkRestHook`
  (``find_operation``, ``run_savepoint``, ``stop_outcome``), one implementation for both operators.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, TypedDict

from airflow.sdk import BaseOperator, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_flink_replay.core.flink_models import (
    AGENT_OPERATOR_NAME,
    LIVE_STATES,
    CheckpointStats,
    FlinkPythonProgram,
    JobDetails,
    ProductionPlan,
    QuiesceResult,
    ResumeResult,
    SubmittedJob,
)
from airflow_flink_replay.core.production_lease import DEFAULT_TTL_S, DEFAULT_WAIT_S, last_stop_before
from airflow_flink_replay.exceptions import FlinkOperationFailedError, FlinkRestError
from airflow_flink_replay.hooks.flink_rest import (
    FlinkRestHook,
    StopOutcome,
    savepoint_in,
)
from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter, SubmitterKind, get_submitter
from airflow_flink_replay.links.flink import FlinkJobLink
from airflow_flink_replay.operators.production_lease import RunLease, run_lease
from airflow_flink_replay.triggers.flink import FlinkAsyncOperationTrigger, FlinkJobStateTrigger

MODES = ("drain", "stop", "savepoint")
#: How many distinct trigger ids one task instance may use (one per failed attempt of the operation).
MAX_ATTEMPT_IDS = 20
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class QuiesceCarry(TypedDict):
    """What ``QuiesceAndSavepointOperator.execute`` hands to ``execute_complete`` through the trigger's ``carry``."""

    trigger_id: str
    plan: dict[str, Any]  # ProductionPlan, JSON
    requested_at: str  # ISO timestamp
    reused: bool


class ResumeCarry(TypedDict):
    """What ``ResumeJobOperator`` hands to ``execute_complete`` through the trigger's ``carry``."""

    job_id: str
    job_name: str
    savepoint: str | None
    submitted_at: str  # ISO timestamp
    stopped_at: str | None  # ISO timestamp
    reattached: bool


def operation_trigger_id(
    dag_id: str, run_id: str, task_id: str, map_index: int, job_id: str, mode: str, attempt: int
) -> str:
    """A deterministic 32-hex Flink ``triggerId`` for one task instance's savepoint/stop (attempt ``n``)."""
    key = f"{dag_id}|{run_id}|{task_id}|{map_index}|{job_id}|{mode}|{attempt}"
    return hashlib.md5(key.encode(), usedforsecurity=False).hexdigest()


def run_path_segment(dag_id: str, run_id: str) -> str:
    """``/<dag_id>/<run_id>/`` (sanitized): the per-run part of a quiesce savepoint's directory."""
    return f"/{_SAFE.sub('_', dag_id)}/{_SAFE.sub('_', run_id)}/"


def savepoint_of_run(stats: CheckpointStats, dag_id: str, run_id: str) -> str | None:
    """The newest completed savepoint of a job taken into this DAG run's quiesce directory, if any."""
    record = savepoint_in(stats, run_path_segment(dag_id, run_id))
    return record.external_path if record else None


def operation_trigger_ids(dag_id: str, run_id: str, task_id: str, map_index: int, job_id: str, mode: str) -> list[str]:
    """Every trigger id one quiesce task instance may use, in attempt order (see :func:`operation_trigger_id`)."""
    return [operation_trigger_id(dag_id, run_id, task_id, map_index, job_id, mode, n) for n in range(MAX_ATTEMPT_IDS)]


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


def _ti_parts(context: Any) -> tuple[str, str, str, int]:
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    return ti.dag_id, ti.run_id, ti.task_id, -1 if map_index is None else int(map_index)


def flink_time(ts: int | None) -> datetime | None:
    """A Flink epoch-millisecond timestamp as an aware datetime (None for Flink's "not set", 0 or -1)."""
    return datetime.fromtimestamp(ts / 1000, UTC) if ts and ts > 0 else None


class QuiesceAndSavepointOperator(BaseOperator):
    """Takes production's savepoint: ``drain`` (stop with drain), ``stop`` (stop, no drain) or ``savepoint``.

    - ``drain``: ``POST /jobs/{id}/stop {"drain": true}``. Sources stop, MAX_WATERMARK flows and every
      operator finishes (end of input): the Flink Agents operator completes all in-flight runs, event-time
      timers fire, buffers flush. The savepoint holds no in-flight work; production is stopped.
    - ``stop``: stop-with-savepoint without drain; production stopped. No MAX_WATERMARK: event-time timers
      do not fire, so the work waiting on them stays in the savepoint. Flink 2.x still finishes every
      operator and runs its mailbox empty first, which (found with Flink Agents 0.2.0) completes the agent
      operator's in-flight runs too; ``drain`` is the mode that guarantees it (``endInput``).
    - ``savepoint``: ``POST /jobs/{id}/savepoints``; production keeps running (no downtime); the result
      says in-flight work may be inside.

    A failed or timed-out savepoint fails the task with Flink's cause; it never falls back to a
    checkpoint. Pushes a :class:`QuiesceResult` (``model_dump(mode="json")``) as return value.

    :param job_id: production's Flink job id (templated).
    :param mode: ``drain`` | ``stop`` | ``savepoint`` (templated).
    :param target_directory: savepoint base directory (templated); default: the cluster's
        ``execution.checkpointing.savepoint-dir``. The savepoint goes to ``<base>/<dag_id>/<run_id>``.
    :param format_type: ``CANONICAL`` (portable; default) or ``NATIVE``.
    :param timeout: seconds the savepoint/stop may take.
    :param poll_interval: seconds between REST polls.
    :param agent_operator_name: marks the agent vertex in the recorded plan.
    :param wait_for_finished: in drain/stop modes, return only once the job is FINISHED (default). Flink
        reports the stop's savepoint COMPLETED while the job still tears down (~2.5 s for Python workers);
        waiting makes "production stopped" mean every task ended and every sink committed. ``False``
        returns at savepoint completion (shorter downtime when resume follows directly; ``job_stopped_at``
        is then only set if the job had already finished).
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param lease_dir: the folder of production leases (templated; the replay DAG: ``<runs_uri>/_leases``). Given,
        the task takes production's lease (:mod:`~airflow_flink_replay.core.production_lease`) before it touches
        production, waiting up to ``lease_wait`` seconds while another run holds it, then failing with nothing
        touched. ``savepoint`` mode releases it once the savepoint is taken; ``drain``/``stop`` keep it for the
        resume (the stop window, ``resume_production``) or ``assert_production`` to release. None: no lease.
    :param lease_wait: seconds to wait for another run's lease.
    :param lease_ttl: seconds the lease stays valid without renewal (renewed every quarter of it while held).
    """

    template_fields: Sequence[str] = ("job_id", "mode", "target_directory", "lease_dir")
    operator_extra_links = (FlinkJobLink(),)
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        job_id: str,
        mode: str = "drain",
        target_directory: str | None = None,
        format_type: str = "CANONICAL",
        flink_conn_id: str = FlinkRestHook.default_conn_name,
        timeout: float = 600.0,
        poll_interval: float = 0.5,
        agent_operator_name: str = AGENT_OPERATOR_NAME,
        wait_for_finished: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        lease_dir: str | None = None,
        lease_wait: float = DEFAULT_WAIT_S,
        lease_ttl: float = DEFAULT_TTL_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.lease_dir = lease_dir
        self.lease_wait = float(lease_wait)
        self.lease_ttl = float(lease_ttl)
        self._lease: RunLease | None = None
        #: production was (or may have been) stopped or savepointed by this task: a failure keeps the lease
        self._touched = False
        self.job_id = job_id
        self.mode = mode
        self.target_directory = target_directory
        self.format_type = format_type.upper()
        self.flink_conn_id = flink_conn_id
        self.timeout = float(timeout)
        self.poll_interval = float(poll_interval)
        self.agent_operator_name = agent_operator_name
        self.wait_for_finished = wait_for_finished
        self.deferrable = deferrable
        if self.format_type not in ("CANONICAL", "NATIVE"):
            raise ValueError(f"format_type must be CANONICAL or NATIVE, got {format_type!r}")

    @cached_property
    def hook(self) -> FlinkRestHook:
        """The Flink REST hook."""
        return FlinkRestHook(self.flink_conn_id)

    @property
    def operation(self) -> str:
        """Human name of the Flink operation of this mode."""
        return {"drain": "stop with savepoint (drain)", "stop": "stop with savepoint"}.get(self.mode, "savepoint")

    def _run_directory(self, hook: FlinkRestHook, dag_id: str, run_id: str) -> str:
        base = self.target_directory
        if not base:
            base = hook.get_jobmanager_config().get("execution.checkpointing.savepoint-dir")
            if not base:
                raise AirflowException(
                    "QuiesceAndSavepointOperator: no target_directory given and the Flink cluster has no "
                    "execution.checkpointing.savepoint-dir; set target_directory"
                )
        return base.rstrip("/") + run_path_segment(dag_id, run_id).rstrip("/")

    def execute(self, context: Any) -> Any:
        """Take production's lease (with ``lease_dir``), then quiesce; a failure before production was touched
        releases the lease."""
        if self.mode not in MODES:
            raise AirflowException(f"QuiesceAndSavepointOperator.mode must be one of {MODES}, got {self.mode!r}")
        hook = self.hook
        job = hook.get_job(self.job_id)  # FlinkJobNotFoundError names an unknown id
        lease = self._production_lease(context, job.name)
        if lease is None:
            return self._quiesce(context, hook, job)
        lease.acquire(wait_s=self.lease_wait, job_id=self.job_id)  # fails here, touching nothing, if still held
        try:
            with lease.heartbeat():
                return self._quiesce(context, hook, self._production_after_wait(context, hook, job, lease))
        except BaseException:
            if not self._touched:
                lease.release(why="this task failed before it stopped or savepointed production")
            raise

    def _production_lease(self, context: Any, job_name: str | None) -> RunLease | None:
        """This task's hold on production's lease (created once), None without ``lease_dir``."""
        if self._lease is None:
            name = getattr(self, "job_name", None) or job_name  # the stop window's production.job_name
            self._lease = run_lease(self.log, context, lease_dir=self.lease_dir, flink_url=self.hook.base_url,
                                    job_name=name, ttl_s=self.lease_ttl)  # fmt: skip
        return self._lease

    def _production_after_wait(self, context: Any, hook: FlinkRestHook, job: JobDetails, lease: RunLease) -> JobDetails:
        """Production's job once this run holds the lease. The run that held it before (while this one waited, or
        after this run's preflight) resumed production as a new job: on a first try, that job is quiesced."""
        if lease.record is not None and lease.record.waited_s > 0:
            job = hook.get_job(self.job_id)  # as it is now, after the wait
        if job.state == "RUNNING" or int(getattr(context["ti"], "try_number", 1) or 1) > 1 or lease.record is None:
            return job
        before = last_stop_before(lease.history(), lease.record.generation)
        running = [j.jid for j in hook.list_jobs().by_name(job.name, states=frozenset({"RUNNING"}))]
        if before is None or lease.me.same_run(before.holder) or len(running) != 1:
            return job
        self.log.warning(
            "Production's job changed while this run waited for its lease: job %s is %s; %s resumed production "
            "as job %s, which this run quiesces", self.job_id, job.state, before.holder.describe(), running[0],
        )  # fmt: skip
        self.job_id = running[0]
        lease.note_job(self.job_id)
        return hook.get_job(self.job_id)

    def _quiesce(self, context: Any, hook: FlinkRestHook, job: JobDetails) -> Any:
        """Record the plan, then trigger (or reattach to) this run's savepoint/stop and wait for it."""
        FlinkJobLink.persist(context, hook.job_ui_url(self.job_id, job.state))
        plan = ProductionPlan.from_job(job, self.agent_operator_name)
        dag_id, run_id, task_id, map_index = _ti_parts(context)
        run_dir = self._run_directory(hook, dag_id, run_id)

        # A first try has nothing to reattach to: skip the look-ups (they cost REST calls before the stop).
        earlier_tries = int(getattr(context["ti"], "try_number", 1) or 1) > 1
        self._touched = earlier_tries  # an earlier try may have stopped production
        trigger_id = operation_trigger_id(dag_id, run_id, task_id, map_index, self.job_id, self.mode, 0)
        if earlier_tries:
            # 1. Reattach to an operation of this task instance that Flink still remembers.
            trigger_id, status = self._reattachable(hook, dag_id, run_id, task_id, map_index)
            if status is not None:
                self.log.info("Reattaching to %s %s of job %s (earlier try)", self.operation, trigger_id, self.job_id)
                return self._wait(context, hook, trigger_id, plan, requested_at=datetime.now(UTC), reused=True)

        # 2. Flink forgot the operation: a savepoint of this run in the job's statistics is reused.
        existing = hook.run_savepoint(self.job_id, run_dir) if earlier_tries else None
        if existing is not None and existing.external_path:
            self.log.info("Reusing savepoint %s of this run (taken by an earlier try)", existing.external_path)
            return self._finish(
                context,
                hook,
                plan,
                trigger_id=trigger_id,
                location=str(existing.external_path),
                requested_at=flink_time(existing.trigger_timestamp) or datetime.now(UTC),
                completed_at=flink_time(existing.latest_ack_timestamp) or datetime.now(UTC),
                reused=True,
            )
        if job.state != "RUNNING":
            raise AirflowException(
                f"Flink job {self.job_id} is {job.state} and has no savepoint of this run under {run_dir}; "
                "a savepoint needs a RUNNING job. Resume it from a known savepoint, or point job_id at the "
                "running production job"
            )

        # 3. Trigger once, only when production could be resubmitted afterwards.
        if self.mode != "savepoint":
            self._check_room_for_resume(hook)
        requested_at = datetime.now(UTC)
        self._touched = True
        if self.mode == "savepoint":
            hook.trigger_savepoint(self.job_id, run_dir, format_type=self.format_type, trigger_id=trigger_id)
        else:
            hook.stop_with_savepoint(
                self.job_id, run_dir, drain=self.mode == "drain", format_type=self.format_type, trigger_id=trigger_id
            )
        self.log.info("Triggered %s of job %s into %s (trigger %s)", self.operation, self.job_id, run_dir, trigger_id)
        return self._wait(context, hook, trigger_id, plan, requested_at=requested_at, reused=False)

    def _reattachable(
        self, hook: FlinkRestHook, dag_id: str, run_id: str, task_id: str, map_index: int
    ) -> tuple[str, Any]:
        """(trigger id, status) of an in-progress or successful operation of an earlier try, or
        (the first unused trigger id, None). A failed operation moves on to the next attempt's id."""
        ids = operation_trigger_ids(dag_id, run_id, task_id, map_index, self.job_id, self.mode)
        try:
            return hook.find_operation(self.job_id, ids)
        except FlinkOperationFailedError as err:
            raise AirflowException(
                f"{MAX_ATTEMPT_IDS} {self.operation} attempts of job {self.job_id} failed: {err}"
            ) from err

    def _check_room_for_resume(self, hook: FlinkRestHook) -> None:
        """Refuse to stop production when its JobManager could not take the resubmission afterwards.

        Resuming production runs a Python submission on production's JobManager, and that submission
        is never refused (bringing production back wins over the metaspace guard). So the guard runs
        here, before anything is stopped: below the connection's ``min_metaspace_headroom_mb`` of free
        metaspace, the resubmission could kill the JobManager, and production with it.
        """
        memory = hook.metaspace_short()
        if memory is not None:
            headroom = hook.settings.min_metaspace_headroom_mb
            raise AirflowFailException(
                f"Production was NOT stopped: its JobManager at {hook.base_url} has {memory.metaspace_free_mb:.0f} "
                "MB of metaspace "
                f"free ({memory.metaspace_used / 2**20:.0f} of {memory.metaspace_max / 2**20:.0f} MB used), less "
                f"than the {headroom:g} MB (min_metaspace_headroom_mb of connection {self.flink_conn_id!r}) that "
                "resubmitting production after the savepoint needs; that resubmission could kill the JobManager "
                "(OutOfMemoryError: Metaspace) with production on it. Fix: restart production's JobManager in a "
                "maintenance window (or raise jobmanager.memory.jvm-metaspace.size), then run the replay again; "
                "see docs/real-cluster.md#jobmanager-metaspace"
            )

    def _wait(
        self,
        context: Any,
        hook: FlinkRestHook,
        trigger_id: str,
        plan: ProductionPlan,
        *,
        requested_at: datetime,
        reused: bool,
    ) -> Any:
        carry: QuiesceCarry = {
            "trigger_id": trigger_id,
            "plan": plan.model_dump(mode="json"),
            "requested_at": requested_at.isoformat(),
            "reused": reused,
        }
        if self.deferrable:
            self.defer(
                trigger=FlinkAsyncOperationTrigger(
                    job_id=self.job_id,
                    request_id=trigger_id,
                    operation=self.operation,
                    flink_conn_id=self.flink_conn_id,
                    timeout=self.timeout,
                    poll_interval=self.poll_interval,
                    carry=dict(carry),
                ),
                method_name="execute_complete",
            )
        location = hook.wait_for_savepoint(
            self.job_id, trigger_id, timeout=self.timeout, poll_interval=self.poll_interval, operation=self.operation
        )
        return self._finish(
            context,
            hook,
            plan,
            trigger_id=trigger_id,
            location=location,
            requested_at=requested_at,
            completed_at=datetime.now(UTC),
            reused=reused,
        )

    def execute_complete(self, context: Any, event: dict[str, Any], **kwargs: Any) -> Any:
        """Finish after the trigger: fail with Flink's cause, or build the result.

        What ``execute`` knew travels in ``event["carry"]`` (dag.test() drops deferral kwargs).
        """
        if event.get("status") != "success":
            raise AirflowException(event.get("message") or f"Flink {self.operation} failed: {event}")
        carry = {**event.get("carry", {}), **kwargs}
        return self._finish(
            context,
            self.hook,
            ProductionPlan.model_validate(carry["plan"]),
            trigger_id=carry["trigger_id"],
            location=str(event["location"]),
            requested_at=datetime.fromisoformat(carry["requested_at"]),
            completed_at=datetime.fromisoformat(event["completed_at"]),
            reused=bool(carry["reused"]),
        )

    def _finish(
        self,
        context: Any,
        hook: FlinkRestHook,
        plan: ProductionPlan,
        *,
        trigger_id: str,
        location: str,
        requested_at: datetime,
        completed_at: datetime,
        reused: bool,
    ) -> dict[str, Any]:
        stopped = self.mode in ("drain", "stop")
        stopped_at = None
        if stopped:
            if self.wait_for_finished:
                job = hook.wait_for_job_state(self.job_id, ("FINISHED",), timeout=60, poll_interval=0.05)
            else:
                job = hook.get_job(self.job_id)
            stopped_at = flink_time(job.end_time)
            # the web UI shows an ended job under #/job/completed/ only: link the page that exists now
            FlinkJobLink.persist(context, hook.job_ui_url(self.job_id, job.state))
        note = {
            "drain": "Drained: every operator reached end of input before the savepoint (the agent operator "
            "finished its in-flight runs); production is stopped.",
            "stop": "Stopped without drain: event-time timers did not fire, and agent runs in flight at the barrier "
            "are inside the savepoint (Flink Agents 0.2.0 cannot restore one waiting on a tool response: "
            "KeyError initial_request_id — the run's assert_production step then fails naming the savepoint); "
            "production is stopped.",
            "savepoint": "Savepoint without stop: production keeps running and in-flight work may be inside "
            "the savepoint.",
        }[self.mode]
        result = QuiesceResult(
            job_id=self.job_id,
            job_name=plan.job_name,
            mode=self.mode,  # type: ignore[arg-type]
            savepoint_path=location,
            format_type=self.format_type,  # type: ignore[arg-type]
            trigger_id=trigger_id,
            requested_at=requested_at,
            savepoint_completed_at=completed_at,
            job_stopped_at=stopped_at,
            production_stopped=stopped,
            in_flight_work_possible=self.mode == "savepoint",
            reused=reused,
            plan=plan,
            note=note,
        )
        self.log.info("%s of job %s: %s (%s)", self.operation, self.job_id, location, note)
        if not stopped:  # production kept running: nothing for a resume to do
            self._release_lease(context, plan.job_name, savepoint=location, why="savepoint taken, production ran on")
        return result.model_dump(mode="json")

    def _release_lease(self, context: Any, job_name: str | None, *, savepoint: str | None, why: str) -> None:
        """Release production's lease (with ``lease_dir``), pushing it as this task left it (XCom ``lease``)."""
        lease = self._production_lease(context, job_name)
        if lease is not None and (done := lease.release(savepoint=savepoint, why=why)) is not None:
            lease.push(done.summary())

    def on_kill(self) -> None:
        """Flink cannot abort a savepoint or undo a stop over REST; the trigger id lets a retry reattach."""
        self.log.warning(
            "Killed while waiting for the %s of job %s; Flink finishes it on its own and a retry of this "
            "task reattaches to it (same trigger id) instead of stopping twice",
            self.operation,
            self.job_id,
        )


class ResumeJobOperator(BaseOperator):
    """Resubmits production from a savepoint, waits until it RUNS again and reports the downtime.

    Meant for ``trigger_rule="all_done"`` (the default here) so production comes back even when a task
    between stop and resume failed, and for retries with backoff (every step is idempotent). Resubmission
    goes through a :class:`FlinkJobSubmitter` (REST by default) whose metaspace guard is off for it:
    bringing production back wins (the quiesce checks the headroom before it stops anything).
    Idempotent: a job with production's name other than the stopped one (an earlier try's resubmission) is
    reattached to; a stopped job that still RUNS once this run's stop is no longer in flight is reattached
    to; if the quiesce never stopped production (``savepoint`` mode), nothing is submitted.

    :param program: how to submit production (:class:`FlinkPythonProgram` or its dict; templated).
    :param quiesce_result: the quiesce task's result (e.g. ``quiesce.output``; templated). Gives the
        savepoint, the job name and the stop time for the downtime.
    :param savepoint_path: the savepoint to restore (templated; overrides the quiesce result's).
    :param job_name: production's job name (default: the quiesce result's, else the program's).
    :param allow_non_restored_state: skip state that maps to no operator (``-n``). Off by default: a
        production restore should restore everything.
    :param submitter: ``rest`` (default) or ``cli``.
    :param timeout: seconds to wait until RUNNING.
    :param all_tasks_running: RUNNING means every vertex runs (records flow again), not only the job.
    :param cancel_on_kill: cancel the submitted job when the task is killed (off: production must stay up).
    :param production_job_id: production's Flink job id as it was before the quiesce (templated). Used when
        the quiesce result is missing (the quiesce task failed, timed out or was killed, maybe while Flink was
        still stopping the job): resume waits until the stop this run triggered (found by its deterministic
        trigger ids) is no longer in flight, then reattaches to that job if it still RUNS (the stop failed),
        or resubmits from the savepoint the stop produced (found by the operation, or in THIS run's quiesce
        directory); never from an older savepoint or a checkpoint. A RUNNING job with a stop in flight is
        not "running".
    :param quiesce_mode: the run's quiesce mode (templated). ``existing`` (an earlier savepoint is replayed,
        production was never stopped) skips this task, so production is never resubmitted by a run that did
        not stop it. With the quiesce task's id it gives the trigger ids of this run's stop.
    :param quiesce_task_id: the task id of the quiesce whose stop this resume answers for.
    :param stop_timeout: seconds to wait for this run's stop to end when it is still in flight.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param lease_dir: the folder of production leases (templated; see ``QuiesceAndSavepointOperator``). Given, a
        resume that may touch production holds production's lease: a run that never held it never stopped
        production (skipped); a lease another run holds now is that run's production to resume (fails, touching
        nothing); production verified RUNNING releases it.
    :param lease_ttl: seconds the lease stays valid without renewal.
    """

    template_fields: Sequence[str] = (
        "program",
        "quiesce_result",
        "savepoint_path",
        "job_name",
        "production_job_id",
        "quiesce_mode",
        "lease_dir",
    )
    operator_extra_links = (FlinkJobLink(),)
    ui_color = "#e6f4ea"

    def __init__(
        self,
        *,
        program: FlinkPythonProgram | dict[str, Any],
        quiesce_result: dict[str, Any] | QuiesceResult | None = None,
        savepoint_path: str | None = None,
        job_name: str | None = None,
        allow_non_restored_state: bool = False,
        submitter: SubmitterKind = "rest",
        flink_conn_id: str = FlinkRestHook.default_conn_name,
        timeout: float = 300.0,
        poll_interval: float = 0.25,
        all_tasks_running: bool = True,
        cancel_on_kill: bool = False,
        production_job_id: str | None = None,
        quiesce_mode: str | None = None,
        quiesce_task_id: str = "quiesce",
        stop_timeout: float = 900.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        lease_dir: str | None = None,
        lease_ttl: float = DEFAULT_TTL_S,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.lease_dir = lease_dir
        self.lease_ttl = float(lease_ttl)
        self._lease: RunLease | None = None
        self.program = program.model_dump() if isinstance(program, FlinkPythonProgram) else program
        self.quiesce_result = (
            quiesce_result.model_dump(mode="json") if isinstance(quiesce_result, QuiesceResult) else quiesce_result
        )
        self.savepoint_path = savepoint_path
        self.job_name = job_name
        self.allow_non_restored_state = allow_non_restored_state
        self.submitter = submitter
        self.flink_conn_id = flink_conn_id
        self.timeout = float(timeout)
        self.poll_interval = float(poll_interval)
        self.all_tasks_running = all_tasks_running
        self.cancel_on_kill = cancel_on_kill
        self.production_job_id = production_job_id
        self.quiesce_mode = quiesce_mode
        self.quiesce_task_id = quiesce_task_id
        self.stop_timeout = float(stop_timeout)
        self.deferrable = deferrable
        self._submitted_job_id: str | None = None

    @cached_property
    def hook(self) -> FlinkRestHook:
        """The Flink REST hook."""
        return FlinkRestHook(self.flink_conn_id)

    def execute(self, context: Any) -> Any:
        """Reattach, or wait out this run's stop and submit from its savepoint; then wait until RUNNING."""
        if self.quiesce_mode == "existing":
            raise AirflowSkipException("quiesce_mode=existing: this run never stopped production, nothing to resume")
        if not (self.quiesce_result or self.production_job_id or self.savepoint_path):
            raise AirflowSkipException(
                "nothing to resume: no quiesce result, no production job id and no savepoint_path (the run failed "
                "before it identified production, so production was never stopped)"
            )
        hook = self.hook
        quiesce = QuiesceResult.model_validate(self.quiesce_result) if self.quiesce_result else None
        program = FlinkPythonProgram.model_validate(self.program)
        name = self.job_name or (quiesce.job_name if quiesce else None) or program.job_name
        stopped_at = quiesce.requested_at if quiesce else None
        job_id = quiesce.job_id if quiesce is not None else self.production_job_id

        in_window = self._resumed_in_window(context, hook, quiesce)
        if in_window is not None:
            self._release_lease(context, name, savepoint=in_window.get("savepoint_path"), why="resumed in the window")
            return in_window
        if quiesce is not None and not quiesce.production_stopped:
            self.log.info(
                "Quiesce mode %r never stopped production (job %s): nothing to resume", quiesce.mode, quiesce.job_id
            )
            running = hook.get_job(quiesce.job_id)
            return self._result(
                context,
                hook,
                job_id=quiesce.job_id,
                job_name=running.name,
                savepoint=quiesce.savepoint_path,
                submitted_at=datetime.now(UTC),
                running_at=datetime.now(UTC),
                stopped_at=None,
                reattached=True,
            )
        lease = self._production_lease(context, name)
        if lease is None:
            return self._bring_back(context, hook, quiesce, program, name, job_id, stopped_at)
        handed_over = self._hold_lease(lease, quiesce)
        if handed_over is not None:
            return handed_over
        job_id = (lease.record.job_id if lease.record else None) or job_id  # the job this run's quiesce stopped
        with lease.heartbeat():
            return self._bring_back(context, hook, quiesce, program, name, job_id, stopped_at)

    def _production_lease(self, context: Any, name: str | None) -> RunLease | None:
        """This task's hold on production's lease (created once), None without ``lease_dir``."""
        if self._lease is None:
            self._lease = run_lease(self.log, context, lease_dir=self.lease_dir, flink_url=self.hook.base_url,
                                    job_name=name, ttl_s=self.lease_ttl)  # fmt: skip
        return self._lease

    def _hold_lease(self, lease: RunLease, quiesce: QuiesceResult | None) -> Any:
        """Take production's lease for the resume (this run's own, renewed, or a free one). Returns the stop
        window's result when another run stopped production after this run's window resumed it (that run resumes
        it), None to go on.

        :raises AirflowSkipException: this run never held the lease, so it never stopped production.
        :raises AirflowFailException: another run holds the lease now: production is its to resume.
        """
        history = lease.history()
        if not lease.of_this_run(history):
            holder = lease.held_by_other()
            raise AirflowSkipException(
                "This run never held production's lease, so it never stopped production"
                + (f" (the lease is held by {holder.describe()}, which resumes it)" if holder else "")
                + ": nothing to resume"
            )
        resumed = quiesce.window.resumed if quiesce is not None and quiesce.window else None
        later = lease.others_since(history)
        if resumed is not None and later:
            self.log.warning("Production, resumed by this run's stop window as job %s, was stopped again since by %s, "
                             "which resumes it", resumed.job_id, later[-1].holder.describe())  # fmt: skip
            return resumed.model_dump(mode="json")
        if lease.acquire_now() is None:
            holder = lease.held_by_other()
            raise AirflowFailException(
                f"Production's lease is held by {holder.describe() if holder else 'another run'}, no longer by this "
                "run (its lease expired and was taken over): that run stops and resumes production, so this run does "
                "not resubmit it. Check that run's assert_production task"
            )
        return None

    def _release_lease(self, context: Any, name: str | None, *, savepoint: str | None, why: str) -> None:
        """Release production's lease (with ``lease_dir``) once production RUNS, pushing it (XCom ``lease``)."""
        lease = self._production_lease(context, name)
        if lease is not None and (done := lease.release(savepoint=savepoint, why=why)) is not None:
            lease.push(done.summary())

    def _bring_back(
        self,
        context: Any,
        hook: FlinkRestHook,
        quiesce: QuiesceResult | None,
        program: FlinkPythonProgram,
        name: str | None,
        job_id: str | None,
        stopped_at: datetime | None,
    ) -> Any:
        """Reattach to production, or resubmit it from this run's savepoint (production may be stopped)."""
        if name:
            # an earlier try of this task resubmitted production already: reattach (never a second copy)
            live = [j for j in hook.list_jobs().by_name(name, states=LIVE_STATES) if j.jid != job_id]
            if live:
                self.log.info("Production job %r already runs as %s: reattaching, not resubmitting", name, live[0].jid)
                return self._wait(
                    context,
                    hook,
                    live[0].jid,
                    name,
                    self._savepoint(quiesce),
                    datetime.now(UTC),
                    stopped_at,
                    reattached=True,
                )

        savepoint = self._savepoint(quiesce)
        if quiesce is None and job_id:
            # the quiesce task left no result (failed, timed out, killed): its stop may still be in flight
            outcome = self._stop_outcome(context, hook, job_id)
            if outcome.kept_running:
                self.log.info("No stop of this run took effect: production job %s still RUNS, reattaching", job_id)
                return self._wait(context, hook, job_id, name or "", None, datetime.now(UTC), None, reattached=True)
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
            hint = self._latest_savepoint_hint(hook, job_id)
            raise AirflowException(
                "ResumeJobOperator: no savepoint to resume from (the quiesce task produced no result, this run has "
                f"no savepoint of job {job_id} and no savepoint_path was given). Production is not running.{hint}"
            )
        return self._submit(context, hook, program, name, savepoint, stopped_at)

    def _resumed_in_window(self, context: Any, hook: FlinkRestHook, quiesce: QuiesceResult | None) -> Any:
        """The stop window's ``ResumeResult`` when the window resubmitted production and that job still RUNS."""
        resumed = quiesce.window.resumed if quiesce is not None and quiesce.window else None
        if resumed is None:
            return None
        job = hook.get_job(resumed.job_id)
        if job.state != "RUNNING":
            self.log.warning("Production job %s, resumed inside the stop window, is %s now", resumed.job_id, job.state)
            return None
        self.log.info(
            "Production job %s was resumed inside the stop window after %s s of downtime: nothing to do",
            resumed.job_id,
            resumed.downtime_seconds,
        )
        FlinkJobLink.persist(context, hook.job_ui_url(resumed.job_id))
        return resumed.model_dump(mode="json")

    def _stop_outcome(self, context: Any, hook: FlinkRestHook, job_id: str) -> StopOutcome:
        """What this run's stop did to ``job_id``, once it is no longer in flight (``FlinkRestHook.stop_outcome``)."""
        dag_id, run_id, _, _ = _ti_parts(context)
        mode = self.quiesce_mode if self.quiesce_mode in MODES else None
        ids = operation_trigger_ids(dag_id, run_id, self.quiesce_task_id, -1, job_id, mode) if mode else []
        try:
            return hook.stop_outcome(
                job_id,
                ids,
                run_path_segment(dag_id, run_id),
                stopping=mode != "savepoint",
                timeout=self.stop_timeout,
                poll_interval=max(self.poll_interval, 0.5),
            )
        except FlinkRestError as err:
            raise AirflowException(str(err)) from err

    def _submit(
        self,
        context: Any,
        hook: FlinkRestHook,
        program: FlinkPythonProgram,
        name: str | None,
        savepoint: str,
        stopped_at: datetime | None,
    ) -> Any:
        """Resubmit production from ``savepoint``. The metaspace guard never refuses it: production coming
        back wins (the quiesce checked the headroom before stopping)."""
        submitted = resubmit_production(
            hook,
            program,
            savepoint=savepoint,
            name=name,
            submitter=self.submitter,
            allow_non_restored_state=self.allow_non_restored_state,
            timeout=self.timeout,
        )
        self._submitted_job_id = submitted.job_id
        self.log.info(
            "Resubmitted production from %s as job %s (%s, %.1f s)",
            savepoint,
            submitted.job_id,
            submitted.submitter,
            submitted.seconds,
        )
        return self._wait(
            context, hook, submitted.job_id, name or "", savepoint, submitted.submitted_at, stopped_at, reattached=False
        )

    def _savepoint(self, quiesce: QuiesceResult | None) -> str | None:
        return self.savepoint_path or (quiesce.savepoint_path if quiesce else None)

    def _latest_savepoint_hint(self, hook: FlinkRestHook, job_id: str | None) -> str:
        if not job_id:
            return " Pass savepoint_path (the production job's latest savepoint is in the Flink UI)."
        try:
            latest = hook.get_checkpoints(job_id).latest_savepoint
        except FlinkRestError:
            latest = None
        return f" Latest savepoint of job {job_id}: {latest.external_path}" if latest else ""

    def _wait(
        self,
        context: Any,
        hook: FlinkRestHook,
        job_id: str,
        name: str,
        savepoint: str | None,
        submitted_at: datetime,
        stopped_at: datetime | None,
        *,
        reattached: bool,
    ) -> Any:
        FlinkJobLink.persist(context, hook.job_ui_url(job_id))
        carry: ResumeCarry = {
            "job_id": job_id,
            "job_name": name,
            "savepoint": savepoint,
            "submitted_at": submitted_at.isoformat(),
            "stopped_at": stopped_at.isoformat() if stopped_at else None,
            "reattached": reattached,
        }
        if self.deferrable:
            self.defer(
                trigger=FlinkJobStateTrigger(
                    job_id=job_id,
                    target_states=["RUNNING"],
                    flink_conn_id=self.flink_conn_id,
                    timeout=self.timeout,
                    poll_interval=self.poll_interval,
                    all_tasks_running=self.all_tasks_running,
                    # a killed deferred task cancels the job only if it submitted it and was asked to
                    cancel_on_kill=self.cancel_on_kill and not reattached,
                    carry=dict(carry),
                ),
                method_name="execute_complete",
            )
        try:
            job = hook.wait_for_job_state(
                job_id,
                ("RUNNING",),
                timeout=self.timeout,
                poll_interval=self.poll_interval,
                all_tasks_running=self.all_tasks_running,
            )
        except FlinkRestError as err:
            raise AirflowException(str(err)) from err
        return self._result(
            context,
            hook,
            job_id=job_id,
            job_name=name or job.name,
            savepoint=savepoint,
            submitted_at=submitted_at,
            running_at=datetime.now(UTC),
            stopped_at=stopped_at,
            reattached=reattached,
        )

    def execute_complete(self, context: Any, event: dict[str, Any], **kwargs: Any) -> Any:
        """Finish after the trigger: fail with the job's cause, or build the result."""
        carry = {**event.get("carry", {}), **kwargs}
        job_id, job_name, savepoint = carry["job_id"], carry["job_name"], carry["savepoint"]
        submitted_at, stopped_at, reattached = carry["submitted_at"], carry["stopped_at"], carry["reattached"]
        if event.get("status") != "success":
            raise AirflowException(event.get("message") or f"Resumed job {job_id} did not reach RUNNING: {event}")
        return self._result(
            context,
            self.hook,
            job_id=job_id,
            job_name=job_name or event.get("job", {}).get("name", ""),
            savepoint=savepoint,
            submitted_at=datetime.fromisoformat(submitted_at),
            running_at=datetime.fromisoformat(event["observed_at"]),
            stopped_at=datetime.fromisoformat(stopped_at) if stopped_at else None,
            reattached=reattached,
        )

    def _result(
        self,
        context: Any,
        hook: FlinkRestHook,
        *,
        job_id: str,
        job_name: str,
        savepoint: str | None,
        submitted_at: datetime,
        running_at: datetime,
        stopped_at: datetime | None,
        reattached: bool,
    ) -> dict[str, Any]:
        FlinkJobLink.persist(context, hook.job_ui_url(job_id))
        self._release_lease(context, self.job_name or job_name, savepoint=savepoint, why=f"job {job_id} RUNNING")
        result = ResumeResult(
            job_id=job_id,
            job_name=job_name,
            savepoint_path=savepoint,
            submitted_at=submitted_at,
            running_at=running_at,
            stopped_at=stopped_at,
            submitter=self.submitter,
            reattached=reattached,
        )
        downtime = result.downtime_seconds
        self.log.info(
            "Production job %s RUNNING again%s",
            job_id,
            f" after {downtime:.2f} s of downtime" if downtime is not None else "",
        )
        return result.model_dump(mode="json")

    def on_kill(self) -> None:
        """Cancel the job this task submitted, only with ``cancel_on_kill`` (production should stay up)."""
        if self.cancel_on_kill and self._submitted_job_id:
            self.log.warning("Cancelling job %s submitted by this task", self._submitted_job_id)
            self.hook.cancel_job(self._submitted_job_id)

"""Production's savepoint, or its stop with a savepoint, for one task instance (step 2 of the chain).

:class:`Quiesce` takes the Flink REST hook and plain values and returns typed results; it never defers, links a
page or pushes XCom: ``QuiesceAndSavepointOperator`` (``operators/flink.py``) wires it, waits in the triggerer
while Flink works, and pushes the :class:`QuiesceResult`. Modes: ``drain`` (stop with drain), ``stop`` (stop
without drain) and ``savepoint`` (production keeps running).

Idempotent on retry: the quiesce derives its Flink ``triggerId`` from (dag, run, task, map index, job, mode).
Flink acknowledges a repeated ``triggerId`` without starting a second savepoint/stop, so a retry reattaches to
the same operation; when Flink no longer remembers it, a completed savepoint of this run is found in the job's
checkpoint statistics (the savepoint lives in a per-run directory) and reused. It never stops or savepoints
twice and never falls back to a checkpoint. Before it stops production it checks that production's JobManager
has the metaspace headroom for the resubmission (which is never refused).

The same trigger ids let ``resume`` (:mod:`.resume`) find THIS run's stop, and production's lease
(:class:`ProductionLease`) keeps two runs from stopping one production at once.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from airflow_flink_replay.core.flink_models import (
    AGENT_OPERATOR_NAME,
    AsyncOperationStatus,
    CheckpointStats,
    JobDetails,
    ProductionPlan,
    QuiesceResult,
)
from airflow_flink_replay.core.production_lease import LeaseHolder, LeaseRecord, last_stop_before
from airflow_flink_replay.exceptions import FlinkOperationFailedError, LifecycleError, LifecycleRefusedError
from airflow_flink_replay.hooks.flink_savepoints import savepoint_in

if TYPE_CHECKING:
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook

__all__ = [
    "MAX_ATTEMPT_IDS",
    "MODES",
    "ProductionLease",
    "Quiesce",
    "QuiesceCarry",
    "Quiesced",
    "SavepointOperation",
    "TaskRun",
    "flink_time",
    "operation_name",
    "operation_trigger_id",
    "operation_trigger_ids",
    "run_path_segment",
    "savepoint_of_run",
]

MODES = ("drain", "stop", "savepoint")
#: How many distinct trigger ids one task instance may use (one per failed attempt of the operation).
MAX_ATTEMPT_IDS = 20
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_log = logging.getLogger(__name__)

#: What each mode's result says about the savepoint (``QuiesceResult.note``).
NOTES = {
    "drain": "Drained: every operator reached end of input before the savepoint (the agent operator finished its "
    "in-flight runs); production is stopped.",
    "stop": "Stopped without drain: event-time timers did not fire, and agent runs in flight at the barrier are "
    "inside the savepoint (Flink Agents 0.2.0 cannot restore one waiting on a tool response: KeyError "
    "initial_request_id — the run's assert_production step then fails naming the savepoint); production is stopped.",
    "savepoint": "Savepoint without stop: production keeps running and in-flight work may be inside the savepoint.",
}


def operation_trigger_id(
    dag_id: str, run_id: str, task_id: str, map_index: int, job_id: str, mode: str, attempt: int
) -> str:
    """A deterministic 32-hex Flink ``triggerId`` for one task instance's savepoint/stop (attempt ``n``)."""
    key = f"{dag_id}|{run_id}|{task_id}|{map_index}|{job_id}|{mode}|{attempt}"
    return hashlib.md5(key.encode(), usedforsecurity=False).hexdigest()


def operation_trigger_ids(dag_id: str, run_id: str, task_id: str, map_index: int, job_id: str, mode: str) -> list[str]:
    """Every trigger id one quiesce task instance may use, in attempt order (see :func:`operation_trigger_id`)."""
    return [operation_trigger_id(dag_id, run_id, task_id, map_index, job_id, mode, n) for n in range(MAX_ATTEMPT_IDS)]


def run_path_segment(dag_id: str, run_id: str) -> str:
    """``/<dag_id>/<run_id>/`` (sanitized): the per-run part of a quiesce savepoint's directory."""
    return f"/{_SAFE.sub('_', dag_id)}/{_SAFE.sub('_', run_id)}/"


def savepoint_of_run(stats: CheckpointStats, dag_id: str, run_id: str) -> str | None:
    """The newest completed savepoint of a job taken into this DAG run's quiesce directory, if any."""
    record = savepoint_in(stats, run_path_segment(dag_id, run_id))
    return record.external_path if record else None


def operation_name(mode: str) -> str:
    """Human name of the Flink operation of a quiesce mode."""
    return {"drain": "stop with savepoint (drain)", "stop": "stop with savepoint"}.get(mode, "savepoint")


def flink_time(ts: int | None) -> datetime | None:
    """A Flink epoch-millisecond timestamp as an aware datetime (None for Flink's "not set", 0 or -1)."""
    return datetime.fromtimestamp(ts / 1000, UTC) if ts and ts > 0 else None


@dataclass(frozen=True)
class TaskRun:
    """The task instance a lifecycle step runs as: its ids make this run's trigger ids and savepoint directory."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    try_number: int = 1

    @classmethod
    def of(cls, context: Any) -> TaskRun:
        """The task instance of an Airflow task context (its ``ti``)."""
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        try_number = int(getattr(ti, "try_number", 1) or 1)
        return cls(ti.dag_id, ti.run_id, ti.task_id, -1 if map_index is None else int(map_index), try_number)

    @property
    def retried(self) -> bool:
        """An earlier try of this task instance ran (and may have stopped production)."""
        return self.try_number > 1


class ProductionLease(Protocol):
    """This run's hold on production's lease, as the procedures read it (the operators' ``RunLease``)."""

    me: LeaseHolder
    record: LeaseRecord | None

    def history(self) -> list[LeaseRecord]: ...

    def of_this_run(self, history: list[LeaseRecord] | None = None) -> list[LeaseRecord]: ...

    def others_since(self, history: list[LeaseRecord]) -> list[LeaseRecord]: ...

    def held_by_other(self) -> LeaseRecord | None: ...

    def acquire_now(self, *, check_only: bool = False) -> LeaseRecord | None: ...

    def note_job(self, job_id: str) -> None: ...


class QuiesceCarry(TypedDict):
    """What ``QuiesceAndSavepointOperator.execute`` hands to ``execute_complete`` through the trigger's ``carry``."""

    trigger_id: str
    plan: dict[str, Any]  # ProductionPlan, JSON
    requested_at: str  # ISO timestamp
    reused: bool


@dataclass(frozen=True)
class SavepointOperation:
    """This run's savepoint/stop of production: still running in Flink (``location`` None: wait for
    ``trigger_id``), or complete (a savepoint at ``location``)."""

    trigger_id: str
    plan: ProductionPlan
    requested_at: datetime
    #: reattached to, or found, after an earlier try triggered it
    reused: bool
    location: str | None = None
    completed_at: datetime | None = None

    def carry(self) -> QuiesceCarry:
        """What the wait hands to the completion (the trigger's ``carry``)."""
        return {
            "trigger_id": self.trigger_id,
            "plan": self.plan.model_dump(mode="json"),
            "requested_at": self.requested_at.isoformat(),
            "reused": self.reused,
        }

    @classmethod
    def completed(
        cls, carry: QuiesceCarry | dict[str, Any], *, location: str, completed_at: datetime
    ) -> SavepointOperation:
        """The operation of ``carry`` once Flink completed it at ``location``."""
        return cls(
            trigger_id=carry["trigger_id"],
            plan=ProductionPlan.model_validate(carry["plan"]),
            requested_at=datetime.fromisoformat(carry["requested_at"]),
            reused=bool(carry["reused"]),
            location=location,
            completed_at=completed_at,
        )


@dataclass(frozen=True)
class Quiesced:
    """A finished quiesce: its result, and the state production's job was left in (None: not stopped)."""

    result: QuiesceResult
    job_state: str | None = None


@dataclass
class Quiesce:
    """One task instance's savepoint or stop of production (see the module's docstring).

    :param flink: the Flink REST hook.
    :param job_id: production's job id (a run that waited for production's lease may move to the job another run
        resumed: :meth:`job_after_lease_wait`).
    :param mode: ``drain`` | ``stop`` | ``savepoint``.
    :param task: the task instance (its ids make the trigger ids and the savepoint directory).
    :param target_directory: the savepoint base directory (None: the cluster's
        ``execution.checkpointing.savepoint-dir``); the savepoint goes to ``<base>/<dag_id>/<run_id>``.
    :param flink_conn_id: the Flink connection (named in the metaspace refusal).
    :param log: where the steps are logged (the task's log).
    """

    flink: FlinkRestHook
    job_id: str
    mode: str
    task: TaskRun
    target_directory: str | None = None
    format_type: str = "CANONICAL"
    timeout: float = 600.0
    poll_interval: float = 0.5
    agent_operator_name: str = AGENT_OPERATOR_NAME
    wait_for_finished: bool = True
    flink_conn_id: str = "flink_default"
    log: Any = _log
    #: production was (or may have been) stopped or savepointed by this task: a failure keeps the lease
    touched: bool = field(default=False, init=False)

    @property
    def operation(self) -> str:
        """Human name of the Flink operation of this mode."""
        return operation_name(self.mode)

    def run_directory(self) -> str:
        """This run's savepoint directory: ``<base>/<dag_id>/<run_id>``."""
        base = self.target_directory
        if not base:
            base = self.flink.get_jobmanager_config().get("execution.checkpointing.savepoint-dir")
            if not base:
                raise LifecycleError(
                    "QuiesceAndSavepointOperator: no target_directory given and the Flink cluster has no "
                    "execution.checkpointing.savepoint-dir; set target_directory"
                )
        return base.rstrip("/") + run_path_segment(self.task.dag_id, self.task.run_id).rstrip("/")

    def job_after_lease_wait(self, job: JobDetails, lease: ProductionLease) -> JobDetails:
        """Production's job once this run holds the lease. The run that held it before (while this one waited, or
        after this run's preflight) resumed production as a new job: on a first try, that job is quiesced."""
        if lease.record is not None and lease.record.waited_s > 0:
            job = self.flink.get_job(self.job_id)  # as it is now, after the wait
        if job.state == "RUNNING" or self.task.retried or lease.record is None:
            return job
        before = last_stop_before(lease.history(), lease.record.generation)
        running = [j.jid for j in self.flink.list_jobs().by_name(job.name, states=frozenset({"RUNNING"}))]
        if before is None or lease.me.same_run(before.holder) or len(running) != 1:
            return job
        self.log.warning(
            "Production's job changed while this run waited for its lease: job %s is %s; %s resumed production "
            "as job %s, which this run quiesces", self.job_id, job.state, before.holder.describe(), running[0],
        )  # fmt: skip
        self.job_id = running[0]
        lease.note_job(self.job_id)
        return self.flink.get_job(self.job_id)

    def start(self, job: JobDetails) -> SavepointOperation:
        """Trigger this run's savepoint/stop of ``job``, or reattach to the one an earlier try triggered (Flink
        still runs it), or find the savepoint an earlier try took (the operation is then complete).

        :raises LifecycleError: no savepoint directory; every attempt failed; the job does not RUN and has no
            savepoint of this run.
        :raises LifecycleRefusedError: production's JobManager could not take the resubmission after the stop.
        """
        plan = ProductionPlan.from_job(job, self.agent_operator_name)
        run_dir = self.run_directory()
        # A first try has nothing to reattach to: skip the look-ups (they cost REST calls before the stop).
        retried = self.task.retried
        self.touched = retried  # an earlier try may have stopped production
        trigger_id = operation_trigger_id(*self._instance(), self.job_id, self.mode, 0)
        if retried:
            # 1. Reattach to an operation of this task instance that Flink still remembers.
            trigger_id, status = self.reattachable()
            if status is not None:
                self.log.info("Reattaching to %s %s of job %s (earlier try)", self.operation, trigger_id, self.job_id)
                return SavepointOperation(trigger_id, plan, requested_at=datetime.now(UTC), reused=True)

        # 2. Flink forgot the operation: a savepoint of this run in the job's statistics is reused.
        existing = self.flink.run_savepoint(self.job_id, run_dir) if retried else None
        if existing is not None and existing.external_path:
            self.log.info("Reusing savepoint %s of this run (taken by an earlier try)", existing.external_path)
            return SavepointOperation(
                trigger_id,
                plan,
                requested_at=flink_time(existing.trigger_timestamp) or datetime.now(UTC),
                reused=True,
                location=str(existing.external_path),
                completed_at=flink_time(existing.latest_ack_timestamp) or datetime.now(UTC),
            )
        if job.state != "RUNNING":
            raise LifecycleError(
                f"Flink job {self.job_id} is {job.state} and has no savepoint of this run under {run_dir}; "
                "a savepoint needs a RUNNING job. Resume it from a known savepoint, or point job_id at the "
                "running production job"
            )
        return self._trigger(plan, run_dir, trigger_id)

    def _trigger(self, plan: ProductionPlan, run_dir: str, trigger_id: str) -> SavepointOperation:
        """3. Trigger once, only when production could be resubmitted afterwards."""
        if self.mode != "savepoint":
            self.check_room_for_resume()
        requested_at = datetime.now(UTC)
        self.touched = True
        if self.mode == "savepoint":
            self.flink.trigger_savepoint(self.job_id, run_dir, format_type=self.format_type, trigger_id=trigger_id)
        else:
            self.flink.stop_with_savepoint(
                self.job_id, run_dir, drain=self.mode == "drain", format_type=self.format_type, trigger_id=trigger_id
            )
        self.log.info("Triggered %s of job %s into %s (trigger %s)", self.operation, self.job_id, run_dir, trigger_id)
        return SavepointOperation(trigger_id, plan, requested_at=requested_at, reused=False)

    def _instance(self) -> tuple[str, str, str, int]:
        return self.task.dag_id, self.task.run_id, self.task.task_id, self.task.map_index

    def reattachable(self) -> tuple[str, AsyncOperationStatus | None]:
        """(trigger id, status) of an in-progress or successful operation of an earlier try, or
        (the first unused trigger id, None). A failed operation moves on to the next attempt's id."""
        ids = operation_trigger_ids(*self._instance(), self.job_id, self.mode)
        try:
            return self.flink.find_operation(self.job_id, ids)
        except FlinkOperationFailedError as err:
            raise LifecycleError(
                f"{MAX_ATTEMPT_IDS} {self.operation} attempts of job {self.job_id} failed: {err}"
            ) from err

    def check_room_for_resume(self) -> None:
        """Refuse to stop production when its JobManager could not take the resubmission afterwards.

        Resuming production runs a Python submission on production's JobManager, and that submission
        is never refused (bringing production back wins over the metaspace guard). So the guard runs
        here, before anything is stopped: below the connection's ``min_metaspace_headroom_mb`` of free
        metaspace, the resubmission could kill the JobManager, and production with it.
        """
        memory = self.flink.metaspace_short()
        if memory is not None:
            headroom = self.flink.settings.min_metaspace_headroom_mb
            raise LifecycleRefusedError(
                f"Production was NOT stopped: its JobManager at {self.flink.base_url} has "
                f"{memory.metaspace_free_mb:.0f} MB of metaspace "
                f"free ({memory.metaspace_used / 2**20:.0f} of {memory.metaspace_max / 2**20:.0f} MB used), less "
                f"than the {headroom:g} MB (min_metaspace_headroom_mb of connection {self.flink_conn_id!r}) that "
                "resubmitting production after the savepoint needs; that resubmission could kill the JobManager "
                "(OutOfMemoryError: Metaspace) with production on it. Fix: restart production's JobManager in a "
                "maintenance window (or raise jobmanager.memory.jvm-metaspace.size), then run the replay again; "
                "see docs/real-cluster.md#jobmanager-metaspace"
            )

    def wait(self, operation: SavepointOperation) -> SavepointOperation:
        """Wait here (not in the triggerer) until Flink completed ``operation``; a failure or a timeout raises
        Flink's error (:class:`~airflow_flink_replay.exceptions.FlinkRestError`)."""
        location = self.flink.wait_for_savepoint(
            self.job_id,
            operation.trigger_id,
            timeout=self.timeout,
            poll_interval=self.poll_interval,
            operation=self.operation,
        )
        return replace(operation, location=location, completed_at=datetime.now(UTC))

    def finish(self, operation: SavepointOperation) -> Quiesced:
        """The result of a completed operation; in ``drain``/``stop`` mode once the job is FINISHED (with
        ``wait_for_finished``), else as it is now."""
        if operation.location is None or operation.completed_at is None:
            raise ValueError(f"the {self.operation} {operation.trigger_id} is not complete yet")
        stopped = self.mode in ("drain", "stop")
        stopped_at = state = None
        if stopped:
            if self.wait_for_finished:
                job = self.flink.wait_for_job_state(self.job_id, ("FINISHED",), timeout=60, poll_interval=0.05)
            else:
                job = self.flink.get_job(self.job_id)
            stopped_at, state = flink_time(job.end_time), job.state
        note = NOTES[self.mode]
        result = QuiesceResult(
            job_id=self.job_id,
            job_name=operation.plan.job_name,
            mode=self.mode,  # type: ignore[arg-type]
            savepoint_path=operation.location,
            format_type=self.format_type,  # type: ignore[arg-type]
            trigger_id=operation.trigger_id,
            requested_at=operation.requested_at,
            savepoint_completed_at=operation.completed_at,
            job_stopped_at=stopped_at,
            production_stopped=stopped,
            in_flight_work_possible=self.mode == "savepoint",
            reused=operation.reused,
            plan=operation.plan,
            note=note,
        )
        self.log.info("%s of job %s: %s (%s)", self.operation, self.job_id, operation.location, note)
        return Quiesced(result, job_state=state)

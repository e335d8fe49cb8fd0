"""Savepoint and stop-with-savepoint procedures over the Flink REST hook: wait for one, find one run's.

Flink's savepoint and stop calls are asynchronous: a trigger returns an id, its status is polled, and the
outcome has to be interpreted (a COMPLETED operation may have failed; Flink forgets an operation after
``rest.async.store-duration``, and then the savepoint is found in the job's checkpoint statistics). These
multi-step procedures are plain functions that take a
:class:`~airflow_flink_replay.hooks.flink_rest.FlinkRestHook` and call only its endpoint methods
(``get_savepoint_status``, ``operation_status``, ``get_checkpoints``, ``get_job``, ``wait_for_job_state``), so
the hook stays one method per endpoint. The hook keeps one-line methods of the same names
(``hook.stop_outcome(...)``) for the operators; the triggers use the error builders here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_flink_replay.core.flink_models import AsyncOperationStatus, CheckpointRecord, CheckpointStats
from airflow_flink_replay.core.manifest_io import normalized_location
from airflow_flink_replay.exceptions import (
    FlinkJobNotFoundError,
    FlinkOperationFailedError,
    FlinkOperationTimeoutError,
    FlinkRestError,
)
from airflow_flink_replay.hooks.flink_rest_base import flink_cause

if TYPE_CHECKING:
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook


@dataclass(frozen=True)
class StopOutcome:
    """What became of one quiesce task's stop-with-savepoint (:func:`stop_outcome`).

    ``job_state`` is the stopped job's state once no stop of the task is in flight (``UNKNOWN`` when the
    cluster no longer knows the job); ``savepoint`` the savepoint of this run, if the stop produced one.
    """

    job_id: str
    job_state: str
    trigger_id: str
    savepoint: str | None
    end_time: int | None = None  # epoch ms, when the job ended

    @property
    def kept_running(self) -> bool:
        """The job still runs once no operation of this run is in flight: reattach, never resubmit."""
        return self.job_state == "RUNNING"


def savepoint_in(stats: CheckpointStats, directory: str) -> CheckpointRecord | None:
    """The newest completed savepoint in ``stats`` whose location lies inside ``directory`` (a whole
    directory or only its trailing segments, e.g. ``/<dag>/<run>/``), matched segment by segment."""
    wanted = "/" + normalized_location(directory).strip("/") + "/"
    for record in stats.savepoints():
        if record.external_path and wanted in "/" + normalized_location(record.external_path).lstrip("/") + "/":
            return record
    return None


def savepoint_location_or_raise(status: AsyncOperationStatus, job_id: str, trigger_id: str, operation: str) -> str:
    """The location of a COMPLETED savepoint, or :class:`FlinkOperationFailedError` with Flink's cause."""
    if status.succeeded:
        return str(status.location)
    cause = flink_cause(status.failure_cause) or "Flink reported no location"
    raise FlinkOperationFailedError(
        f"Flink {operation} of job {job_id} failed (trigger {trigger_id}); no checkpoint is used instead. "
        f"Cause: {cause}",
        operation=operation,
        job_id=job_id,
        cause=cause,
        details=status.failure_cause,
    )


def savepoint_timeout_error(job_id: str, trigger_id: str, operation: str, timeout: float) -> FlinkOperationTimeoutError:
    """The error for a savepoint/stop that did not complete within ``timeout`` seconds."""
    return FlinkOperationTimeoutError(
        f"Flink {operation} of job {job_id} did not complete within {timeout:g} s (trigger {trigger_id}); "
        "no checkpoint is used instead. Raise the timeout, or make the job's barriers faster (small "
        "python.fn-execution.bundle.size / bundle.time)",
        operation=operation,
        job_id=job_id,
    )


def wait_for_savepoint(
    hook: FlinkRestHook,
    job_id: str,
    trigger_id: str,
    *,
    timeout: float = 300.0,
    poll_interval: float = 0.3,
    operation: str = "savepoint",
) -> str:
    """Poll a savepoint/stop trigger until COMPLETED; returns the location. A failure raises
    :class:`FlinkOperationFailedError` with Flink's cause, a timeout :class:`FlinkOperationTimeoutError`."""
    deadline = time.monotonic() + timeout
    while True:
        status = hook.get_savepoint_status(job_id, trigger_id)
        if status.status == "COMPLETED":
            return savepoint_location_or_raise(status, job_id, trigger_id, operation)
        if time.monotonic() >= deadline:
            raise savepoint_timeout_error(job_id, trigger_id, operation, timeout)
        time.sleep(poll_interval)


def find_operation(
    hook: FlinkRestHook, job_id: str, trigger_ids: Iterable[str]
) -> tuple[str, AsyncOperationStatus | None]:
    """The operation of one task instance among its per-attempt ``trigger_ids`` (in attempt order).

    Returns (id, status) of the first that is in progress or succeeded; a failed one moves on to the
    next attempt's id; the first id Flink does not know ends the search as (that id, ``None``): the id
    a new attempt uses. Raises :class:`FlinkOperationFailedError` when every id was used and failed.
    """
    last: tuple[str, AsyncOperationStatus | None] | None = None
    for trigger_id in trigger_ids:
        status = hook.operation_status(job_id, trigger_id)
        if status is None or status.status == "IN_PROGRESS" or status.succeeded:
            return trigger_id, status
        hook.log.warning(
            "savepoint/stop %s of job %s failed: %s", trigger_id, job_id, flink_cause(status.failure_cause)
        )
        last = (trigger_id, status)
    cause = flink_cause(last[1].failure_cause) if last and last[1] else "no attempt id given"
    raise FlinkOperationFailedError(
        f"every savepoint/stop attempt of job {job_id} failed (last trigger {last[0] if last else '-'}): {cause}",
        operation="savepoint status",
        job_id=job_id,
        cause=cause,
    )


def run_savepoint(
    hook: FlinkRestHook, job_id: str, directory: str, *, attempts: int = 1, interval: float = 1.5
) -> CheckpointRecord | None:
    """The newest completed savepoint of ``job_id`` inside ``directory``, from the job's checkpoint
    statistics (where a savepoint is found after Flink forgot the operation that took it).

    ``directory`` is a quiesce's run directory (``file:///sp/<dag>/<run>``) or only its per-run part
    (``/<dag>/<run>/``): a savepoint matches when its location contains it as whole path segments.
    Flink caches the statistics for ``web.refresh-interval`` (3 s): ``attempts`` > 1 looks again every
    ``interval`` seconds. An unreadable job (unknown, REST error) has none.
    """
    for attempt in range(max(1, attempts)):
        try:
            found = savepoint_in(hook.get_checkpoints(job_id), directory)
        except FlinkRestError:
            return None
        if found:
            return found
        if attempt + 1 < attempts:
            time.sleep(interval)
    return None


def stop_outcome(
    hook: FlinkRestHook,
    job_id: str,
    trigger_ids: Iterable[str],
    run_directory: str,
    *,
    stopping: bool = True,
    timeout: float = 600.0,
    poll_interval: float = 0.5,
) -> StopOutcome:
    """What became of the stop-with-savepoint of ``job_id`` that one quiesce task triggered.

    ``trigger_ids`` are that task's deterministic per-attempt ids, ``run_directory`` its savepoint
    directory (or the per-run part of it). A job that is RUNNING while one of these stops is in flight
    is not "running": this waits (``timeout``) until the operation ended, then reports either
    ``kept_running`` (no stop succeeded and the job still runs: reattach) or ``stopped`` with the
    savepoint it produced (found by the operation, or in the job's statistics when Flink forgot it).
    A stopped job without a savepoint of this run has ``savepoint=None``. ``stopping=False`` (a
    savepoint-only quiesce) does not wait for the job to finish after its savepoint. Raises
    :class:`FlinkOperationTimeoutError` when the operation is still in progress at the deadline.
    """
    ids = list(trigger_ids)
    deadline = time.monotonic() + timeout
    trigger_id, status = find_operation(hook, job_id, ids) if ids else ("", None)
    while status is not None and status.status == "IN_PROGRESS":
        if time.monotonic() >= deadline:
            raise FlinkOperationTimeoutError(
                f"the stop-with-savepoint {trigger_id} of job {job_id} is still in progress after {timeout:g} s: "
                "production may still be stopping. Fix: wait for it (Flink UI, checkpoints tab) and run the "
                "resume again, which reattaches to it",
                operation="stop with savepoint",
                job_id=job_id,
            )
        hook.log.info("stop %s of job %s still in progress: waiting before resuming", trigger_id, job_id)
        time.sleep(poll_interval)
        trigger_id, status = find_operation(hook, job_id, ids)
    savepoint = str(status.location) if status is not None and status.succeeded else None
    try:
        job = hook.get_job(job_id)
    except FlinkJobNotFoundError:
        return StopOutcome(job_id, "UNKNOWN", trigger_id, savepoint)
    if stopping and savepoint is not None and job.state not in ("FINISHED", "FAILED", "CANCELED"):
        # the savepoint is complete; the job finishes its tasks right after (~seconds)
        remaining = max(5.0, deadline - time.monotonic())
        with contextlib.suppress(FlinkRestError):
            job = hook.wait_for_job_state(job_id, ("FINISHED",), timeout=remaining, poll_interval=poll_interval)
    if savepoint is None and job.state != "RUNNING":
        # Flink forgot the operation, or this is a job that ended some other way: the statistics tell
        record = run_savepoint(hook, job_id, run_directory, attempts=3)
        savepoint = record.external_path if record else None
    return StopOutcome(job_id, job.state, trigger_id, savepoint, job.end_time if job.end_time > 0 else None)

"""Deferrable waiting on Flink: async savepoint/stop operations and job states.

Both triggers poll the REST API with ``aiohttp`` (through :class:`FlinkRestHook`'s async twin), never block
the triggerer's loop, ``serialize()`` to their class path and kwargs, and are bounded by an absolute
deadline (kept across serialization, so a triggerer restart does not extend the wait).

**The ``carry`` contract.** Each trigger takes a ``carry`` dict and echoes it, unchanged, under
``event["carry"]`` in every event it fires (success, error and timeout alike). It is how a deferring
operator hands what ``execute`` knew to ``execute_complete``: the keys belong to that operator (its
``*Carry`` TypedDict, e.g. ``operators.flink.ResumeCarry``), the trigger never reads them, and the values
must be JSON-able (they are serialized with the trigger). Deferral ``kwargs`` are not used for this because
``dag.test()`` in Airflow 3.3 drops them when it runs a trigger inline.

**Cleanup on kill.** When a user kills a deferred task (mark failed/success, clear), the triggerer of
Airflow 3.3 cancels the trigger with a user-action message and awaits its ``on_kill()``; it does not call
``on_kill()`` when the triggerer merely restarts or hands the trigger to another triggerer, nor on the
trigger's timeout — the job must survive those, since the task resumes waiting on it.
:class:`FlinkJobStateTrigger` cancels the job it waits on there when built with ``cancel_on_kill=True``
(the replay operator does; production's resume does not). :class:`FlinkAsyncOperationTrigger` has nothing
to clean up: Flink cannot abort a savepoint or undo a stop over REST, and the deterministic trigger id
lets a retry reattach to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_flink_replay.exceptions import FlinkRestError
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
from airflow_flink_replay.hooks.flink_rest_base import flink_cause
from airflow_flink_replay.hooks.flink_savepoints import savepoint_timeout_error

_FINAL = ("FAILED", "CANCELED", "FINISHED", "SUSPENDED")


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


class FlinkAsyncOperationTrigger(BaseTrigger):
    """Waits until a savepoint or stop-with-savepoint trigger completes.

    Fires one event: ``{"status": "success", "location", ...}``, ``{"status": "error", "message",
    "failure_cause"}`` (Flink's cause) or ``{"status": "timeout", "message"}``.

    :param job_id: the Flink job.
    :param request_id: the savepoint/stop trigger id (Flink's ``request-id``). Not called ``trigger_id``:
        the triggerer sets ``BaseTrigger.trigger_id`` to its own database id.
    :param operation: what is awaited, for messages ("savepoint", "stop with savepoint (drain)", ...).
    :param flink_conn_id: the Flink REST connection.
    :param timeout: seconds from creation; ignored when ``deadline`` is given.
    :param deadline: absolute epoch seconds after which the wait ends with ``timeout``.
    :param poll_interval: seconds between polls.
    :param carry: JSON-able data echoed in every event (``event["carry"]``): what the operator needs to
        finish in ``execute_complete``, independent of how the deferral's kwargs travel.
    """

    def __init__(
        self,
        job_id: str,
        request_id: str,
        operation: str = "savepoint",
        flink_conn_id: str = FlinkRestHook.default_conn_name,
        timeout: float = 600.0,
        deadline: float | None = None,
        poll_interval: float = 0.5,
        carry: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.carry = dict(carry or {})
        self.job_id = job_id
        self.request_id = request_id
        self.operation = operation
        self.flink_conn_id = flink_conn_id
        self.timeout = float(timeout)
        self.deadline = float(deadline) if deadline is not None else time.time() + self.timeout
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and kwargs."""
        return (
            f"{self.__class__.__module__}.{self.__class__.__qualname__}",
            {
                "job_id": self.job_id,
                "request_id": self.request_id,
                "operation": self.operation,
                "flink_conn_id": self.flink_conn_id,
                "timeout": self.timeout,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "carry": self.carry,
            },
        )

    def _base(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "request_id": self.request_id, "operation": self.operation, "carry": self.carry}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll ``GET /jobs/{id}/savepoints/{trigger}`` until COMPLETED or the deadline."""
        hook = FlinkRestHook(self.flink_conn_id)
        try:
            async with hook.async_session() as session:
                while True:
                    status = await hook.aget_savepoint_status(session, self.job_id, self.request_id)
                    if status.status == "COMPLETED":
                        if status.succeeded:
                            yield TriggerEvent(
                                {
                                    **self._base(),
                                    "status": "success",
                                    "location": status.location,
                                    "completed_at": _now_iso(),
                                }
                            )
                        else:
                            cause = flink_cause(status.failure_cause) or "Flink reported no location"
                            yield TriggerEvent(
                                {
                                    **self._base(),
                                    "status": "error",
                                    "failure_cause": cause,
                                    "message": f"Flink {self.operation} of job {self.job_id} failed (trigger "
                                    f"{self.request_id}); no checkpoint is used instead. Cause: {cause}",
                                }
                            )
                        return
                    if time.time() >= self.deadline:
                        err = savepoint_timeout_error(self.job_id, self.request_id, self.operation, self.timeout)
                        yield TriggerEvent({**self._base(), "status": "timeout", "message": str(err)})
                        return
                    await asyncio.sleep(min(self.poll_interval, max(self.deadline - time.time(), 0.01)))
        except FlinkRestError as err:
            yield TriggerEvent({**self._base(), "status": "error", "message": str(err)})


class FlinkJobStateTrigger(BaseTrigger):
    """Waits until a job reaches one of ``target_states``; FAILED/CANCELED (not targeted) end it with the cause.

    Fires ``{"status": "success", "state", "observed_at", "job"}``, ``{"status": "error", "state",
    "message"}`` or ``{"status": "timeout", "state", "message"}``.

    :param job_id: the Flink job.
    :param target_states: e.g. ``["RUNNING"]`` or ``["FINISHED"]``.
    :param all_tasks_running: for RUNNING, also wait until every vertex is RUNNING (records flow again).
    :param cancel_on_kill: cancel the job when a user kills the deferred task (``on_kill``). Only for a job
        the deferring task owns (a replay): off by default, because production must stay up.
    :param carry: JSON-able data echoed in every event (``event["carry"]``; see the module doc).
    """

    def __init__(
        self,
        job_id: str,
        target_states: list[str] | tuple[str, ...] = ("RUNNING",),
        flink_conn_id: str = FlinkRestHook.default_conn_name,
        timeout: float = 600.0,
        deadline: float | None = None,
        poll_interval: float = 0.5,
        all_tasks_running: bool = False,
        cancel_on_kill: bool = False,
        carry: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.carry = dict(carry or {})
        self.job_id = job_id
        self.cancel_on_kill = bool(cancel_on_kill)
        self._fired = False
        self.target_states = [str(s).upper() for s in target_states]
        self.flink_conn_id = flink_conn_id
        self.timeout = float(timeout)
        self.deadline = float(deadline) if deadline is not None else time.time() + self.timeout
        self.poll_interval = float(poll_interval)
        self.all_tasks_running = bool(all_tasks_running)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and kwargs."""
        return (
            f"{self.__class__.__module__}.{self.__class__.__qualname__}",
            {
                "job_id": self.job_id,
                "target_states": list(self.target_states),
                "flink_conn_id": self.flink_conn_id,
                "timeout": self.timeout,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "all_tasks_running": self.all_tasks_running,
                "cancel_on_kill": self.cancel_on_kill,
                "carry": self.carry,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll ``GET /jobs/{id}`` until a target state, a final state or the deadline."""
        hook = FlinkRestHook(self.flink_conn_id)
        state = "UNKNOWN"
        try:
            async with hook.async_session() as session:
                while True:
                    job = await hook.aget_job(session, self.job_id)
                    state = job.state
                    reached = state in self.target_states and (
                        state != "RUNNING" or not self.all_tasks_running or job.all_vertices_running
                    )
                    if reached:
                        self._fired = True
                        yield TriggerEvent(
                            {
                                "status": "success",
                                "job_id": self.job_id,
                                "carry": self.carry,
                                "state": state,
                                "observed_at": _now_iso(),
                                "job": job.model_dump(mode="json", by_alias=True),
                            }
                        )
                        return
                    if state in _FINAL:
                        cause = await hook.ajob_failure_cause(session, self.job_id)
                        self._fired = True
                        yield TriggerEvent(
                            {
                                "status": "error",
                                "job_id": self.job_id,
                                "carry": self.carry,
                                "state": state,
                                "message": f"Flink job {self.job_id} ended {state} while waiting for "
                                f"{self.target_states}: {cause or 'no exception recorded'}",
                            }
                        )
                        return
                    if time.time() >= self.deadline:
                        self._fired = True
                        yield TriggerEvent(
                            {
                                "status": "timeout",
                                "job_id": self.job_id,
                                "carry": self.carry,
                                "state": state,
                                "message": f"Flink job {self.job_id} did not reach {self.target_states} within "
                                f"{self.timeout:g} s (state {state})",
                            }
                        )
                        return
                    await asyncio.sleep(min(self.poll_interval, max(self.deadline - time.time(), 0.01)))
        except FlinkRestError as err:
            self._fired = True
            yield TriggerEvent(
                {"status": "error", "job_id": self.job_id, "carry": self.carry, "state": state, "message": str(err)}
            )

    async def on_kill(self) -> None:
        """A user killed the deferred task: with ``cancel_on_kill``, cancel the job (``PATCH /jobs/{id}``).

        Called by Airflow 3.3's triggerer for user actions only (see the module doc). Nothing is cancelled
        after this trigger fired its event (the task owns the job again) or without ``cancel_on_kill``.
        The cancel is the hook's ``cancel_job`` (idempotent, so retried) in a thread: the triggerer's loop
        never waits on it. A job that already ended is left alone. Errors are logged, never raised: the
        run's ``cancel_leftover_replays`` task cancels whatever is left.
        """
        if not self.cancel_on_kill or self._fired:
            return
        self.log.warning("Deferred task killed: cancelling Flink job %s it was waiting on", self.job_id)
        hook = FlinkRestHook(self.flink_conn_id)
        try:
            await hook.asettings()  # the connection, looked up the triggerer's async way
            await asyncio.to_thread(hook.cancel_job, self.job_id)
        except Exception:
            self.log.exception("Could not cancel Flink job %s; it may still run", self.job_id)
        else:
            self.log.info("Cancelled Flink job %s", self.job_id)

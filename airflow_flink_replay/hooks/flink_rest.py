"""Hook for the Flink REST API (connection type ``flink_rest``): one method per endpoint.

:class:`FlinkRestHook` holds the endpoints (cluster, jobs, checkpoints, savepoint/stop triggers and status,
jars, JobManager config, logs and memory) and their async twins for the triggers. Everything below an
endpoint is the transport's, :class:`~airflow_flink_replay.hooks.flink_rest_base.BaseFlinkRestHook`: the
connection's settings, the ``requests`` and ``aiohttp`` sessions and the one retry policy both use (which
calls are resent, when a call that may have reached Flink fails with :class:`FlinkOutcomeUnknownError`
instead). The savepoint/stop procedures (poll a trigger, find this run's operation or savepoint, what a stop
did) are functions over this hook in :mod:`airflow_flink_replay.hooks.flink_savepoints`.
Every error is a :class:`FlinkRestError` naming the operation, the job id and Flink's own cause, never a bare
HTTP status. Secrets are never logged: only the method and the URL (which never carries credentials) are.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_flink_replay.core.flink_models import (
    TERMINAL_STATES,
    AsyncOperationStatus,
    CheckpointedJob,
    CheckpointRecord,
    CheckpointStats,
    ClusterOverview,
    JarFile,
    JobDetails,
    JobExceptions,
    JobManagerMemory,
    JobPlan,
    JobsOverview,
)
from airflow_flink_replay.exceptions import (
    FlinkJobFailedError,
    FlinkJobNotFoundError,
    FlinkOperationFailedError,
    FlinkOperationTimeoutError,
    FlinkOutcomeUnknownError,
    FlinkRestError,
    FlinkUnreachableError,
)
from airflow_flink_replay.hooks import flink_savepoints
from airflow_flink_replay.hooks.flink_rest_base import BaseFlinkRestHook, FlinkRestSettings
from airflow_flink_replay.hooks.flink_savepoints import StopOutcome

#: PythonDriver: the entry class that runs a Python Flink program from the flink-python jar.
PYTHON_DRIVER = "org.apache.flink.client.python.PythonDriver"
#: Flink web UI routes: ``/#/job/running/<id>`` for live jobs, ``/#/job/completed/<id>`` once the job is in a
#: globally terminal state (Flink 2.2's dashboard marks exactly these as "completed").
UI_COMPLETED_STATES = frozenset({"FINISHED", "FAILED", "CANCELED"})

# The errors (FlinkRestError and its subclasses) live in airflow_flink_replay.exceptions and FlinkRestSettings
# (this hook's ``settings`` parameter) in flink_rest_base; imported above, so importing them from here
# (airflow_flink_replay.hooks.flink_rest) keeps working.
__all__ = [
    "PYTHON_DRIVER",
    "UI_COMPLETED_STATES",
    "FlinkJobFailedError",
    "FlinkJobNotFoundError",
    "FlinkOperationFailedError",
    "FlinkOperationTimeoutError",
    "FlinkOutcomeUnknownError",
    "FlinkRestError",
    "FlinkRestHook",
    "FlinkRestSettings",
    "FlinkUnreachableError",
]

#: A Flink duration setting: a number and an optional unit (none: milliseconds).
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
#: Seconds per unit of a Flink duration setting.
_DURATION_UNITS = {"": 0.001, "ms": 0.001, "milli": 0.001, "millis": 0.001, "millisecond": 0.001,
                   "milliseconds": 0.001, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
                   "min": 60.0, "m": 60.0, "minute": 60.0, "minutes": 60.0}


class FlinkRestHook(BaseFlinkRestHook):
    """Talks to a Flink cluster's REST endpoint (JobManager, port 8081 by default): one method per endpoint.

    Connection fields: ``host`` is the REST base URL (``http://127.0.0.1:8081``) or a host name with
    ``schema`` (http/https) and ``port``; ``login``/``password`` give basic auth; extra
    ``{"bearer_token": ..., "verify": true|false|"/ca.pem", "timeout": 30, "retries": 3,
    "backoff_factor": 0.5}``; for submitting Python jobs from this worker ``{"flink_home": ...,
    "python_jar": ..., "flink_conf_dir": ..., "java_home": ..., "min_metaspace_headroom_mb": 96}``; on several
    Airflow hosts ``{"submission_lease_uri": "file:///shared/flink-replay-leases"}`` (a folder every worker reaches, or
    ``s3://<aws_conn_id>@bucket/prefix``): one Python program at a time on this JobManager across hosts.

    :param flink_conn_id: the Airflow connection id.
    :param retries: retries on connection errors and 502/503/504 (overrides the connection's extra).
    :param timeout: per-call timeout in seconds (overrides the connection's extra).
    :param settings: resolved settings; when given no Airflow connection is looked up (scripts, tests).
    """

    hook_name = "Flink REST"

    def job_ui_url(self, job_id: str, state: str | None = None) -> str:
        """The Flink web UI page of a job: ``#/job/completed/...`` for a FINISHED/FAILED/CANCELED job (the
        dashboard shows ended jobs only there), ``#/job/running/...`` otherwise (``state`` unknown too)."""
        section = "completed" if (state or "").upper() in UI_COMPLETED_STATES else "running"
        return f"{self.base_url}/#/job/{section}/{job_id}/overview"

    # ---------------------------------------------------------------------------------- cluster/jobs

    def get_overview(self) -> ClusterOverview:
        """``GET /overview``."""
        return ClusterOverview.model_validate(self._request("GET", "/overview", operation="cluster overview"))

    def list_jobs(self) -> JobsOverview:
        """``GET /jobs/overview``."""
        return JobsOverview.model_validate(self._request("GET", "/jobs/overview", operation="jobs overview"))

    def get_job(self, job_id: str) -> JobDetails:
        """``GET /jobs/{id}`` (raises :class:`FlinkJobNotFoundError` for an unknown id)."""
        data = self._request("GET", f"/jobs/{job_id}", operation="get job", job_id=job_id)
        return JobDetails.model_validate(data)

    def _running_times(self, job: JobDetails) -> list[int]:
        """Each subtask's RUNNING timestamp (epoch ms; 0 for one that has none), by Flink's own times
        (``GET /jobs/{id}/vertices/{vid}/subtasktimes``)."""
        times: list[int] = []
        for vertex in job.vertices:
            data = self._request("GET", f"/jobs/{job.jid}/vertices/{vertex.id}/subtasktimes",
                                 operation="subtask times", job_id=job.jid)
            times += [int((s.get("timestamps") or {}).get("RUNNING") or 0) for s in data.get("subtasks") or []]
        return times

    def all_running_since(self, job: JobDetails) -> datetime | None:
        """When the last subtask of ``job`` (every vertex RUNNING) started RUNNING, by Flink's own timestamps:
        the REST API serves job states from a cache up to ``web.refresh-interval`` old (3 s by default), so a
        poll sees RUNNING late. None when a subtask has no RUNNING time."""
        times = self._running_times(job)
        if not times or min(times) <= 0:
            return None
        return datetime.fromtimestamp(max(times) / 1000, UTC)

    def first_running_at(self, job: JobDetails) -> datetime | None:
        """When the first subtask of ``job`` started RUNNING, by Flink's own timestamps; None when none has."""
        started = [t for t in self._running_times(job) if t > 0]
        return datetime.fromtimestamp(min(started) / 1000, UTC) if started else None

    def rest_cache_seconds(self) -> float:
        """How old a job state the REST API may serve: ``web.refresh-interval`` (milliseconds, or a duration such
        as ``3 s``; Flink's default 3 s when absent or unreadable)."""
        value = str(self.get_jobmanager_config().get("web.refresh-interval", "3000")).strip().lower()
        found = _DURATION.fullmatch(value)
        unit = _DURATION_UNITS.get(found.group(2)) if found else None
        return float(found.group(1)) * unit if found and unit is not None else 3.0

    def get_plan(self, job_id: str) -> JobPlan:
        """``GET /jobs/{id}/plan``."""
        data = self._request("GET", f"/jobs/{job_id}/plan", operation="get job plan", job_id=job_id)
        return JobPlan.model_validate(data.get("plan", data))

    def get_exceptions(self, job_id: str) -> JobExceptions:
        """``GET /jobs/{id}/exceptions`` (2.x ``exceptionHistory``)."""
        data = self._request("GET", f"/jobs/{job_id}/exceptions", operation="get job exceptions", job_id=job_id)
        return JobExceptions.model_validate(data)

    def get_checkpoints(self, job_id: str) -> CheckpointStats:
        """``GET /jobs/{id}/checkpoints`` (completed checkpoints and savepoints)."""
        data = self._request("GET", f"/jobs/{job_id}/checkpoints", operation="get checkpoints", job_id=job_id)
        return CheckpointStats.model_validate(data)

    def get_jobmanager_config(self) -> dict[str, str]:
        """``GET /jobmanager/config`` as a dict."""
        items = self._request("GET", "/jobmanager/config", operation="jobmanager config")
        return {i["key"]: i["value"] for i in items}

    def cancel_job(self, job_id: str) -> None:
        """``PATCH /jobs/{id}?mode=cancel`` (a job that already ended is left alone)."""
        try:
            self._request("PATCH", f"/jobs/{job_id}", operation="cancel job", job_id=job_id, params={"mode": "cancel"})
        except FlinkRestError as err:
            if err.status_code == 409 or "not running" in str(err.cause or "").lower():
                return
            raise

    def job_failure_cause(self, job_id: str, limit: int = 3) -> str:
        """Root causes from the job's exception history (empty if none or unreadable)."""
        try:
            return self.get_exceptions(job_id).summary(limit)
        except FlinkRestError:
            return ""

    def wait_for_job_state(
        self,
        job_id: str,
        states: Iterable[str] = ("RUNNING",),
        *,
        timeout: float = 300.0,
        poll_interval: float = 0.5,
        all_tasks_running: bool = False,
    ) -> JobDetails:
        """Poll until the job reaches one of ``states``; FAILED/CANCELED end the wait with the cause."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            if job.state in wanted and (job.state != "RUNNING" or not all_tasks_running or job.all_vertices_running):
                return job
            if job.state in ("FAILED", "CANCELED", "FINISHED") and job.state not in wanted:
                raise FlinkJobFailedError(
                    f"Flink job {job_id} ended {job.state} while waiting for {sorted(wanted)}: "
                    f"{self.job_failure_cause(job_id) or 'no exception recorded'}",
                    operation="wait for job state",
                    job_id=job_id,
                    cause=self.job_failure_cause(job_id),
                )
            if time.monotonic() >= deadline:
                raise FlinkOperationTimeoutError(
                    f"Flink job {job_id} did not reach {sorted(wanted)} within {timeout:g} s (state {job.state})",
                    operation="wait for job state",
                    job_id=job_id,
                )
            time.sleep(poll_interval)

    def wait_until_checkpointed(
        self, job_id: str, *, timeout: float = 120.0, poll_interval: float = 1.0, max_failures: int = 3
    ) -> CheckpointedJob:
        """Poll until the job runs every task and has completed a checkpoint after its newest failure.

        Raises :class:`FlinkJobFailedError` when the job ends, or fails ``max_failures`` times with no checkpoint
        in between (a job that restarts with the same error each time: a Python worker that cannot import the
        job's code, a record it cannot read), and :class:`FlinkOperationTimeoutError` at ``timeout``; both carry
        the newest failure's Python traceback (or Flink's root cause). Older failures a job recovered from do not
        count."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            failures = self.get_exceptions(job_id)
            checkpoints = [c for c in self.get_checkpoints(job_id).history if not c.is_savepoint]
            newest = failures.newest()
            since = newest.timestamp if newest is not None else 0
            done = [c for c in checkpoints if c.trigger_timestamp > since]
            if job.state == "RUNNING" and job.all_vertices_running and done:
                return CheckpointedJob(job_id=job_id, checkpoint_id=max(c.id for c in done),
                                       failures=len(failures.exception_history.entries),
                                       newest_failure=newest.root_cause if newest is not None else "")  # fmt: skip
            last = max((c.trigger_timestamp for c in checkpoints), default=0)
            count = sum(1 for e in failures.exception_history.entries if e.timestamp > last)
            if job.state in TERMINAL_STATES:
                raise self._not_running(job, failures, f"ended {job.state} after {count} failure(s)")
            if count >= max_failures:
                raise self._not_running(job, failures, f"is failing: {count} failures in a row, "
                                                       f"{'since its last checkpoint' if last else 'since it started'} "
                                                       f"(state {job.state}, restarting after each)")
            if time.monotonic() >= deadline:
                tasks = ", ".join(sorted({v.status for v in job.vertices})) or "none"
                cause = failures.python_error() or failures.summary(1)
                raise FlinkOperationTimeoutError(
                    f"Flink job {job.name} ({job_id}) completed no checkpoint within {timeout:g} s (state {job.state}, "
                    f"tasks {tasks}, {count} failure(s) so far)" + (f":\n{cause}" if cause else ""),
                    operation="wait for the first checkpoint", job_id=job_id, cause=cause or None,
                )
            time.sleep(poll_interval)

    @staticmethod
    def _not_running(job: JobDetails, failures: JobExceptions, why: str) -> FlinkJobFailedError:
        """The error of a job that stopped or keeps failing: its newest Python traceback, else Flink's causes."""
        cause = failures.python_error() or failures.summary(1) or "no exception recorded"
        return FlinkJobFailedError(f"Flink job {job.name} ({job.jid}) {why}:\n{cause}",
                                   operation="wait for the first checkpoint", job_id=job.jid, cause=cause)

    # -------------------------------------------------------------------------------- savepoints/stop

    def trigger_savepoint(
        self,
        job_id: str,
        target_directory: str | None = None,
        *,
        format_type: str = "CANONICAL",
        trigger_id: str | None = None,
    ) -> str:
        """``POST /jobs/{id}/savepoints`` (no stop); returns the trigger id. A given ``trigger_id`` makes
        the call idempotent: Flink acknowledges a repeated id without starting a second savepoint. Without
        one, a call whose answer is lost is not resent (:class:`FlinkOutcomeUnknownError`)."""
        body: dict[str, Any] = {"cancel-job": False, "formatType": format_type}
        if target_directory:
            body["target-directory"] = target_directory
        if trigger_id:
            body["triggerId"] = trigger_id
        data = self._request(
            "POST",
            f"/jobs/{job_id}/savepoints",
            operation="trigger savepoint",
            job_id=job_id,
            json=body,
            idempotent=bool(trigger_id),
            if_unanswered=f"Flink may have started a savepoint; GET {self.base_url}/jobs/{job_id}/checkpoints lists "
            "it. Pass trigger_id to make this call safe to resend",
        )
        return str(data["request-id"])

    def stop_with_savepoint(
        self,
        job_id: str,
        target_directory: str | None = None,
        *,
        drain: bool = False,
        format_type: str = "CANONICAL",
        trigger_id: str | None = None,
    ) -> str:
        """``POST /jobs/{id}/stop`` (stop-with-savepoint, optionally draining); returns the trigger id. Resent
        after a lost answer only with a ``trigger_id`` (Flink then reports the one operation)."""
        body: dict[str, Any] = {"drain": drain, "formatType": format_type}
        if target_directory:
            body["targetDirectory"] = target_directory
        if trigger_id:
            body["triggerId"] = trigger_id
        operation = "stop with savepoint (drain)" if drain else "stop with savepoint"
        data = self._request(
            "POST",
            f"/jobs/{job_id}/stop",
            operation=operation,
            job_id=job_id,
            json=body,
            idempotent=bool(trigger_id),
            if_unanswered=f"Flink may be stopping the job; GET {self.base_url}/jobs/{job_id} shows its state. Pass "
            "trigger_id to make this call safe to resend",
        )
        return str(data["request-id"])

    def get_savepoint_status(self, job_id: str, trigger_id: str) -> AsyncOperationStatus:
        """``GET /jobs/{id}/savepoints/{trigger}`` (savepoint and stop-with-savepoint alike)."""
        data = self._request(
            "GET", f"/jobs/{job_id}/savepoints/{trigger_id}", operation="savepoint status", job_id=job_id
        )
        return AsyncOperationStatus.model_validate(data)

    def operation_status(self, job_id: str, trigger_id: str) -> AsyncOperationStatus | None:
        """The status of savepoint/stop ``trigger_id``, or ``None`` when Flink does not know it (never
        triggered, or forgotten after ``rest.async.store-duration``)."""
        try:
            return self.get_savepoint_status(job_id, trigger_id)
        except FlinkRestError as err:
            if err.status_code == 404:
                return None
            raise

    # ------------------------------------------ savepoint/stop procedures (hooks/flink_savepoints.py)
    # One line each: the operators (and their tests' stub hook) call these on the hook.

    def wait_for_savepoint(
        self,
        job_id: str,
        trigger_id: str,
        *,
        timeout: float = 300.0,
        poll_interval: float = 0.3,
        operation: str = "savepoint",
    ) -> str:
        """Poll a savepoint/stop trigger until COMPLETED; returns the location
        (:func:`~airflow_flink_replay.hooks.flink_savepoints.wait_for_savepoint`)."""
        return flink_savepoints.wait_for_savepoint(
            self, job_id, trigger_id, timeout=timeout, poll_interval=poll_interval, operation=operation
        )

    def find_operation(self, job_id: str, trigger_ids: Iterable[str]) -> tuple[str, AsyncOperationStatus | None]:
        """The operation of one task instance among its per-attempt ``trigger_ids``
        (:func:`~airflow_flink_replay.hooks.flink_savepoints.find_operation`)."""
        return flink_savepoints.find_operation(self, job_id, trigger_ids)

    def run_savepoint(
        self, job_id: str, directory: str, *, attempts: int = 1, interval: float = 1.5
    ) -> CheckpointRecord | None:
        """The newest completed savepoint of ``job_id`` inside ``directory``, from its checkpoint statistics
        (:func:`~airflow_flink_replay.hooks.flink_savepoints.run_savepoint`)."""
        return flink_savepoints.run_savepoint(self, job_id, directory, attempts=attempts, interval=interval)

    def stop_outcome(
        self,
        job_id: str,
        trigger_ids: Iterable[str],
        run_directory: str,
        *,
        stopping: bool = True,
        timeout: float = 600.0,
        poll_interval: float = 0.5,
    ) -> StopOutcome:
        """What became of the stop-with-savepoint of ``job_id`` that one quiesce task triggered
        (:func:`~airflow_flink_replay.hooks.flink_savepoints.stop_outcome`)."""
        return flink_savepoints.stop_outcome(
            self, job_id, trigger_ids, run_directory, stopping=stopping, timeout=timeout, poll_interval=poll_interval
        )

    def restored_savepoint(self, job_id: str) -> str | None:
        """Where ``job_id`` restored its state from (``latest.restored.external_path`` of its checkpoint
        statistics), or ``None`` (started empty, or not reported yet)."""
        data = self._request("GET", f"/jobs/{job_id}/checkpoints", operation="get checkpoints", job_id=job_id)
        restored = ((data or {}).get("latest") or {}).get("restored") or {}
        return restored.get("external_path") or None

    # ------------------------------------------------------------------------------------------ jars

    def list_jars(self) -> list[JarFile]:
        """``GET /jars``."""
        data = self._request("GET", "/jars", operation="list jars")
        return [JarFile.model_validate(f) for f in data.get("files", [])]

    def upload_jar(self, path: str | Path) -> str:
        """``POST /jars/upload``; returns the jar id. Every upload stores a new copy, so a call whose answer
        is lost is not resent (:class:`FlinkOutcomeUnknownError`); a refused connection is."""
        path = Path(path)
        with path.open("rb") as fh:
            data = self._request(
                "POST",
                "/jars/upload",
                operation=f"upload jar {path.name}",
                files={"jarfile": (path.name, fh, "application/x-java-archive")},
                timeout=max(self.settings.timeout, 120),
                idempotent=False,
                if_unanswered=f"Flink may have stored the upload; GET {self.base_url}/jars lists the uploaded "
                "copies (DELETE the extra one)",
            )
        return str(data["filename"]).rsplit("/", 1)[-1]

    def delete_jar(self, jar_id: str) -> None:
        """``DELETE /jars/{id}``."""
        self._request("DELETE", f"/jars/{jar_id}", operation=f"delete jar {jar_id}")

    def _jar_body(
        self,
        entry_class: str | None,
        program_args: list[str] | None,
        savepoint_path: str | None,
        allow_non_restored_state: bool,
        parallelism: int | None,
        flink_configuration: dict[str, str] | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if entry_class:
            body["entryClass"] = entry_class
        if program_args:
            body["programArgsList"] = list(program_args)
        if savepoint_path:
            body["savepointPath"] = savepoint_path
            body["allowNonRestoredState"] = bool(allow_non_restored_state)
        if parallelism:
            body["parallelism"] = parallelism
        if flink_configuration:
            body["flinkConfiguration"] = dict(flink_configuration)
        return body

    def run_jar(
        self,
        jar_id: str,
        *,
        entry_class: str | None = None,
        program_args: list[str] | None = None,
        savepoint_path: str | None = None,
        allow_non_restored_state: bool = False,
        parallelism: int | None = None,
        flink_configuration: dict[str, str] | None = None,
        timeout: float = 180.0,
    ) -> str:
        """``POST /jars/{id}/run``; returns the job id.

        The call has no idempotency key: it is resent only when it surely never reached Flink (connection
        refused, connect timeout). After a read timeout, a dropped connection or a 502/503/504 Flink may
        have started the job, so it raises :class:`FlinkOutcomeUnknownError` (saying how to check) instead
        of starting a second copy.
        """
        body = self._jar_body(
            entry_class, program_args, savepoint_path, allow_non_restored_state, parallelism, flink_configuration
        )
        name = (flink_configuration or {}).get("pipeline.name")
        sent_at = datetime.now(UTC).replace(microsecond=0).isoformat()
        data = self._request(
            "POST",
            f"/jars/{jar_id}/run",
            operation="run jar",
            json=body,
            timeout=timeout,
            idempotent=False,
            if_unanswered=(
                f"Flink may have started the job anyway. Before submitting again, look for "
                f"{f'a job named {name!r}' if name else 'a new job'} started after {sent_at} in GET "
                f"{self.base_url}/jobs/overview (or the web UI, {self.base_url}/#/job/running)"
            ),
        )
        return str(data["jobid"])

    def jar_plan(
        self,
        jar_id: str,
        *,
        entry_class: str | None = None,
        program_args: list[str] | None = None,
        parallelism: int | None = None,
        flink_configuration: dict[str, str] | None = None,
    ) -> JobPlan:
        """``POST /jars/{id}/plan``: the plan a jar would run, without running it."""
        body = self._jar_body(entry_class, program_args, None, False, parallelism, flink_configuration)
        data = self._request("POST", f"/jars/{jar_id}/plan", operation="jar plan", json=body, timeout=180)
        return JobPlan.model_validate(data.get("plan", data))

    def jobmanager_log_tail(self, lines: int = 200) -> str:
        """The last ``lines`` lines of the JobManager's main log (over REST; empty if unavailable)."""
        try:
            logs = self._request("GET", "/jobmanager/logs", operation="list jobmanager logs").get("logs", [])
            names = [entry["name"] for entry in logs if str(entry.get("name", "")).endswith(".log")]
            if not names:
                return ""
            preferred = [n for n in names if "standalonesession" in n] or [
                n for n in names if "jobmanager" in n and "start" not in n
            ]
            name = (preferred or names)[0]
            text = self._call("GET", f"/jobmanager/logs/{name}", operation="jobmanager log").text  # any status
            return "\n".join(text.splitlines()[-lines:])
        except (FlinkRestError, KeyError):
            return ""

    def metaspace_short(self, headroom_mb: float | None = None) -> JobManagerMemory | None:
        """The JobManager's memory when it has less free metaspace than ``headroom_mb`` (default: the
        connection's ``min_metaspace_headroom_mb``; 0 never), else None — also when the metrics are off or
        not reported yet (logged: there is nothing to judge by)."""
        headroom = self.settings.min_metaspace_headroom_mb if headroom_mb is None else headroom_mb
        if not headroom:
            return None
        try:
            memory = self.jobmanager_memory()
        except FlinkRestError as err:
            self.log.warning("JobManager metaspace unknown at %s (%s): no headroom check", self.base_url, err)
            return None
        free = memory.metaspace_free_mb
        return memory if free is not None and free < headroom else None

    def jobmanager_memory(self) -> JobManagerMemory:
        """The JobManager JVM's metaspace and heap (``GET /jobmanager/metrics``), in bytes.

        Every PythonDriver run (a Python job's submission or plan) loads classes into the JobManager's
        metaspace and not all of them are unloaded again; when it is full the JobManager dies with
        ``OutOfMemoryError: Metaspace``, with every job it runs. Submitters read this before each run.
        """
        names = ",".join(JobManagerMemory.METRICS.values())
        data = self._request("GET", "/jobmanager/metrics", operation="jobmanager metrics", params={"get": names})
        values = {m["id"]: float(m["value"]) for m in data if m.get("value") not in (None, "")}
        return JobManagerMemory(**{key: values.get(metric, 0.0) for key, metric in JobManagerMemory.METRICS.items()})

    # ------------------------------------------------------------------------------------ async twins
    # (the triggers': ``async with hook.async_session() as session``, then these, retried like the sync calls)

    async def aget_job(self, session: Any, job_id: str) -> JobDetails:
        """Async ``GET /jobs/{id}``."""
        return JobDetails.model_validate(
            await self.aget(session, f"/jobs/{job_id}", operation="get job", job_id=job_id)
        )

    async def aget_savepoint_status(self, session: Any, job_id: str, trigger_id: str) -> AsyncOperationStatus:
        """Async ``GET /jobs/{id}/savepoints/{trigger}``."""
        data = await self.aget(
            session, f"/jobs/{job_id}/savepoints/{trigger_id}", operation="savepoint status", job_id=job_id
        )
        return AsyncOperationStatus.model_validate(data)

    async def ajob_failure_cause(self, session: Any, job_id: str, limit: int = 3) -> str:
        """Async root causes from the job's exception history."""
        try:
            data = await self.aget(session, f"/jobs/{job_id}/exceptions", operation="get job exceptions", job_id=job_id)
            return JobExceptions.model_validate(data).summary(limit)
        except FlinkRestError:
            return ""

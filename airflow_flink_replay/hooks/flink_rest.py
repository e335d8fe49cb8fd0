"""Hook for the Flink REST API (connection type ``flink_rest``).

One retried request helper (``requests`` Session + urllib3 ``Retry``: connection errors and 502/503/504 with
exponential backoff, a timeout on every call) and an async twin (``aiohttp``) that the triggers use.
Only idempotent calls are resent after Flink may have received them: GETs, PATCH/DELETE, the jar plan, and
savepoint/stop with a ``triggerId`` (Flink acknowledges a repeated id without a second operation). A call
without such a key (``POST /jars/{id}/run``, ``POST /jars/upload``, savepoint/stop without ``triggerId``) is
retried only when it surely never reached Flink (connection refused, connect timeout); after a read timeout,
a dropped connection or a 502/503/504 it fails at once with :class:`FlinkOutcomeUnknownError`, which says
how to check whether Flink acted (a resent ``/run`` could start a second copy of the job).
Every error is a :class:`FlinkRestError` naming the operation, the job id and Flink's own cause (the Java
exception lines without the stack frames), never a bare HTTP status. Secrets are never logged: only the
method and the URL (which never carries credentials) are.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from airflow.sdk.bases.hook import BaseHook
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

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
from airflow_flink_replay.core.manifest_io import normalized_location
from airflow_flink_replay.exceptions import (
    FlinkJobFailedError,
    FlinkJobNotFoundError,
    FlinkOperationFailedError,
    FlinkOperationTimeoutError,
    FlinkOutcomeUnknownError,
    FlinkRestError,
    FlinkUnreachableError,
    SpecError,
)

#: PythonDriver: the entry class that runs a Python Flink program from the flink-python jar.
PYTHON_DRIVER = "org.apache.flink.client.python.PythonDriver"
RETRY_STATUSES = (502, 503, 504)
#: Flink web UI routes: ``/#/job/running/<id>`` for live jobs, ``/#/job/completed/<id>`` once the job is in a
#: globally terminal state (Flink 2.2's dashboard marks exactly these as "completed").
UI_COMPLETED_STATES = frozenset({"FINISHED", "FAILED", "CANCELED"})


# The errors (FlinkRestError and its subclasses) live in airflow_flink_replay.exceptions; imported above, so
# their old import path (airflow_flink_replay.hooks.flink_rest) keeps working.


@dataclass(frozen=True)
class StopOutcome:
    """What became of one quiesce task's stop-with-savepoint (:meth:`FlinkRestHook.stop_outcome`).

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


_FRAME = re.compile(r"^\s*(at |\.\.\. \d+ more)")


def flink_cause(text: str | None, limit: int = 8) -> str:
    """Reduce a Java stack trace (or Flink's ``errors`` text) to its message lines, innermost last.

    Keeps the first line and every ``Caused by:`` line, drops ``at ...`` frames and duplicates.
    """
    if not text:
        return ""
    lines: list[str] = []
    for raw in str(text).splitlines():
        line = raw.strip()
        if not line or _FRAME.match(line) or line in lines:
            continue
        if not lines or line.startswith("Caused by:") or line.startswith("Traceback") or not raw[:1].isspace():
            lines.append(line)
    if len(lines) > limit:
        lines = [lines[0], "...", *lines[-(limit - 2) :]]
    return "\n".join(lines)


def rest_base_url(host: str, schema: str | None, port: int | None) -> str:
    """Build the REST base URL from connection fields (``host`` may already be a URL).

    A URL with credentials in it (``http://user:pw@host``) is refused: the base URL appears in error
    messages, logs and the Flink links of the Airflow UI. The message does not repeat it.
    """
    from urllib.parse import urlsplit

    url = host.rstrip("/") if "://" in host else f"{schema or 'http'}://{host}:{port or 8081}"
    try:
        has_credentials = bool(urlsplit(url).username or urlsplit(url).password)
    except ValueError:
        has_credentials = "@" in url.split("://", 1)[-1].split("/", 1)[0]
    if has_credentials:
        raise SpecError(
            "the Flink connection's host carries credentials (user:password@ in the URL), which would show in "
            "error messages, logs and the Flink links. Fix: put the host alone in the connection's host, the "
            "user and password in login/password (basic auth), or a token in extra bearer_token"
        )
    return url


@dataclass
class FlinkRestSettings:
    """Resolved connection settings (kept out of logs and reprs: auth and headers hold secrets)."""

    base_url: str
    timeout: float = 30.0
    verify: bool | str = True
    retries: int = 3
    backoff_factor: float = 0.5
    auth: tuple[str, str] | None = field(default=None, repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    #: Where a submitter finds Flink on the Airflow worker: ``flink_home`` (a distribution with ``bin/flink``
    #: and ``opt/flink-python-*.jar``), or just the ``python_jar`` to upload when the cluster has none.
    flink_home: str | None = None
    python_jar: str | None = None
    #: The CLI submitter's client configuration and JDK.
    flink_conf_dir: str | None = None
    java_home: str | None = None
    #: Refuse a PythonDriver run while the JobManager's free metaspace is below this (MB; 0 = never).
    min_metaspace_headroom_mb: float = 96.0


def _extra_or(extra: dict[str, Any], key: str, default: Any) -> Any:
    """``extra[key]``, or ``default`` when it is missing, null or an empty string."""
    value = extra.get(key)
    return default if value is None or value == "" else value


def settings_from_connection(conn: Any, retries: int | None = None, timeout: float | None = None) -> FlinkRestSettings:
    """Turn an Airflow connection into :class:`FlinkRestSettings`."""
    extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else {}
    headers: dict[str, str] = {}
    auth = None
    if extra.get("bearer_token"):
        headers["Authorization"] = f"Bearer {extra['bearer_token']}"
    elif conn.login:
        auth = (conn.login, conn.password or "")
    # the connection form stores a field left empty as null: null means the default
    verify = _extra_or(extra, "verify", True)
    if isinstance(verify, str) and verify.lower() in ("true", "false"):
        verify = verify.lower() == "true"
    return FlinkRestSettings(
        base_url=rest_base_url(conn.host or "127.0.0.1", conn.schema, conn.port),
        timeout=float(timeout if timeout is not None else _extra_or(extra, "timeout", 30)),
        verify=verify,
        retries=int(retries if retries is not None else _extra_or(extra, "retries", 3)),
        backoff_factor=float(_extra_or(extra, "backoff_factor", 0.5)),
        auth=auth,
        headers=headers,
        flink_home=_extra_or(extra, "flink_home", None),
        python_jar=_extra_or(extra, "python_jar", None),
        flink_conf_dir=_extra_or(extra, "flink_conf_dir", None),
        java_home=_extra_or(extra, "java_home", None),
        min_metaspace_headroom_mb=float(_extra_or(extra, "min_metaspace_headroom_mb", 96.0)),
    )


#: A Flink duration setting: a number and an optional unit (none: milliseconds).
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
#: Seconds per unit of a Flink duration setting.
_DURATION_UNITS = {"": 0.001, "ms": 0.001, "milli": 0.001, "millis": 0.001, "millisecond": 0.001,
                   "milliseconds": 0.001, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
                   "min": 60.0, "m": 60.0, "minute": 60.0, "minutes": 60.0}


class FlinkRestHook(BaseHook):
    """Talks to a Flink cluster's REST endpoint (JobManager, port 8081 by default).

    Connection fields: ``host`` is the REST base URL (``http://127.0.0.1:8081``) or a host name with
    ``schema`` (http/https) and ``port``; ``login``/``password`` give basic auth; extra
    ``{"bearer_token": ..., "verify": true|false|"/ca.pem", "timeout": 30, "retries": 3,
    "backoff_factor": 0.5}``; for submitting Python jobs from this worker ``{"flink_home": ...,
    "python_jar": ..., "flink_conf_dir": ..., "java_home": ..., "min_metaspace_headroom_mb": 96}``.

    :param flink_conn_id: the Airflow connection id.
    :param retries: retries on connection errors and 502/503/504 (overrides the connection's extra).
    :param timeout: per-call timeout in seconds (overrides the connection's extra).
    :param settings: resolved settings; when given no Airflow connection is looked up (scripts, tests).
    """

    conn_name_attr = "flink_conn_id"
    default_conn_name = "flink_default"
    conn_type = "flink_rest"
    hook_name = "Flink REST"

    def __init__(
        self,
        flink_conn_id: str = default_conn_name,
        *,
        retries: int | None = None,
        timeout: float | None = None,
        settings: FlinkRestSettings | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.flink_conn_id = flink_conn_id
        self._retries = retries
        self._timeout = timeout
        self._settings = settings
        self._session: requests.Session | None = None
        self._once_session: requests.Session | None = None

    # ------------------------------------------------------------------------------------- settings

    @property
    def settings(self) -> FlinkRestSettings:
        """The connection's settings (resolved once)."""
        if self._settings is None:
            conn = self.get_connection(self.flink_conn_id)
            self._settings = settings_from_connection(conn, self._retries, self._timeout)
        return self._settings

    async def asettings(self) -> FlinkRestSettings:
        """The settings, resolved without blocking the triggerer's event loop."""
        if self._settings is None:
            conn = await BaseHook.aget_connection(self.flink_conn_id)
            self._settings = settings_from_connection(conn, self._retries, self._timeout)
        return self._settings

    @property
    def base_url(self) -> str:
        """The REST base URL, without a trailing slash."""
        return self.settings.base_url

    def job_ui_url(self, job_id: str, state: str | None = None) -> str:
        """The Flink web UI page of a job: ``#/job/completed/...`` for a FINISHED/FAILED/CANCELED job (the
        dashboard shows ended jobs only there), ``#/job/running/...`` otherwise (``state`` unknown too)."""
        section = "completed" if (state or "").upper() in UI_COMPLETED_STATES else "running"
        return f"{self.base_url}/#/job/{section}/{job_id}/overview"

    def get_conn(self, idempotent: bool = True) -> requests.Session:
        """A ``requests`` Session with retries.

        :param idempotent: ``True`` (default): retries on connection errors, read errors and 502/503/504,
            for calls that may safely reach Flink twice. ``False``: retries only errors raised before the
            request was sent (connection refused, connect timeout), for calls that must not run twice.
        """
        cached = self._session if idempotent else self._once_session
        if cached is not None:
            return cached
        s = self.settings
        if idempotent:
            retry = Retry(
                total=s.retries,
                connect=s.retries,
                read=s.retries,
                status=s.retries,
                backoff_factor=s.backoff_factor,
                status_forcelist=RETRY_STATUSES,
                allowed_methods=None,  # every method: callers only route idempotent calls here
                raise_on_status=False,
                respect_retry_after_header=True,
            )
        else:
            retry = Retry(
                total=s.retries,
                connect=s.retries,  # refused / connect timeout: the request never left this host
                read=False,  # read timeout or dropped connection after sending: Flink may have acted
                status=0,
                other=0,
                redirect=0,
                status_forcelist=(),
                backoff_factor=s.backoff_factor,
                raise_on_status=False,
            )
        session = requests.Session()
        adapter = HTTPAdapter(max_retries=retry)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers.update(s.headers)
        session.auth = s.auth
        session.verify = s.verify
        if idempotent:
            self._session = session
        else:
            self._once_session = session
        return session

    # -------------------------------------------------------------------------------------- request

    def _request(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        job_id: str | None = None,
        timeout: float | None = None,
        idempotent: bool = True,
        if_unanswered: str = "",
        **kwargs: Any,
    ) -> Any:
        """One REST call. ``idempotent=False`` calls are resent only when they surely never reached Flink;
        ``if_unanswered`` then tells the user how to check what Flink did with a call left unanswered."""
        url = f"{self.base_url}{path}"
        self.log.debug("Flink REST %s %s (%s)", method, url, operation)
        subject = f" for job {job_id}" if job_id else ""
        try:
            # verify given per call: requests lets $REQUESTS_CA_BUNDLE / $CURL_CA_BUNDLE override a session's CA
            # (common in containers), and the connection's own CA must win
            response = self.get_conn(idempotent).request(
                method, url, timeout=timeout or self.settings.timeout, verify=self.settings.verify, **kwargs
            )
        except requests.RequestException as err:
            if idempotent or _never_sent(err):
                never = "" if idempotent else " (the request never reached Flink)"
                raise FlinkUnreachableError(
                    f"Flink REST at {self.base_url} is unreachable: {operation}{subject} failed after "
                    f"{self.settings.retries} retries{never} ({type(err).__name__}: {_short(err)})",
                    operation=operation,
                    job_id=job_id,
                    url=url,
                ) from err
            raise _outcome_unknown(
                operation, subject, url, f"{type(err).__name__}: {_short(err)}", if_unanswered, job_id
            ) from err
        if not idempotent and response.status_code in RETRY_STATUSES:
            raw = _error_text(response.text)
            raise _outcome_unknown(
                operation,
                subject,
                url,
                f"HTTP {response.status_code}: {flink_cause(raw) or 'no cause given'}",
                if_unanswered,
                job_id,
                status_code=response.status_code,
                details=raw,
            )
        return _parse_response(response.status_code, response.text, url, operation, job_id)

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

    def wait_for_savepoint(
        self,
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
            status = self.get_savepoint_status(job_id, trigger_id)
            if status.status == "COMPLETED":
                return savepoint_location_or_raise(status, job_id, trigger_id, operation)
            if time.monotonic() >= deadline:
                raise savepoint_timeout_error(job_id, trigger_id, operation, timeout)
            time.sleep(poll_interval)

    # ------------------------------------------------------------------- this run's stop (quiesce/resume)

    def operation_status(self, job_id: str, trigger_id: str) -> AsyncOperationStatus | None:
        """The status of savepoint/stop ``trigger_id``, or ``None`` when Flink does not know it (never
        triggered, or forgotten after ``rest.async.store-duration``)."""
        try:
            return self.get_savepoint_status(job_id, trigger_id)
        except FlinkRestError as err:
            if err.status_code == 404:
                return None
            raise

    def find_operation(self, job_id: str, trigger_ids: Iterable[str]) -> tuple[str, AsyncOperationStatus | None]:
        """The operation of one task instance among its per-attempt ``trigger_ids`` (in attempt order).

        Returns (id, status) of the first that is in progress or succeeded; a failed one moves on to the
        next attempt's id; the first id Flink does not know ends the search as (that id, ``None``): the id
        a new attempt uses. Raises :class:`FlinkOperationFailedError` when every id was used and failed.
        """
        last: tuple[str, AsyncOperationStatus | None] | None = None
        for trigger_id in trigger_ids:
            status = self.operation_status(job_id, trigger_id)
            if status is None or status.status == "IN_PROGRESS" or status.succeeded:
                return trigger_id, status
            self.log.warning(
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
        self, job_id: str, directory: str, *, attempts: int = 1, interval: float = 1.5
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
                found = savepoint_in(self.get_checkpoints(job_id), directory)
            except FlinkRestError:
                return None
            if found:
                return found
            if attempt + 1 < attempts:
                time.sleep(interval)
        return None

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
        trigger_id, status = self.find_operation(job_id, ids) if ids else ("", None)
        while status is not None and status.status == "IN_PROGRESS":
            if time.monotonic() >= deadline:
                raise FlinkOperationTimeoutError(
                    f"the stop-with-savepoint {trigger_id} of job {job_id} is still in progress after {timeout:g} s: "
                    "production may still be stopping. Fix: wait for it (Flink UI, checkpoints tab) and run the "
                    "resume again, which reattaches to it",
                    operation="stop with savepoint",
                    job_id=job_id,
                )
            self.log.info("stop %s of job %s still in progress: waiting before resuming", trigger_id, job_id)
            time.sleep(poll_interval)
            trigger_id, status = self.find_operation(job_id, ids)
        savepoint = str(status.location) if status is not None and status.succeeded else None
        try:
            job = self.get_job(job_id)
        except FlinkJobNotFoundError:
            return StopOutcome(job_id, "UNKNOWN", trigger_id, savepoint)
        if stopping and savepoint is not None and job.state not in ("FINISHED", "FAILED", "CANCELED"):
            # the savepoint is complete; the job finishes its tasks right after (~seconds)
            remaining = max(5.0, deadline - time.monotonic())
            with contextlib.suppress(FlinkRestError):
                job = self.wait_for_job_state(job_id, ("FINISHED",), timeout=remaining, poll_interval=poll_interval)
        if savepoint is None and job.state != "RUNNING":
            # Flink forgot the operation, or this is a job that ended some other way: the statistics tell
            record = self.run_savepoint(job_id, run_directory, attempts=3)
            savepoint = record.external_path if record else None
        return StopOutcome(job_id, job.state, trigger_id, savepoint, job.end_time if job.end_time > 0 else None)

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
            response = self.get_conn().get(f"{self.base_url}/jobmanager/logs/{name}", timeout=self.settings.timeout)
            return "\n".join(response.text.splitlines()[-lines:])
        except (FlinkRestError, requests.RequestException, KeyError):
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

    # ------------------------------------------------------------------------------------ async twin

    @contextlib.asynccontextmanager
    async def async_session(self) -> AsyncIterator[Any]:
        """An ``aiohttp`` session with the connection's auth, headers and TLS settings."""
        import aiohttp

        s = await self.asettings()
        auth = aiohttp.BasicAuth(*s.auth) if s.auth else None
        ssl: Any = None
        if s.verify is False:
            ssl = False
        elif isinstance(s.verify, str):
            import ssl as ssl_mod

            ssl = ssl_mod.create_default_context(cafile=s.verify)
        connector = aiohttp.TCPConnector(ssl=ssl) if ssl is not None else None
        async with aiohttp.ClientSession(
            auth=auth, headers=s.headers, connector=connector, timeout=aiohttp.ClientTimeout(total=s.timeout)
        ) as session:
            yield session

    async def aget(self, session: Any, path: str, *, operation: str, job_id: str | None = None) -> Any:
        """Async ``GET`` with the same retries and errors as the sync helper."""
        import asyncio

        import aiohttp

        s = await self.asettings()
        url = f"{s.base_url}{path}"
        attempt = 0
        while True:
            try:
                async with session.get(url) as response:
                    text = await response.text()
                    if response.status in RETRY_STATUSES and attempt < s.retries:
                        raise _Retryable(f"HTTP {response.status}")
                    return _parse_response(response.status, text, url, operation, job_id)
            except (aiohttp.ClientError, TimeoutError, _Retryable) as err:
                if attempt >= s.retries:
                    raise FlinkUnreachableError(
                        f"Flink REST at {s.base_url} is unreachable: {operation}"
                        f"{f' for job {job_id}' if job_id else ''} failed after {s.retries} retries "
                        f"({type(err).__name__}: {_short(err)})",
                        operation=operation,
                        job_id=job_id,
                        url=url,
                    ) from err
                await asyncio.sleep(s.backoff_factor * (2**attempt))
                attempt += 1

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


class _Retryable(Exception):
    pass


def _never_sent(err: requests.RequestException) -> bool:
    """True when ``err`` happened before the request left this host (refused, DNS, connect timeout)."""
    from urllib3.exceptions import ConnectTimeoutError as Urllib3ConnectTimeout
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    if isinstance(err, requests.ConnectTimeout):
        return True
    reason = err.args[0] if err.args else None
    if isinstance(reason, MaxRetryError):
        reason = reason.reason
    return isinstance(reason, NewConnectionError | Urllib3ConnectTimeout)


def _error_text(text: str) -> str:
    """Flink's ``errors`` list of an error answer as text (or the raw body)."""
    import json

    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return text or ""
    errors = data.get("errors") if isinstance(data, dict) else None
    return "\n".join(str(e) for e in errors) if errors else (text or "")


def _outcome_unknown(
    operation: str,
    subject: str,
    url: str,
    what: str,
    if_unanswered: str,
    job_id: str | None,
    *,
    status_code: int | None = None,
    details: str | None = None,
) -> FlinkOutcomeUnknownError:
    """The error for a non-idempotent call that was sent but got no usable answer."""
    return FlinkOutcomeUnknownError(
        f"Flink {operation}{subject}: the request was sent to {url} but got no usable answer ({what}). It is "
        f"not resent, to avoid doing it twice. {if_unanswered or 'Check the cluster before trying again'}.",
        operation=operation,
        job_id=job_id,
        url=url,
        status_code=status_code,
        cause=what,
        details=details,
    )


def _short(err: BaseException) -> str:
    text = str(err)
    return text if len(text) < 300 else text[:300] + "..."


def _parse_response(status: int, text: str, url: str, operation: str, job_id: str | None) -> Any:
    """JSON of a 2xx answer, else a :class:`FlinkRestError` carrying Flink's cause."""
    import json

    try:
        data = json.loads(text) if text else {}
    except ValueError:
        data = None
    if 200 <= status < 300:
        return data if data is not None else {}
    errors = data.get("errors") if isinstance(data, dict) else None
    raw = "\n".join(str(e) for e in errors) if errors else (text or "")
    cause = flink_cause(raw) or f"HTTP {status}"
    subject = f" for job {job_id}" if job_id else ""
    if status == 404 and job_id and ("not found" in raw.lower() or "could not find" in raw.lower()):
        raise FlinkJobNotFoundError(
            f"Flink job {job_id} not found at {url.split('/jobs/')[0]} ({operation}): {cause}",
            operation=operation,
            job_id=job_id,
            url=url,
            status_code=status,
            cause=cause,
            details=raw,
        )
    error_cls = FlinkUnreachableError if status in RETRY_STATUSES else FlinkRestError
    raise error_cls(
        f"Flink {operation}{subject} failed (HTTP {status} from {url}): {cause}",
        operation=operation,
        job_id=job_id,
        url=url,
        status_code=status,
        cause=cause,
        details=raw,
    )


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

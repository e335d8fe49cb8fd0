"""The transport under the Flink REST hook: connection, sessions, and the one retry policy.

:class:`BaseFlinkRestHook` turns a ``flink_rest`` connection into a base URL, auth, TLS settings and a
timeout, holds the sync ``requests`` session, opens the async ``aiohttp`` one (for the triggers), and sends
every call through :class:`FlinkRetryPolicy`. The endpoints live in
:class:`~airflow_flink_replay.hooks.flink_rest.FlinkRestHook`; this module knows paths only as strings.

**One retry policy.** :meth:`FlinkRetryPolicy.retry_args` is the only place that says what is retried, how
often, how long to wait and how a retry is logged. The sync calls run it with ``tenacity.Retrying``, the
async ones with ``tenacity.AsyncRetrying``, from the same arguments, so the two paths cannot drift apart:

- an idempotent call (GETs, PATCH/DELETE, the jar plan, savepoint/stop with a ``triggerId``: Flink
  acknowledges a repeated id without a second operation) is retried on connection errors, timeouts and
  HTTP 502/503/504, and on 413/429/503 answers that carry ``Retry-After``;
- a call without such a key (``POST /jars/{id}/run``, ``POST /jars/upload``, savepoint/stop without
  ``triggerId``) is retried only when the error proves it never reached Flink (connection refused, DNS,
  connect timeout). After a read timeout, a dropped connection or a 502/503/504 Flink may have acted (a
  resent ``/run`` could start a second copy of the job), so it fails at once with
  :class:`FlinkOutcomeUnknownError`, which says how to check;
- at most ``retries`` retries (the connection's extra, 3 by default); retry *n* waits ``backoff_factor`` *
  2^(n-1) s, or what ``Retry-After`` asks, both at most :data:`BACKOFF_MAX` s (a proxy's long
  ``Retry-After`` cannot park a trigger past its deadline); each retry is logged as a warning with the
  method, the URL, the operation and the cause. Once the retries are spent on error answers, the last
  answer is reported (``HTTP 503 from <url>``), not a retry counter.

Every error is a :class:`FlinkRestError` naming the operation, the job id and Flink's own cause (the Java
exception lines without the stack frames), never a bare HTTP status. Secrets are never logged: only the
method and the URL (which never carries credentials, :func:`rest_base_url`) are.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import re
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import requests
from airflow.sdk.bases.hook import BaseHook
from tenacity import AsyncRetrying, RetryCallState, Retrying, stop_after_attempt, wait_exponential

from airflow_flink_replay.exceptions import (
    FlinkJobNotFoundError,
    FlinkOutcomeUnknownError,
    FlinkRestError,
    FlinkUnreachableError,
    SpecError,
)

#: The answers an idempotent call is retried on (Flink or a proxy in front of it is briefly unavailable).
RETRY_STATUSES = (502, 503, 504)
#: The answers an idempotent call is also retried on when they carry ``Retry-After`` (as urllib3 does).
RETRY_AFTER_STATUSES = frozenset({413, 429, 503})
#: The longest wait before a retry, in seconds (backoff and ``Retry-After`` alike).
BACKOFF_MAX = 120.0


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


# ------------------------------------------------------------------------------------------ settings


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
    #: A folder every Airflow worker that submits to this cluster reaches (``file:///shared/…``, ``s3://…``): the
    #: submissions' lease lives there (:mod:`~airflow_flink_replay.hooks.submission_lease`). None: a lock on
    #: the worker's host, enough for one Airflow host (LocalExecutor, standalone).
    submission_lease_uri: str | None = None


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
        submission_lease_uri=_extra_or(extra, "submission_lease_uri", None),
    )


# -------------------------------------------------------------------------------------- retry policy


@dataclass(frozen=True)
class RestAnswer:
    """One HTTP answer, read whole: what the retry policy judges and the endpoint methods parse. The sync
    (``requests``) and async (``aiohttp``) paths both reduce their responses to it."""

    status: int
    text: str
    retry_after: str | None = None  # the Retry-After header, if any


def never_sent(err: BaseException) -> bool:
    """True when ``err`` happened before the request left this host (refused, DNS, connect timeout)."""
    from urllib3.exceptions import ConnectTimeoutError as Urllib3ConnectTimeout
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    if isinstance(err, requests.ConnectTimeout):
        return True
    if not isinstance(err, requests.RequestException):
        return False
    reason = err.args[0] if err.args else None
    if isinstance(reason, MaxRetryError):
        reason = reason.reason
    return isinstance(reason, NewConnectionError | Urllib3ConnectTimeout)


def transport_error(err: BaseException) -> bool:
    """True for a failed exchange rather than an answer: ``requests``' connection errors and timeouts,
    ``aiohttp``'s client errors, asyncio timeouts. (An aiohttp error exists only once aiohttp is imported,
    so the sync path never imports it.)"""
    if isinstance(err, requests.ConnectionError | requests.Timeout | TimeoutError):
        return True
    aiohttp = sys.modules.get("aiohttp")
    return aiohttp is not None and isinstance(err, aiohttp.ClientError)


def retryable_answer(answer: RestAnswer) -> bool:
    """An answer worth asking again (idempotent calls only): 502/503/504, or 413/429/503 with Retry-After."""
    return answer.status in RETRY_STATUSES or (answer.status in RETRY_AFTER_STATUSES and bool(answer.retry_after))


def retry_after_seconds(value: str | None) -> float:
    """``Retry-After`` in seconds (delta seconds or an HTTP date; 0 when absent, past or unreadable)."""
    if not value:
        return 0.0
    if value.strip().isdigit():
        return float(value.strip())
    parsed = email.utils.parsedate_tz(value)
    return max(email.utils.mktime_tz(parsed) - time.time(), 0.0) if parsed else 0.0


def _should_retry(state: RetryCallState, *, idempotent: bool) -> bool:
    """The policy's verdict on one try: a transport error that may be retried, or an answer worth retrying."""
    outcome = state.outcome
    if outcome is None:
        return False
    if outcome.failed:
        err = outcome.exception()
        return err is not None and (transport_error(err) if idempotent else never_sent(err))
    return idempotent and retryable_answer(outcome.result())


def _last_outcome(state: RetryCallState) -> Any:
    """When the retries are spent: the last answer (an error answer is parsed by the caller), or its error."""
    assert state.outcome is not None
    return state.outcome.result()  # re-raises the last try's error, not tenacity's RetryError


@dataclass(frozen=True)
class FlinkRetryPolicy:
    """What is retried, how often, how long to wait and how a retry is logged: one policy for the sync and
    the async path of a :class:`BaseFlinkRestHook` (see the module doc).

    :param retries: retries after the first try (the connection's extra ``retries``).
    :param backoff_factor: retry *n* waits ``backoff_factor`` * 2^(n-1) s (at most :data:`BACKOFF_MAX`).
    :param log: where retries are logged (the hook's logger).
    """

    retries: int
    backoff_factor: float
    log: Any = field(repr=False, compare=False)

    def retry_args(self, *, idempotent: bool, what: str) -> dict[str, Any]:
        """The ``tenacity`` arguments both paths use. ``what`` names the call in the retry log line
        (``GET http://…/jobs/x (get job)``); ``idempotent=False`` retries only errors that prove the
        request never reached Flink, and no error answer."""
        return {
            "stop": stop_after_attempt(max(self.retries, 0) + 1),
            "wait": self._wait,
            "retry": partial(_should_retry, idempotent=idempotent),
            "before_sleep": partial(self._log_retry, what=what),
            "retry_error_callback": _last_outcome,
        }

    def retrying(self, *, idempotent: bool, what: str) -> Retrying:
        """The policy for one sync call: ``policy.retrying(...)(fn, *args)`` runs ``fn`` with retries."""
        return Retrying(sleep=self.sleep, **self.retry_args(idempotent=idempotent, what=what))

    def aretrying(self, *, idempotent: bool, what: str) -> AsyncRetrying:
        """The same policy for one async call: ``await policy.aretrying(...)(coroutine_fn)``."""
        return AsyncRetrying(sleep=self.asleep, **self.retry_args(idempotent=idempotent, what=what))

    @staticmethod
    def sleep(seconds: float) -> None:
        """The sync path's wait between tries (never blocks the triggerer: the async path uses ``asleep``)."""
        time.sleep(seconds)

    @staticmethod
    async def asleep(seconds: float) -> None:
        """The async path's wait between tries."""
        await asyncio.sleep(seconds)

    def _wait(self, state: RetryCallState) -> float:
        """Seconds before the next try: what a Retry-After answer asks, else exponential backoff; both capped."""
        outcome = state.outcome
        answer = outcome.result() if outcome is not None and not outcome.failed else None
        asked = retry_after_seconds(answer.retry_after) if answer and answer.status in RETRY_AFTER_STATUSES else 0
        if asked > 0:
            return min(asked, BACKOFF_MAX)
        return float(wait_exponential(multiplier=self.backoff_factor, max=BACKOFF_MAX)(state))

    def _log_retry(self, state: RetryCallState, *, what: str) -> None:
        """One warning per retry: the call (method, URL, operation; never headers or auth) and the cause."""
        outcome = state.outcome
        err = outcome.exception() if outcome is not None and outcome.failed else None
        cause = f"{type(err).__name__}: {_short(err)}" if err else f"HTTP {outcome.result().status}" if outcome else "?"
        pause = state.next_action.sleep if state.next_action else 0.0
        retry = state.attempt_number
        self.log.warning("Flink REST %s failed (%s); retry %d of %d in %.2f s", what, cause, retry, self.retries, pause)


# ------------------------------------------------------------------------------------------- the hook


class BaseFlinkRestHook(BaseHook):
    """The transport to a Flink cluster's REST endpoint: settings, sessions, retried calls (sync and async).

    :class:`~airflow_flink_replay.hooks.flink_rest.FlinkRestHook` adds one method per endpoint; see it for
    the connection's fields.

    :param flink_conn_id: the Airflow connection id.
    :param retries: retries on connection errors and 502/503/504 (overrides the connection's extra).
    :param timeout: per-call timeout in seconds (overrides the connection's extra).
    :param settings: resolved settings; when given no Airflow connection is looked up (scripts, tests).
    """

    conn_name_attr = "flink_conn_id"
    default_conn_name = "flink_default"
    conn_type = "flink_rest"

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
        self._retry_policy: FlinkRetryPolicy | None = None

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

    @property
    def retry_policy(self) -> FlinkRetryPolicy:
        """This hook's one retry policy (the connection's ``retries`` and ``backoff_factor``), which its sync
        and async calls both use. In the triggerer, resolve the settings first (:meth:`asettings`)."""
        if self._retry_policy is None:
            s = self.settings
            self._retry_policy = FlinkRetryPolicy(s.retries, s.backoff_factor, self.log)
        return self._retry_policy

    def get_conn(self, idempotent: bool = True) -> requests.Session:
        """The ``requests`` Session every sync call goes through (auth, headers, TLS).

        The session itself does not retry: every call is retried by :attr:`retry_policy`, which is told per
        call whether it is idempotent. ``idempotent`` is accepted for callers written when the session
        retried by itself, and changes nothing.
        """
        if self._session is None:
            s = self.settings
            session = requests.Session()
            session.headers.update(s.headers)
            session.auth = s.auth
            session.verify = s.verify
            self._session = session
        return self._session

    # ------------------------------------------------------------------------------------ sync calls

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
        """One REST call: the JSON of a 2xx answer, else a :class:`FlinkRestError` with Flink's cause.
        ``idempotent=False`` calls are resent only when they surely never reached Flink; ``if_unanswered``
        then tells the user how to check what Flink did with a call left unanswered."""
        answer = self._call(
            method, path, operation=operation, job_id=job_id, timeout=timeout, idempotent=idempotent,
            if_unanswered=if_unanswered, **kwargs,
        )  # fmt: skip
        return _parse_response(answer.status, answer.text, f"{self.base_url}{path}", operation, job_id)

    def _call(
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
    ) -> RestAnswer:
        """One REST call under the retry policy, its answer unparsed (any status; ``kwargs`` as for
        ``requests.Request``: ``json``, ``params``, ``files``). A transport failure raises
        :class:`FlinkUnreachableError`, or :class:`FlinkOutcomeUnknownError` for a non-idempotent call
        that may have reached Flink, as does its 502/503/504 answer."""
        url = f"{self.base_url}{path}"
        self.log.debug("Flink REST %s %s (%s)", method, url, operation)
        subject = f" for job {job_id}" if job_id else ""
        session = self.get_conn()
        retrying = self.retry_policy.retrying(idempotent=idempotent, what=f"{method} {url} ({operation})")
        try:
            # prepared once, so a retry resends the same body (an upload's file is read only once)
            prepared = session.prepare_request(requests.Request(method, url, **kwargs))
            # verify given per call: requests lets $REQUESTS_CA_BUNDLE / $CURL_CA_BUNDLE override a session's CA
            # (common in containers), and the connection's own CA must win
            options = session.merge_environment_settings(prepared.url, {}, None, self.settings.verify, None)
            answer: RestAnswer = retrying(_send, session, prepared, timeout or self.settings.timeout, options)
        except requests.RequestException as err:
            if idempotent or never_sent(err):
                raise self._unreachable(err, url, operation, job_id, never_sent=not idempotent) from err
            what = f"{type(err).__name__}: {_short(err)}"
            raise _outcome_unknown(operation, subject, url, what, if_unanswered, job_id) from err
        if not idempotent and answer.status in RETRY_STATUSES:
            raw = _error_text(answer.text)
            raise _outcome_unknown(
                operation, subject, url, f"HTTP {answer.status}: {flink_cause(raw) or 'no cause given'}",
                if_unanswered, job_id, status_code=answer.status, details=raw,
            )  # fmt: skip
        return answer

    def _unreachable(
        self, err: BaseException, url: str, operation: str, job_id: str | None, *, never_sent: bool = False
    ) -> FlinkUnreachableError:
        """The error of a call whose tries all failed in transport (sync and async alike)."""
        subject = f" for job {job_id}" if job_id else ""
        never = " (the request never reached Flink)" if never_sent else ""
        return FlinkUnreachableError(
            f"Flink REST at {self.base_url} is unreachable: {operation}{subject} failed after "
            f"{self.settings.retries} retries{never} ({type(err).__name__}: {_short(err)})",
            operation=operation,
            job_id=job_id,
            url=url,
        )

    # ----------------------------------------------------------------------------------- async calls

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
        """Async ``GET`` (in ``session``, from :meth:`async_session`) under the same retry policy, with the same
        errors, as the sync calls."""
        import aiohttp

        s = await self.asettings()
        url = f"{s.base_url}{path}"

        async def get() -> RestAnswer:
            async with session.get(url) as response:
                return RestAnswer(response.status, await response.text(), response.headers.get("Retry-After"))

        retrying = self.retry_policy.aretrying(idempotent=True, what=f"GET {url} ({operation})")
        try:
            answer: RestAnswer = await retrying(get)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise self._unreachable(err, url, operation, job_id) from err
        return _parse_response(answer.status, answer.text, url, operation, job_id)


def _send(
    session: requests.Session, prepared: requests.PreparedRequest, timeout: float, options: dict[str, Any]
) -> RestAnswer:
    """One try of a sync call: send the prepared request, read the whole answer."""
    response = session.send(prepared, timeout=timeout, **options)
    return RestAnswer(response.status_code, response.text, response.headers.get("Retry-After"))


# ------------------------------------------------------------------------------------------ answers


def _error_text(text: str) -> str:
    """Flink's ``errors`` list of an error answer as text (or the raw body)."""
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


def _short(err: BaseException | None) -> str:
    text = str(err)
    return text if len(text) < 300 else text[:300] + "..."


def _parse_response(status: int, text: str, url: str, operation: str, job_id: str | None) -> Any:
    """JSON of a 2xx answer, else a :class:`FlinkRestError` carrying Flink's cause."""
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

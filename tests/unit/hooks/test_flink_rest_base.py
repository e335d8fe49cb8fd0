"""The transport under FlinkRestHook (``hooks/flink_rest_base.py``) against a real local HTTP server that plays
a Flink REST endpoint (``tests/fake_flink.py``): the one retry policy (what is retried, how often, for sync and
async calls alike), calls that must never be resent, errors, connection settings, secrets kept out of logs.

503s, unanswered requests and Flink-shaped errors are injected per path; everything else (requests, aiohttp,
tenacity, pydantic) is real. Nothing depends on the machine's speed: an answer that must come too late is held
until the test ends (``HELD``), and request counts after a client gave up are taken once the server has
read every request (``FakeFlink.settle``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from airflow_flink_replay.hooks.flink_rest import (
    FlinkJobNotFoundError,
    FlinkOutcomeUnknownError,
    FlinkRestError,
    FlinkRestHook,
    FlinkRestSettings,
    FlinkUnreachableError,
)
from airflow_flink_replay.hooks.flink_rest_base import FlinkRetryPolicy
from tests.fake_flink import HELD, JAVA_ERROR, JOB, FakeFlink, make_hook, serve
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)

OVERVIEW = {"taskmanagers": 1, "slots-total": 4, "slots-available": 3, "jobs-running": 1, "flink-version": "2.2.1"}
#: The client timeout of a test in which some answers are held and others must arrive in time: only the
#: answered requests need it, so it is far above what a loaded machine takes to answer one.
ANSWERED_WITHIN = 5.0

# --------------------------------------------------------------------------------------------- hook


def test_503_is_retried_then_succeeds(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/overview", (503, {}), (503, {}), (200, OVERVIEW))
    overview = make_hook(url).get_overview()
    assert overview.slots_available == 3 and overview.flink_version == "2.2.1"
    assert state.calls[("GET", "/overview")] == 3


def test_503_forever_fails_after_the_retries_naming_the_url(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/overview", (503, {"errors": ["Service temporarily unavailable"]}))
    with pytest.raises(FlinkUnreachableError) as info:
        make_hook(url).get_overview()
    assert f"{url}/overview" in str(info.value) and "HTTP 503" in str(info.value)
    assert state.calls[("GET", "/overview")] == 3  # 1 + 2 retries


def test_slow_answers_time_out_and_fail_after_retries(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, JOB, HELD))  # no answer while the client waits
    with pytest.raises(FlinkUnreachableError) as info:
        make_hook(url, timeout=0.2, retries=1).get_job("j1")
    assert f"Flink REST at {url} is unreachable: get job for job j1 failed after 1 retries" in str(info.value)
    state.settle()  # the client gave up without waiting for the server to read its requests
    assert state.calls[("GET", "/jobs/j1")] == 2


def test_flink_errors_keep_the_cause_not_the_frames(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("POST", "/jars/x/run", (400, {"errors": [JAVA_ERROR]}))
    with pytest.raises(FlinkRestError) as info:
        make_hook(url).run_jar("x", entry_class="Main")
    message = str(info.value)
    assert "Flink run jar failed (HTTP 400" in message
    assert "Cannot map checkpoint/savepoint state for operator abc" in message
    assert "\tat " not in message and "JarRunHandler.java" not in message
    assert info.value.status_code == 400 and info.value.details and "JarRunHandler" in info.value.details


def test_unknown_job_is_a_job_not_found_error(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on(
        "GET", "/jobs/nope", (404, {"errors": ["org.apache.flink.runtime.rest.NotFoundException: Job nope not found"]})
    )
    with pytest.raises(FlinkJobNotFoundError, match=f"Flink job nope not found at {url}"):
        make_hook(url).get_job("nope")


def test_auth_headers_are_sent_and_secrets_never_logged(
    fake: tuple[FakeFlink, str], caplog: pytest.LogCaptureFixture
) -> None:
    state, url = fake
    state.on("GET", "/overview", (200, OVERVIEW))
    caplog.set_level(logging.DEBUG)
    make_hook(url, auth=("admin", "s3cret-pw")).get_overview()
    make_hook(url, headers={"Authorization": "Bearer tok-XYZ"}).get_overview()
    assert state.headers[0]["Authorization"].startswith("Basic ")
    assert state.headers[1]["Authorization"] == "Bearer tok-XYZ"
    assert "s3cret-pw" not in caplog.text and "tok-XYZ" not in caplog.text
    assert "s3cret-pw" not in repr(make_hook(url, auth=("admin", "s3cret-pw")).settings)


def test_connection_fields_and_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLINK_UNIT",
        json.dumps(
            {
                "conn_type": "flink_rest",
                "host": "flink.example",
                "schema": "https",
                "port": 8443,
                "login": "u",
                "password": "p",
                "extra": {"verify": "false", "timeout": 7, "retries": 5},
            }
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLINK_URL",
        json.dumps({"conn_type": "flink_rest", "host": "http://10.0.0.1:8081/", "extra": {"bearer_token": "t"}}),
    )
    s = FlinkRestHook("flink_unit").settings
    assert (s.base_url, s.verify, s.timeout, s.retries, s.auth) == (
        "https://flink.example:8443",
        False,
        7.0,
        5,
        ("u", "p"),
    )
    u = FlinkRestHook("flink_url").settings
    assert u.base_url == "http://10.0.0.1:8081" and u.headers == {"Authorization": "Bearer t"} and u.auth is None
    assert FlinkRestHook("flink_url").job_ui_url("j1") == "http://10.0.0.1:8081/#/job/running/j1/overview"


def test_ui_extra_fields_configure_the_hook() -> None:
    """What the form stores in the extra (including fields left empty, stored as null) configures the hook."""
    from airflow.models.connection import Connection

    from airflow_flink_replay.hooks.flink_rest_base import settings_from_connection

    conn = Connection(
        conn_id="f",
        conn_type="flink_rest",
        host="https://flink.example:8443",
        extra=json.dumps({"bearer_token": "s3cret", "verify": False, "timeout": 7, "retries": None}),
    )
    s = settings_from_connection(conn)
    assert s.base_url == "https://flink.example:8443"
    assert s.headers["Authorization"] == "Bearer s3cret" and s.verify is False and s.timeout == 7
    assert s.retries == 3  # an empty form field means the default
    blank = settings_from_connection(
        Connection(
            conn_id="g",
            conn_type="flink_rest",
            host="127.0.0.1",
            port=8081,
            extra=json.dumps({"bearer_token": None, "verify": None, "timeout": None}),
        )
    )
    assert "Authorization" not in blank.headers and blank.verify is True and blank.timeout == 30


# ------------------------------------------------------------------ non-idempotent calls are never resent


def test_job_run_answered_503_is_not_resent_and_says_the_job_may_have_started(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("POST", "/jars/x/run", (503, {"errors": ["Service temporarily unavailable"]}), (200, {"jobid": "j9"}))
    with pytest.raises(FlinkOutcomeUnknownError) as info:
        make_hook(url).run_jar("x", entry_class="Main", flink_configuration={"pipeline.name": "prod"})
    assert state.calls[("POST", "/jars/x/run")] == 1, "a 503 after sending must not start a second job"
    message = str(info.value)
    assert f"the request was sent to {url}/jars/x/run but got no usable answer (HTTP 503" in message
    assert "Flink may have started the job anyway" in message
    assert "look for a job named 'prod' started after" in message and f"GET {url}/jobs/overview" in message
    assert info.value.status_code == 503


def test_job_run_read_timeout_is_not_resent(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("POST", "/jars/x/run", (200, {"jobid": "j9"}, HELD))
    with pytest.raises(FlinkOutcomeUnknownError, match=r"\(ReadTimeout: .*Flink may have started the job anyway"):
        make_hook(url, retries=3).run_jar("x", entry_class="Main", timeout=0.2)
    state.settle()  # a resent run would be counted by now
    assert state.calls[("POST", "/jars/x/run")] == 1


def test_job_run_is_retried_while_the_connection_is_refused(
    fake: tuple[FakeFlink, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused connections never reach Flink: resent until the endpoint answers, then exactly one run."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    state = FakeFlink()
    state.on("POST", "/jars/x/run", (200, {"jobid": "j9"}))
    servers: list[ThreadingHTTPServer] = []
    backoff = FlinkRetryPolicy.sleep

    def start_after_a_refusal(seconds: float) -> None:
        """The endpoint comes up once a try was refused, before the client's next try (not after a time)."""
        if not servers:
            servers.append(serve(state, port))
        backoff(seconds)

    monkeypatch.setattr(FlinkRetryPolicy, "sleep", staticmethod(start_after_a_refusal))
    try:
        hook = FlinkRestHook(settings=FlinkRestSettings(base_url=f"http://127.0.0.1:{port}", retries=6,
                                                        backoff_factor=0.2))  # fmt: skip
        assert hook.run_jar("x", entry_class="Main") == "j9"
        assert servers, "nothing listened at first: the first try must have been refused"
        assert state.calls[("POST", "/jars/x/run")] == 1
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_a_refused_jar_upload_is_resent_with_the_whole_jar(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The request is prepared once: a try after a refusal sends the same multipart body (the jar file is
    read once), and Flink stores exactly one copy."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    jar = tmp_path / "flink-python-2.2.1.jar"
    jar.write_bytes(b"PK fake jar")
    state = FakeFlink()
    state.on("POST", "/jars/upload", (200, {"filename": "/tmp/up/abc_flink-python-2.2.1.jar"}))
    servers: list[ThreadingHTTPServer] = []

    def start_after_a_refusal(seconds: float) -> None:
        if not servers:
            servers.append(serve(state, port))

    monkeypatch.setattr(FlinkRetryPolicy, "sleep", staticmethod(start_after_a_refusal))
    try:
        assert make_hook(f"http://127.0.0.1:{port}", retries=2).upload_jar(jar) == "abc_flink-python-2.2.1.jar"
        assert servers, "nothing listened at first: the first try must have been refused"
        assert state.calls[("POST", "/jars/upload")] == 1
        assert b"PK fake jar" in state.bodies[("POST", "/jars/upload")][0]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_refused_job_run_fails_after_the_retries_saying_it_never_reached_flink() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(FlinkUnreachableError) as info:
        make_hook(f"http://127.0.0.1:{port}", retries=1).run_jar("x", entry_class="Main")
    assert not isinstance(info.value, FlinkOutcomeUnknownError)
    assert f"Flink REST at http://127.0.0.1:{port} is unreachable: run jar failed after 1 retries" in str(info.value)
    assert "(the request never reached Flink)" in str(info.value)


def test_jar_upload_is_not_resent_after_a_502(fake: tuple[FakeFlink, str], tmp_path: Any) -> None:
    state, url = fake
    jar = tmp_path / "flink-python-2.2.1.jar"
    jar.write_bytes(b"PK fake jar")
    state.on("POST", "/jars/upload", (502, {}), (200, {"filename": "/tmp/up/abc_flink-python-2.2.1.jar"}))
    with pytest.raises(FlinkOutcomeUnknownError, match=f"Flink may have stored the upload; GET {url}/jars lists"):
        make_hook(url).upload_jar(jar)
    assert state.calls[("POST", "/jars/upload")] == 1
    assert make_hook(url).upload_jar(jar) == "abc_flink-python-2.2.1.jar"
    assert b"PK fake jar" in state.bodies[("POST", "/jars/upload")][-1]  # multipart with the jar's bytes


def test_savepoint_and_stop_with_a_trigger_id_are_resent_without_one_not(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("POST", "/jobs/j1/savepoints", (503, {}), (202, {"request-id": "t1"}))
    state.on("POST", "/jobs/j1/stop", (202, {"request-id": "t2"}, HELD), (202, {"request-id": "t2"}))
    hook = make_hook(url, timeout=ANSWERED_WITHIN)
    assert hook.trigger_savepoint("j1", "file:///sp", trigger_id="t1") == "t1"
    assert [b["triggerId"] for b in state.bodies[("POST", "/jobs/j1/savepoints")]] == ["t1", "t1"]
    assert hook.stop_with_savepoint("j1", "file:///sp", drain=True, trigger_id="t2") == "t2"  # read timeout, resent
    state.settle()  # the first, unanswered stop is counted however late the server read it
    assert state.calls[("POST", "/jobs/j1/stop")] == 2

    state.on("POST", "/jobs/j2/savepoints", (503, {}), (202, {"request-id": "u1"}))
    state.on("POST", "/jobs/j2/stop", (504, {}), (202, {"request-id": "u2"}))
    with pytest.raises(FlinkOutcomeUnknownError, match=f"Flink may have started a savepoint; GET {url}/jobs/j2/chec"):
        hook.trigger_savepoint("j2", "file:///sp")
    with pytest.raises(FlinkOutcomeUnknownError, match=r"Flink may be stopping the job; .*Pass trigger_id"):
        hook.stop_with_savepoint("j2", "file:///sp", drain=True)
    assert state.calls[("POST", "/jobs/j2/savepoints")] == 1 and state.calls[("POST", "/jobs/j2/stop")] == 1


# ------------------------------------------------------------------ one retry policy, sync and async


async def _aget(hook: FlinkRestHook, path: str, operation: str = "cluster overview") -> Any:
    """An async GET as the triggers make it: in the hook's aiohttp session."""
    async with hook.async_session() as session:
        return await hook.aget(session, path, operation=operation)


def test_one_policy_object_retries_the_sync_and_the_async_calls(
    fake: tuple[FakeFlink, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """503 twice then 200: the sync call and the async call both retry and succeed, each run by the hook's one
    ``FlinkRetryPolicy`` (the same object, the same ``retry_args``)."""
    state, url = fake
    used: list[tuple[FlinkRetryPolicy, bool]] = []
    real_args = FlinkRetryPolicy.retry_args

    def spy(policy: FlinkRetryPolicy, *, idempotent: bool, what: str) -> dict[str, Any]:
        used.append((policy, idempotent))
        return real_args(policy, idempotent=idempotent, what=what)

    monkeypatch.setattr(FlinkRetryPolicy, "retry_args", spy)
    hook = make_hook(url)
    state.on("GET", "/overview", (503, {}), (503, {}), (200, OVERVIEW))
    assert hook.get_overview().slots_available == 3
    assert state.calls[("GET", "/overview")] == 3
    state.on("GET", "/overview", (503, {}), (503, {}), (200, OVERVIEW))
    assert asyncio.run(_aget(hook, "/overview"))["slots-available"] == 3
    assert state.calls[("GET", "/overview")] == 6
    assert [idempotent for _, idempotent in used] == [True, True]
    assert used[0][0] is used[1][0] is hook.retry_policy


def test_the_policy_spends_the_same_retries_sync_and_async(
    fake: tuple[FakeFlink, str], capfd: pytest.CaptureFixture[str]
) -> None:
    """503 forever with retries=1: two tries on either path, then the last answer as the error; each retry is
    logged once, naming the call and the cause."""
    state, url = fake
    state.on("GET", "/overview", (503, {"errors": ["Service temporarily unavailable"]}))
    hook = make_hook(url, retries=1)
    with pytest.raises(FlinkUnreachableError, match=r"failed \(HTTP 503 from .*/overview\)"):
        hook.get_overview()
    assert state.calls[("GET", "/overview")] == 2
    with pytest.raises(FlinkUnreachableError, match=r"failed \(HTTP 503 from .*/overview\)"):
        asyncio.run(_aget(hook, "/overview"))
    assert state.calls[("GET", "/overview")] == 4
    logged = capfd.readouterr()
    retries = [line for line in (logged.out + logged.err).splitlines() if "retry 1 of 1" in line]
    assert len(retries) == 2 and all(f"GET {url}/overview (cluster overview) failed (HTTP 503)" in r for r in retries)


def test_an_error_answer_that_is_not_transient_is_not_retried_sync_or_async(fake: tuple[FakeFlink, str]) -> None:
    """A 4xx is Flink's answer, not an outage: neither path asks again."""
    state, url = fake
    state.on("GET", "/jobs/bad", (400, {"errors": ["Invalid JobID"]}))
    state.on("GET", "/jobs/busy", (429, {"errors": ["Too many requests"]}))  # no Retry-After: not retried
    hook = make_hook(url, retries=3)
    for job_id in ("bad", "busy"):
        path = f"/jobs/{job_id}"
        with pytest.raises(FlinkRestError) as sync_error:
            hook.get_job(job_id)
        with pytest.raises(FlinkRestError) as async_error:
            asyncio.run(_aget(hook, path, "get job"))
        assert not isinstance(sync_error.value, FlinkUnreachableError) and sync_error.value.status_code
        assert type(async_error.value) is type(sync_error.value)
        assert state.calls[("GET", path)] == 2  # one try each


def test_a_retry_after_answer_is_retried_after_the_time_it_asks_sync_and_async(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """429 with ``Retry-After: 2`` (as a proxy in front of Flink answers), then 200: both paths wait the 2 s
    it asks (not the backoff), then succeed. A server of its own: the scripted Flink sends no such header."""
    answers: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answers.append(429 if len(answers) % 2 == 0 else 200)
            body = json.dumps(OVERVIEW if answers[-1] == 200 else {"errors": ["slow down"]}).encode()
            self.send_response(answers[-1])
            if answers[-1] == 429:
                self.send_header("Retry-After", "2")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    waits: list[float] = []

    async def asleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(FlinkRetryPolicy, "sleep", staticmethod(waits.append))
    monkeypatch.setattr(FlinkRetryPolicy, "asleep", staticmethod(asleep))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hook = make_hook(f"http://127.0.0.1:{server.server_address[1]}")
        assert hook.get_overview().slots_available == 3
        assert asyncio.run(_aget(hook, "/overview"))["slots-available"] == 3
    finally:
        server.shutdown()
        server.server_close()
    assert answers == [429, 200, 429, 200] and waits == [2.0, 2.0]

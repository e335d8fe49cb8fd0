"""FlinkRestHook, triggers and models against a real local HTTP server that plays a Flink REST endpoint.

The server (``http.server`` in a thread) answers scripted responses per path, so 503s, slow answers and
Flink-shaped errors can be injected; everything else (requests, urllib3 Retry, aiohttp, pydantic) is real.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from airflow_flink_replay.core.flink_models import (
    AsyncOperationStatus,
    CheckpointStats,
    FlinkPythonProgram,
    JobDetails,
    JobExceptions,
    ProductionPlan,
)
from airflow_flink_replay.hooks.flink_rest import (
    FlinkJobNotFoundError,
    FlinkOutcomeUnknownError,
    FlinkRestError,
    FlinkRestHook,
    FlinkRestSettings,
    FlinkUnreachableError,
    flink_cause,
)
from airflow_flink_replay.hooks.flink_submit import (
    FlinkSubmissionError,
    RestPythonSubmitter,
    program_failure_cause,
    python_traceback_from_log,
)
from airflow_flink_replay.operators.flink import operation_trigger_id, savepoint_of_run
from airflow_flink_replay.triggers.flink import FlinkAsyncOperationTrigger, FlinkJobStateTrigger

JAVA_ERROR = (
    "org.apache.flink.runtime.rest.handler.RestHandlerException: Could not execute application.\n"
    "\tat org.apache.flink.runtime.webmonitor.handlers.JarRunHandler.lambda$handleRequest$1(JarRunHandler.java:114)\n"
    "\tat java.base/java.lang.Thread.run(Thread.java:840)\n"
    "Caused by: java.lang.IllegalStateException: Cannot map checkpoint/savepoint state for operator abc\n"
    "\t... 4 more\n"
)


class FakeFlink:
    """Scripted answers: ``routes[(method, path)]`` is a list of (status, body, delay) used in turn.

    A route path ending in ``*`` answers every path with that prefix (ids the code under test derives).
    Every request's body is recorded in ``bodies[(method, path)]`` (JSON decoded, else the raw bytes).
    """

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[tuple[int, Any, float]]] = {}
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self.bodies: dict[tuple[str, str], list[Any]] = defaultdict(list)
        self.headers: list[dict[str, str]] = []

    def on(self, method: str, path: str, *answers: tuple[int, Any] | tuple[int, Any, float]) -> None:
        self.routes[(method, path)] = [(a[0], a[1], a[2] if len(a) > 2 else 0.0) for a in answers]  # type: ignore[misc]

    def record(self, method: str, path: str, raw: bytes) -> None:
        try:
            self.bodies[(method, path)].append(json.loads(raw) if raw else None)
        except ValueError:
            self.bodies[(method, path)].append(raw)

    def answer(self, method: str, path: str) -> tuple[int, Any, float]:
        self.calls[(method, path)] += 1
        answers = self.routes.get((method, path))
        if answers is None:
            prefixed = [k for k in self.routes if k[0] == method and k[1].endswith("*") and path.startswith(k[1][:-1])]
            answers = self.routes[prefixed[0]] if prefixed else None
        if not answers:
            return 404, {"errors": ["Not found: " + path]}, 0.0
        return answers.pop(0) if len(answers) > 1 else answers[0]

    def paths(self, method: str) -> list[str]:
        """Paths called with ``method``."""
        return [p for (m, p) in self.calls if m == method]


def serve(state: FakeFlink, port: int = 0) -> ThreadingHTTPServer:
    """Serve ``state`` on 127.0.0.1:``port`` (0: any free port) in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            state.headers.append(dict(self.headers))
            length = int(self.headers.get("Content-Length") or 0)
            state.record(self.command, self.path, self.rfile.read(length) if length else b"")
            status, body, delay = state.answer(self.command, self.path)
            if delay:
                time.sleep(delay)
            payload = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

        do_GET = do_POST = do_PATCH = do_DELETE = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def fake() -> Iterator[tuple[FakeFlink, str]]:
    state = FakeFlink()
    server = serve(state)
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def make_hook(url: str, **kwargs: Any) -> FlinkRestHook:
    settings = FlinkRestSettings(base_url=url, retries=kwargs.pop("retries", 2), backoff_factor=0.01, **kwargs)
    return FlinkRestHook(settings=settings)


OVERVIEW = {"taskmanagers": 1, "slots-total": 4, "slots-available": 3, "jobs-running": 1, "flink-version": "2.2.1"}
JOB = {
    "jid": "j1",
    "name": "prod",
    "state": "RUNNING",
    "start-time": 1,
    "end-time": -1,
    "maxParallelism": -1,
    "timestamps": {"RUNNING": 5},
    "vertices": [
        {"id": "v1", "name": "Source: in", "parallelism": 1, "maxParallelism": 128, "status": "RUNNING"},
        {"id": "v2", "name": "action-execute-operator -> Map", "parallelism": 2, "maxParallelism": 256,
         "status": "RUNNING"},
    ],
}  # fmt: skip


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
    state.on("GET", "/jobs/j1", (200, JOB, 1.0))
    with pytest.raises(FlinkUnreachableError) as info:
        make_hook(url, timeout=0.2, retries=1).get_job("j1")
    assert f"Flink REST at {url} is unreachable: get job for job j1 failed after 1 retries" in str(info.value)
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


def test_savepoint_wait_reports_failure_cause_and_timeout(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("POST", "/jobs/j1/savepoints", (202, {"request-id": "t1"}))
    state.on(
        "GET",
        "/jobs/j1/savepoints/t1",
        (200, {"status": {"id": "IN_PROGRESS"}}),
        (
            200,
            {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": {"class": "x", "stack-trace": JAVA_ERROR}}},
        ),
    )
    state.on("GET", "/jobs/j1/savepoints/t2", (200, {"status": {"id": "IN_PROGRESS"}}))
    hook = make_hook(url)
    assert hook.trigger_savepoint("j1", "file:///sp", trigger_id="t1") == "t1"
    with pytest.raises(
        FlinkRestError, match=r"(?s)failed \(trigger t1\); no checkpoint is used instead\. Cause: .*Cannot map"
    ):
        hook.wait_for_savepoint("j1", "t1", timeout=5, poll_interval=0.01)
    with pytest.raises(FlinkRestError, match=r"did not complete within 0\.2 s \(trigger t2\)"):
        hook.wait_for_savepoint("j1", "t2", timeout=0.2, poll_interval=0.05)


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
    state.on("POST", "/jars/x/run", (200, {"jobid": "j9"}, 1.0))
    with pytest.raises(FlinkOutcomeUnknownError, match=r"\(ReadTimeout: .*Flink may have started the job anyway"):
        make_hook(url, retries=3).run_jar("x", entry_class="Main", timeout=0.2)
    assert state.calls[("POST", "/jars/x/run")] == 1


def test_job_run_is_retried_while_the_connection_is_refused(fake: tuple[FakeFlink, str]) -> None:
    """Refused connections never reach Flink: resent until the endpoint answers, then exactly one run."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    state = FakeFlink()
    state.on("POST", "/jars/x/run", (200, {"jobid": "j9"}))
    later = threading.Timer(0.3, lambda: servers.append(serve(state, port)))
    servers: list[ThreadingHTTPServer] = []
    later.start()  # nothing listens at first: the first tries are refused
    try:
        hook = FlinkRestHook(settings=FlinkRestSettings(base_url=f"http://127.0.0.1:{port}", retries=6,
                                                        backoff_factor=0.2))  # fmt: skip
        assert hook.run_jar("x", entry_class="Main") == "j9"
        assert state.calls[("POST", "/jars/x/run")] == 1
    finally:
        later.join()
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
    state.on("POST", "/jobs/j1/stop", (202, {"request-id": "t2"}, 1.0), (202, {"request-id": "t2"}))
    hook = make_hook(url, timeout=0.3)
    assert hook.trigger_savepoint("j1", "file:///sp", trigger_id="t1") == "t1"
    assert [b["triggerId"] for b in state.bodies[("POST", "/jobs/j1/savepoints")]] == ["t1", "t1"]
    assert hook.stop_with_savepoint("j1", "file:///sp", drain=True, trigger_id="t2") == "t2"  # read timeout, resent
    assert state.calls[("POST", "/jobs/j1/stop")] == 2

    state.on("POST", "/jobs/j2/savepoints", (503, {}), (202, {"request-id": "u1"}))
    state.on("POST", "/jobs/j2/stop", (504, {}), (202, {"request-id": "u2"}))
    with pytest.raises(FlinkOutcomeUnknownError, match=f"Flink may have started a savepoint; GET {url}/jobs/j2/chec"):
        hook.trigger_savepoint("j2", "file:///sp")
    with pytest.raises(FlinkOutcomeUnknownError, match=r"Flink may be stopping the job; .*Pass trigger_id"):
        hook.stop_with_savepoint("j2", "file:///sp", drain=True)
    assert state.calls[("POST", "/jobs/j2/savepoints")] == 1 and state.calls[("POST", "/jobs/j2/stop")] == 1


def test_rest_submission_with_an_unanswered_run_is_not_resubmitted(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jars", (200, {"files": [{"id": "py_flink-python.jar", "name": "flink-python-2.2.1.jar"}]}))
    state.on("POST", "/jars/py_flink-python.jar/run", (504, {}), (200, {"jobid": "j9"}))
    program = FlinkPythonProgram(module="jobs.prod", job_name="prod")
    with pytest.raises(FlinkSubmissionError) as info:
        RestPythonSubmitter(make_hook(url)).submit(program)
    assert state.calls[("POST", "/jars/py_flink-python.jar/run")] == 1
    first = str(info.value).splitlines()[0]
    assert first.startswith("Submitting jobs.prod over REST: outcome unknown.")
    assert "Flink may have started the job anyway" in first and "a job named 'prod'" in first


# ------------------------------------------------------------------------------------- request bodies


def test_savepoint_and_stop_bodies(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("POST", "/jobs/j1/savepoints", (202, {"request-id": "t1"}))
    state.on("POST", "/jobs/j1/stop", (202, {"request-id": "t2"}))
    hook = make_hook(url)
    hook.trigger_savepoint("j1", "file:///sp/a", format_type="NATIVE", trigger_id="t1")
    hook.trigger_savepoint("j1")
    hook.stop_with_savepoint("j1", "file:///sp/b", drain=True, trigger_id="t2")
    hook.stop_with_savepoint("j1", "file:///sp/c", format_type="NATIVE")
    assert state.bodies[("POST", "/jobs/j1/savepoints")] == [
        {"cancel-job": False, "formatType": "NATIVE", "target-directory": "file:///sp/a", "triggerId": "t1"},
        {"cancel-job": False, "formatType": "CANONICAL"},
    ]
    assert state.bodies[("POST", "/jobs/j1/stop")] == [
        {"drain": True, "formatType": "CANONICAL", "targetDirectory": "file:///sp/b", "triggerId": "t2"},
        {"drain": False, "formatType": "NATIVE", "targetDirectory": "file:///sp/c"},
    ]


def test_run_jar_and_jar_plan_bodies(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("POST", "/jars/x/run", (200, {"jobid": "j9"}))
    state.on("POST", "/jars/x/plan", (200, {"plan": {"jid": "p", "name": "prod", "nodes": []}}))
    hook = make_hook(url)
    args = ["-pym", "jobs.prod", "--x", "1"]
    assert hook.run_jar("x", entry_class="Main", program_args=args, savepoint_path="file:/sp/savepoint-1",
                        allow_non_restored_state=True, parallelism=3,
                        flink_configuration={"pipeline.name": "prod"}) == "j9"  # fmt: skip
    hook.run_jar("x", entry_class="Main", savepoint_path="file:/sp/savepoint-2")
    hook.run_jar("x", program_args=args, allow_non_restored_state=True)
    hook.jar_plan("x", entry_class="Main", program_args=args, parallelism=2)
    assert state.bodies[("POST", "/jars/x/run")] == [
        {"entryClass": "Main", "programArgsList": args, "savepointPath": "file:/sp/savepoint-1",
         "allowNonRestoredState": True, "parallelism": 3, "flinkConfiguration": {"pipeline.name": "prod"}},
        {"entryClass": "Main", "savepointPath": "file:/sp/savepoint-2", "allowNonRestoredState": False},
        {"programArgsList": args},  # the flag only means something with a savepoint
    ]  # fmt: skip
    assert state.bodies[("POST", "/jars/x/plan")] == [{"entryClass": "Main", "programArgsList": args, "parallelism": 2}]


def test_rest_submitter_sends_the_program_savepoint_and_parallelism(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on(
        "GET",
        "/jars",
        (200, {"files": [{"id": "old_flink-python.jar", "name": "flink-python-2.2.1.jar", "uploaded": 1},
                         {"id": "new_flink-python.jar", "name": "flink-python-2.2.1.jar", "uploaded": 2},
                         {"id": "other.jar", "name": "other.jar", "uploaded": 3}]}),
    )  # fmt: skip
    state.on("POST", "/jars/new_flink-python.jar/run", (200, {"jobid": "j9"}))
    program = FlinkPythonProgram(module="jobs.prod", program_args=["--x", "1"], job_name="prod", parallelism=1)
    submitted = RestPythonSubmitter(make_hook(url)).submit(
        program, savepoint_path="file:/sp/savepoint-1", allow_non_restored_state=True, parallelism=2, job_name="p2"
    )
    assert submitted.job_id == "j9" and submitted.savepoint_path == "file:/sp/savepoint-1"
    (body,) = state.bodies[("POST", "/jars/new_flink-python.jar/run")]
    assert body == {
        "entryClass": "org.apache.flink.client.python.PythonDriver",
        "programArgsList": ["-pym", "jobs.prod", "--x", "1"],
        "savepointPath": "file:/sp/savepoint-1",
        "allowNonRestoredState": True,
        "parallelism": 2,
        "flinkConfiguration": {"parallelism.default": "2", "pipeline.name": "p2"},
    }


def test_plan_jars_list_and_delete(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on(
        "GET",
        "/jobs/j1/plan",
        (200, {"plan": {"jid": "j1", "name": "prod", "type": "STREAMING", "nodes": [
            {"id": "v2", "parallelism": 2, "description": "action-execute-operator<br/>+- Map",
             "inputs": [{"id": "v1", "ship_strategy": "HASH"}]},
            {"id": "v1", "parallelism": 1, "description": "Source: source", "inputs": []}]}}),
    )  # fmt: skip
    state.on("GET", "/jars", (200, {"address": url, "files": [{"id": "a_x.jar", "name": "x.jar", "uploaded": 7,
                                                                "entry": [{"name": "Main"}]}]}))  # fmt: skip
    state.on("DELETE", "/jars/a_x.jar", (200, {}))
    state.on("PATCH", "/jobs/j1?mode=cancel", (202, {}))
    state.on("PATCH", "/jobs/j2?mode=cancel", (409, {"errors": ["Job j2 is not running"]}))
    hook = make_hook(url)
    plan = hook.get_plan("j1")
    assert (plan.jid, plan.name, plan.type) == ("j1", "prod", "STREAMING")
    assert [(n.id, n.parallelism, [i.id for i in n.inputs]) for n in plan.nodes] == [("v2", 2, ["v1"]), ("v1", 1, [])]
    assert "action-execute-operator" in plan.nodes[0].description
    jars = hook.list_jars()
    assert [(j.id, j.name, j.uploaded) for j in jars] == [("a_x.jar", "x.jar", 7)]
    hook.delete_jar("a_x.jar")
    assert state.calls[("DELETE", "/jars/a_x.jar")] == 1
    with pytest.raises(FlinkRestError, match=r"Flink delete jar gone\.jar failed \(HTTP 404"):
        hook.delete_jar("gone.jar")
    hook.cancel_job("j1")
    hook.cancel_job("j2")  # an ended job is left alone
    assert state.calls[("PATCH", "/jobs/j1?mode=cancel")] == 1 and state.calls[("PATCH", "/jobs/j2?mode=cancel")] == 1


def test_job_ui_url_follows_the_flink_dashboard_routes() -> None:
    hook = make_hook("http://flink:8081")
    assert hook.job_ui_url("j1") == "http://flink:8081/#/job/running/j1/overview"
    assert hook.job_ui_url("j1", "RUNNING") == "http://flink:8081/#/job/running/j1/overview"
    assert hook.job_ui_url("j1", "INITIALIZING") == "http://flink:8081/#/job/running/j1/overview"
    for ended in ("FINISHED", "CANCELED", "FAILED", "finished"):
        assert hook.job_ui_url("j1", ended) == "http://flink:8081/#/job/completed/j1/overview"


# ------------------------------------------------------------------------------------------ triggers


@pytest.fixture
def conn_env(fake: tuple[FakeFlink, str], monkeypatch: pytest.MonkeyPatch) -> FakeFlink:
    state, url = fake
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLINK_FAKE", json.dumps({"conn_type": "flink_rest", "host": url, "extra": {"retries": 1}})
    )
    return state


async def _first_event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("no event")


def test_trigger_serialize_round_trips() -> None:
    from airflow.sdk.module_loading import import_string

    for trigger in (
        FlinkAsyncOperationTrigger("j1", "t1", "stop with savepoint (drain)", "c", timeout=9, carry={"a": 1}),
        FlinkJobStateTrigger("j1", ["running"], "c", timeout=9, poll_interval=2, all_tasks_running=True),
    ):
        path, kwargs = trigger.serialize()
        again = import_string(path)(**kwargs)
        assert again.serialize() == (path, kwargs)
        assert kwargs["deadline"] == trigger.deadline  # the deadline is absolute: a restart does not extend it
        again.trigger_id = 42  # what the triggerer does (its DB id): must not touch Flink's request id
        assert again.serialize() == (path, kwargs)


def test_async_operation_trigger_events(conn_env: FakeFlink) -> None:
    conn_env.on(
        "GET",
        "/jobs/j1/savepoints/ok",
        (200, {"status": {"id": "IN_PROGRESS"}}),
        (200, {"status": {"id": "COMPLETED"}, "operation": {"location": "file:/sp/savepoint-1"}}),
    )
    conn_env.on(
        "GET",
        "/jobs/j1/savepoints/bad",
        (200, {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": {"stack-trace": JAVA_ERROR}}}),
    )
    conn_env.on("GET", "/jobs/j1/savepoints/slow", (200, {"status": {"id": "IN_PROGRESS"}}))
    ok = asyncio.run(
        _first_event(
            FlinkAsyncOperationTrigger("j1", "ok", flink_conn_id="flink_fake", poll_interval=0.01, carry={"k": "v"})
        )
    )
    assert ok["status"] == "success" and ok["location"] == "file:/sp/savepoint-1" and ok["carry"] == {"k": "v"}
    bad = asyncio.run(_first_event(FlinkAsyncOperationTrigger("j1", "bad", flink_conn_id="flink_fake")))
    assert bad["status"] == "error" and "Cannot map checkpoint/savepoint state" in bad["message"]
    slow = asyncio.run(
        _first_event(
            FlinkAsyncOperationTrigger("j1", "slow", flink_conn_id="flink_fake", timeout=0.3, poll_interval=0.05)
        )
    )
    assert slow["status"] == "timeout" and "did not complete within 0.3 s" in slow["message"]


def test_job_state_trigger_events(conn_env: FakeFlink) -> None:
    deploying = {**JOB, "vertices": [{**v, "status": "DEPLOYING"} for v in JOB["vertices"]]}
    conn_env.on("GET", "/jobs/j1", (200, deploying), (200, JOB))
    conn_env.on("GET", "/jobs/j2", (200, {**JOB, "jid": "j2", "state": "FAILED"}))
    conn_env.on(
        "GET",
        "/jobs/j2/exceptions",
        (200, {"exceptionHistory": {"entries": [{"exceptionName": "x", "stacktrace": JAVA_ERROR, "timestamp": 3}]}}),
    )
    conn_env.on("GET", "/jobs/j3", (200, {**JOB, "jid": "j3", "state": "INITIALIZING"}))
    ok = asyncio.run(
        _first_event(FlinkJobStateTrigger("j1", ["RUNNING"], "flink_fake", poll_interval=0.01, all_tasks_running=True))
    )
    assert ok["status"] == "success" and ok["state"] == "RUNNING" and conn_env.calls[("GET", "/jobs/j1")] == 2
    failed = asyncio.run(_first_event(FlinkJobStateTrigger("j2", ["RUNNING"], "flink_fake")))
    assert failed["status"] == "error" and "ended FAILED" in failed["message"]
    assert "Cannot map checkpoint/savepoint state for operator abc" in failed["message"]
    slow = asyncio.run(
        _first_event(FlinkJobStateTrigger("j3", ["RUNNING"], "flink_fake", timeout=0.2, poll_interval=0.05))
    )
    assert slow["status"] == "timeout" and "(state INITIALIZING)" in slow["message"]


def test_job_state_trigger_canceled_ends_the_wait_unless_targeted(conn_env: FakeFlink) -> None:
    conn_env.on("GET", "/jobs/j4", (200, {**JOB, "jid": "j4"}), (200, {**JOB, "jid": "j4", "state": "CANCELED"}))
    conn_env.on("GET", "/jobs/j4/exceptions", (200, {"exceptionHistory": {"entries": []}}))
    conn_env.on("GET", "/jobs/j5", (200, {**JOB, "jid": "j5", "state": "CANCELED"}))
    conn_env.on(
        "GET",
        "/jobs/j5/exceptions",
        (200, {"exceptionHistory": {"entries": [{"stacktrace": "java.lang.RuntimeException: cancelled by ops"}]}}),
    )
    canceled = asyncio.run(
        _first_event(FlinkJobStateTrigger("j4", ["FINISHED"], "flink_fake", poll_interval=0.01, carry={"c": 1}))
    )
    assert canceled["status"] == "error" and canceled["state"] == "CANCELED" and canceled["carry"] == {"c": 1}
    assert canceled["message"] == "Flink job j4 ended CANCELED while waiting for ['FINISHED']: no exception recorded"
    assert conn_env.calls[("GET", "/jobs/j4")] == 2  # polled RUNNING first, then ended
    with_cause = asyncio.run(_first_event(FlinkJobStateTrigger("j5", ["RUNNING"], "flink_fake")))
    assert with_cause["status"] == "error" and "ended CANCELED" in with_cause["message"]
    assert with_cause["message"].endswith("java.lang.RuntimeException: cancelled by ops")
    targeted = asyncio.run(_first_event(FlinkJobStateTrigger("j5", ["canceled", "FINISHED"], "flink_fake")))
    assert targeted["status"] == "success" and targeted["state"] == "CANCELED"


# -------------------------------------------------------------------------------------------- models


def test_models_parse_flink_shapes() -> None:
    job = JobDetails.model_validate(JOB)
    plan = ProductionPlan.from_job(job)
    assert plan.agent_vertex_id == "v2" and plan.agent_vertex and plan.agent_vertex.max_parallelism == 256
    assert (
        ProductionPlan.from_job(JobDetails.model_validate({**JOB, "vertices": JOB["vertices"][:1]})).agent_vertex_id
        is None
    )
    assert AsyncOperationStatus.model_validate(
        {"status": {"id": "COMPLETED"}, "operation": {"location": "x"}}
    ).succeeded
    stats = CheckpointStats.model_validate(
        {
            "counts": {"completed": 2},
            "latest": {"savepoint": {"id": 4, "status": "COMPLETED", "is_savepoint": True, "external_path": "file:/a"}},
            "history": [
                {"id": 5, "status": "FAILED", "is_savepoint": True},
                {"id": 3, "status": "COMPLETED", "is_savepoint": True, "external_path": "file:/b"},
                {"id": 2, "status": "COMPLETED", "is_savepoint": False, "external_path": "file:/chk"},
            ],
        }
    )
    assert [s.external_path for s in stats.savepoints()] == ["file:/a", "file:/b"]
    exc = JobExceptions.model_validate({"exceptionHistory": {"entries": [{"stacktrace": JAVA_ERROR, "timestamp": 1}]}})
    assert exc.summary() == "java.lang.IllegalStateException: Cannot map checkpoint/savepoint state for operator abc"
    assert flink_cause(JAVA_ERROR).splitlines()[-1].startswith("Caused by: java.lang.IllegalStateException")


def test_python_program_model() -> None:
    program = FlinkPythonProgram(
        module="jobs.prod", pyfs=["/a", "/b.py"], program_args=["--x", "1"], parallelism=2, job_name="prod",
        extra_jars=["/j/k.jar"], flink_config={"python.fn-execution.bundle.size": 20, "x.enabled": True},
    )  # fmt: skip
    assert program.driver_args() == ["-pym", "jobs.prod", "-pyfs", "/a,/b.py", "--x", "1"]
    assert program.configuration() == {
        "python.fn-execution.bundle.size": "20",
        "x.enabled": "true",
        "parallelism.default": "2",
        "pipeline.name": "prod",
        "pipeline.classpaths": "file:///j/k.jar",
    }
    with pytest.raises(ValueError, match="exactly one of 'entry_point'"):
        FlinkPythonProgram(entry_point="a.py", module="a")
    with pytest.raises(ValueError, match=r"entry_point must be a \.py file"):
        FlinkPythonProgram(entry_point="a.jar")


def test_trigger_ids_are_deterministic_per_task_instance_and_attempt() -> None:
    a = operation_trigger_id("dag", "run", "task", -1, "job", "drain", 0)
    assert a == operation_trigger_id("dag", "run", "task", -1, "job", "drain", 0)
    assert len(a) == 32 and int(a, 16) >= 0
    assert a != operation_trigger_id("dag", "run2", "task", -1, "job", "drain", 0)
    assert a != operation_trigger_id("dag", "run", "task", -1, "job", "drain", 1)


_DRIVER = "2026-11-29 08:54:58,742 INFO  org.apache.flink.client.python.PythonDriver                  [] - "
_ENV = "2026-11-29 08:54:58,700 INFO  org.apache.flink.client.python.PythonEnvUtils [] - Starting Python process "
JM_LOG = "\n".join(
    [
        _ENV + "with environment variables: {...}, command: /venv/bin/python -u /jobs/other.py --a 1",
        _DRIVER + "Traceback (most recent call last):",
        _DRIVER + "ValueError: not mine",
        _ENV + "with environment variables: {...}, command: /venv/bin/python -u /jobs/job.py --x 1",
        _DRIVER + "--------------------------- Python Process Started --------------------------",
        _DRIVER + "Traceback (most recent call last):",
        _DRIVER + '  File "/jobs/job.py", line 3, in <module>',
        _DRIVER + "RuntimeError: BOOM",
        _DRIVER + "--------------------------- Python Process Exited ---------------------------",
        "2026-11-29 08:54:58,764 ERROR org.apache.flink.client.python.PythonDriver [] - Run python process failed",
        "java.lang.RuntimeException: Python process exits with code: 1",
    ]
)


def test_python_traceback_is_taken_from_this_programs_run_in_the_jm_log() -> None:
    program = FlinkPythonProgram(entry_point="/jobs/job.py", program_args=["--x", "1"])
    text = python_traceback_from_log(JM_LOG, program)
    assert text.splitlines() == [
        "Traceback (most recent call last):",
        '  File "/jobs/job.py", line 3, in <module>',
        "RuntimeError: BOOM",
    ]
    assert program_failure_cause(text) == "RuntimeError: BOOM"
    assert python_traceback_from_log(JM_LOG, FlinkPythonProgram(entry_point="/jobs/absent.py")) == ""


# ------------------------------------------------------------------------------ sensor under dag.test


def test_job_sensor_defers_and_links_the_job(
    fake: tuple[FakeFlink, str], airflow_db: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FlinkJobSensor under dag.test(): the deferral runs FlinkJobStateTrigger inline; the link is stored."""
    from datetime import datetime

    from airflow.models.xcom import XComModel
    from airflow.sdk import DAG
    from airflow.utils.session import create_session

    from airflow_flink_replay.links.flink import FlinkJobLink
    from airflow_flink_replay.sensors.flink import FlinkJobSensor
    from tests.jobs.harness import run_dag_test, unique

    state, url = fake
    starting = {**JOB, "state": "INITIALIZING"}
    state.on("GET", "/jobs/j1", (200, starting), (200, starting), (200, JOB))
    state.on("GET", "/jobs/j2", (200, {**JOB, "jid": "j2", "state": "FAILED"}))
    state.on("GET", "/jobs/j2/exceptions", (200, {"exceptionHistory": {"entries": [{"stacktrace": JAVA_ERROR}]}}))
    conn_file = tmp_path / "conns.json"
    conn_file.write_text(json.dumps({"flink_fake": {"conn_type": "flink_rest", "host": url}}))
    # also as an env var: Airflow caches the secrets backends of the first dag.test() in a process
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_FAKE", json.dumps({"conn_type": "flink_rest", "host": url}))
    errors: list[str] = []
    dag_id = unique("cp-sensor")
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        FlinkJobSensor(task_id="wait_ok", job_id="j1", flink_conn_id="flink_fake", deferrable=True, poll_interval=0.05)
        FlinkJobSensor(
            task_id="wait_failed",
            job_id="j2",
            flink_conn_id="flink_fake",
            deferrable=True,
            on_failure_callback=lambda ctx: errors.append(str(ctx["exception"])),
        )
    dr = run_dag_test(dag, str(conn_file))
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert states == {"wait_ok": "success", "wait_failed": "failed"}
    assert state.calls[("GET", "/jobs/j1")] >= 3  # polled through INITIALIZING by the trigger
    assert "Flink job j2 ended FAILED" in errors[0] and "Cannot map checkpoint/savepoint state" in errors[0]
    with create_session() as session:
        links = {
            x.task_id: XComModel.deserialize_value(x)
            for x in session.query(XComModel).filter_by(dag_id=dag_id, key=FlinkJobLink().xcom_key)
        }
    assert links == {
        "wait_ok": f"{url}/#/job/running/j1/overview",
        "wait_failed": f"{url}/#/job/completed/j2/overview",  # an ended job's page is under completed/
    }


def test_quiesce_and_resume_under_dag_test_send_their_requests_and_link_the_right_pages(
    fake: tuple[FakeFlink, str], airflow_db: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quiesce (drain, NATIVE, deferred) → resume against the fake endpoint under dag.test(): the stop and run
    bodies, the result's format and timestamps, and each task's Flink link through ``FlinkJobLink.get_link``
    (the drained job is FINISHED: the dashboard shows it under #/job/completed/, the resumed one under running)."""
    from datetime import UTC, datetime

    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.models.xcom import XComModel
    from airflow.sdk import DAG, task
    from airflow.utils.session import create_session

    from airflow_flink_replay.links.flink import FlinkJobLink
    from airflow_flink_replay.operators.flink import (
        QuiesceAndSavepointOperator,
        ResumeJobOperator,
        run_path_segment,
    )
    from tests.jobs.harness import run_dag_test, unique

    state, url = fake
    end_ms = 1_795_000_000_123
    state.on("GET", "/jobs/j1", (200, JOB), (200, {**JOB, "state": "FINISHED", "end-time": end_ms}))
    state.on("POST", "/jobs/j1/stop", (202, {"request-id": "echoed"}))
    done = {"status": {"id": "COMPLETED"}, "operation": {"location": "file:/sp/run/savepoint-j1"}}
    state.on("GET", "/jobs/j1/savepoints/*", (200, {"status": {"id": "IN_PROGRESS"}}), (200, done))
    state.on("GET", "/jobs/overview", (200, {"jobs": []}))
    state.on("GET", "/jars", (200, {"files": [{"id": "py_flink-python.jar", "name": "flink-python-2.2.1.jar"}]}))
    state.on("POST", "/jars/py_flink-python.jar/run", (200, {"jobid": "j2"}))
    state.on("GET", "/jobs/j2", (200, {**JOB, "jid": "j2"}))
    conn = {"conn_type": "flink_rest", "host": url, "extra": {"retries": 1}}
    conn_file = tmp_path / "conns.json"
    conn_file.write_text(json.dumps({"flink_links": conn}))
    # a conn id of its own: Airflow caches the secrets backends (conn file) of the first dag.test() in a process
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_LINKS", json.dumps(conn))
    seen: dict[str, Any] = {}
    dag_id = unique("cp-links")
    program = FlinkPythonProgram(module="jobs.prod", job_name="prod")
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        quiesce = QuiesceAndSavepointOperator(
            task_id="quiesce", job_id="j1", mode="drain", target_directory="file:///sp", format_type="native",
            flink_conn_id="flink_links", poll_interval=0.05, deferrable=True,
        )  # fmt: skip
        resume = ResumeJobOperator(
            task_id="resume", program=program, quiesce_result=quiesce.output, flink_conn_id="flink_links",
            poll_interval=0.05, deferrable=True,
        )  # fmt: skip

        @task
        def links(q: dict[str, Any], r: dict[str, Any], **context: Any) -> None:
            ti = context["ti"]
            seen["quiesce"], seen["resume"] = q, r
            for task_id in ("quiesce", "resume"):
                key = TaskInstanceKey(ti.dag_id, task_id, ti.run_id, 1, -1)
                seen[f"{task_id}_link"] = FlinkJobLink().get_link(ti.task.dag.get_task(task_id), ti_key=key)

        quiesce >> resume
        links(quiesce.output, resume.output)
    started = datetime.now(UTC)
    dr = run_dag_test(dag, str(conn_file))
    assert {ti.task_id: ti.state for ti in dr.get_task_instances()} == dict.fromkeys(
        ("quiesce", "resume", "links"), "success"
    )

    (stop,) = state.bodies[("POST", "/jobs/j1/stop")]
    trigger_id = operation_trigger_id(dag_id, dr.run_id, "quiesce", -1, "j1", "drain", 0)
    assert stop == {
        "drain": True,
        "formatType": "NATIVE",
        "targetDirectory": "file:///sp" + run_path_segment(dag_id, dr.run_id).rstrip("/"),
        "triggerId": trigger_id,
    }
    assert f"/jobs/j1/savepoints/{trigger_id}" in state.paths("GET")  # the trigger polled that very id
    q = seen["quiesce"]
    assert (q["format_type"], q["mode"], q["savepoint_path"]) == ("NATIVE", "drain", "file:/sp/run/savepoint-j1")
    requested, completed = (
        datetime.fromisoformat(q["requested_at"]),
        datetime.fromisoformat(q["savepoint_completed_at"]),
    )
    assert started <= requested <= completed <= datetime.now(UTC)
    assert datetime.fromisoformat(q["job_stopped_at"]) == datetime.fromtimestamp(end_ms / 1000, UTC)
    (run,) = state.bodies[("POST", "/jars/py_flink-python.jar/run")]
    assert run == {
        "entryClass": "org.apache.flink.client.python.PythonDriver",
        "programArgsList": ["-pym", "jobs.prod"],
        "savepointPath": "file:/sp/run/savepoint-j1",
        "allowNonRestoredState": False,
        "flinkConfiguration": {"pipeline.name": "prod"},
    }
    assert seen["resume"]["job_id"] == "j2" and seen["resume"]["stopped_at"] == q["requested_at"]

    assert seen["quiesce_link"] == f"{url}/#/job/completed/j1/overview"
    assert seen["resume_link"] == f"{url}/#/job/running/j2/overview"
    with create_session() as session:  # what the UI's extra-links endpoint reads
        stored = {
            x.task_id: XComModel.deserialize_value(x)
            for x in session.query(XComModel).filter_by(dag_id=dag_id, key=FlinkJobLink().xcom_key)
        }
    assert stored == {"quiesce": seen["quiesce_link"], "resume": seen["resume_link"]}


def test_resume_only_picks_a_savepoint_of_this_run() -> None:
    run = "manual__2026-11-29T09:00:00+00:00"
    run_dir = "manual__2026-11-29T09_00_00_00_00"  # the quiesce's sanitized run directory
    stats = CheckpointStats.model_validate(
        {
            "latest": {
                "savepoint": {
                    "id": 9,
                    "status": "COMPLETED",
                    "is_savepoint": True,
                    "external_path": f"file:/sp/other_dag/{run_dir}/savepoint-9",
                }
            },
            "history": [
                {
                    "id": 7,
                    "status": "COMPLETED",
                    "is_savepoint": True,
                    "external_path": f"file:/sp/replay/{run_dir}/sp-7",
                },
                {"id": 8, "status": "COMPLETED", "is_savepoint": False, "external_path": "file:/chk/chk-8"},
            ],
        }
    )
    assert savepoint_of_run(stats, "replay", run) == f"file:/sp/replay/{run_dir}/sp-7"
    assert savepoint_of_run(stats, "replay", "manual__2026-11-30T09:00:00+00:00") is None

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
    FlinkRestError,
    FlinkRestHook,
    FlinkRestSettings,
    FlinkUnreachableError,
    flink_cause,
)
from airflow_flink_replay.hooks.flink_submit import program_failure_cause, python_traceback_from_log
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
    """Scripted answers: ``routes[(method, path)]`` is a list of (status, body, delay) used in turn."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[tuple[int, Any, float]]] = {}
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self.headers: list[dict[str, str]] = []

    def on(self, method: str, path: str, *answers: tuple[int, Any] | tuple[int, Any, float]) -> None:
        self.routes[(method, path)] = [(a[0], a[1], a[2] if len(a) > 2 else 0.0) for a in answers]  # type: ignore[misc]

    def answer(self, method: str, path: str) -> tuple[int, Any, float]:
        self.calls[(method, path)] += 1
        answers = self.routes.get((method, path))
        if not answers:
            return 404, {"errors": ["Not found: " + path]}, 0.0
        return answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.fixture
def fake() -> Iterator[tuple[FakeFlink, str]]:
    state = FakeFlink()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            state.headers.append(dict(self.headers))
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
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

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
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
        link = session.query(XComModel).filter_by(dag_id=dag_id, task_id="wait_ok", key=FlinkJobLink().xcom_key).one()
    assert XComModel.deserialize_value(link) == f"{url}/#/job/running/j1/overview"


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

"""FlinkRestHook against a real local HTTP server that plays a Flink REST endpoint (``tests/fake_flink.py``).

503s, unanswered requests and Flink-shaped errors are injected per path; everything else (requests, urllib3
Retry, pydantic) is real. Nothing depends on the machine's speed: an answer that must come too late is held
until the test ends (``HELD``), and request counts after a client gave up are taken once the server has
read every request (``FakeFlink.settle``).
"""

from __future__ import annotations

import json
import logging
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from airflow_flink_replay.core.flink_models import CheckpointStats
from airflow_flink_replay.exceptions import (
    FlinkJobFailedError,
    FlinkOperationFailedError,
    FlinkOperationTimeoutError,
)
from airflow_flink_replay.hooks.flink_rest import (
    FlinkJobNotFoundError,
    FlinkOutcomeUnknownError,
    FlinkRestError,
    FlinkRestHook,
    FlinkRestSettings,
    FlinkUnreachableError,
    savepoint_in,
)
from airflow_flink_replay.operators.flink import run_path_segment, savepoint_of_run
from tests.fake_flink import HELD, JAVA_ERROR, JOB, PYTHON_WORKER_ERROR, FakeFlink, make_hook, serve
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

    from airflow_flink_replay.hooks.flink_rest import settings_from_connection

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
        hook.wait_for_savepoint("j1", "t1", timeout=60, poll_interval=0.01)  # ends on the failure, not the time
    with pytest.raises(FlinkRestError, match=r"did not complete within 0\.2 s \(trigger t2\)"):
        hook.wait_for_savepoint("j1", "t2", timeout=0.2, poll_interval=0.05)


def _failures(*timestamps: int, stacktrace: str = PYTHON_WORKER_ERROR) -> dict[str, Any]:
    return {"exceptionHistory": {"entries": [{"stacktrace": stacktrace, "timestamp": t} for t in timestamps]}}


def _checkpoints(*triggered: int) -> dict[str, Any]:
    history = [{"id": i + 1, "status": "COMPLETED", "is_savepoint": False, "trigger_timestamp": t}
               for i, t in enumerate(triggered)]  # fmt: skip
    return {"counts": {"completed": len(history)}, "latest": {}, "history": history}


def test_a_job_runs_once_it_checkpointed_after_its_newest_failure(fake: tuple[FakeFlink, str]) -> None:
    """Flink Agents' action-state store often restarts a job once at start: a checkpoint taken before that
    failure does not count, one taken after it does."""
    state, url = fake
    state.on("GET", "/jobs/j1", (200, {**JOB, "state": "RESTARTING"}), (200, JOB))
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(100, stacktrace=JAVA_ERROR)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _checkpoints(50)), (200, _checkpoints(50)),
             (200, _checkpoints(50, 150)))
    running = make_hook(url).wait_until_checkpointed("j1", timeout=30, poll_interval=0.01)
    assert (running.checkpoint_id, running.failures) == (2, 1)
    assert running.newest_failure.startswith("java.lang.IllegalStateException: Cannot map")
    assert state.calls[("GET", "/jobs/j1")] == 3  # restarting, then twice running: without, then with a checkpoint


def test_a_long_running_production_that_recovered_from_old_failures_runs(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, JOB))
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(1, 2, 3, 4)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _checkpoints(5, 9)))
    running = make_hook(url).wait_until_checkpointed("j1", timeout=30, poll_interval=0.01)
    assert (running.checkpoint_id, running.failures) == (2, 4)


def test_a_job_that_fails_or_keeps_restarting_is_reported_with_its_python_error(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, {**JOB, "state": "FAILED"}))
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(1, 2)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _checkpoints()))
    hook = make_hook(url)
    with pytest.raises(FlinkJobFailedError) as failed:
        hook.wait_until_checkpointed("j1", timeout=30, poll_interval=0.01)
    text = str(failed.value)
    assert text.startswith("Flink job prod (j1) ended FAILED after 2 failure(s):\nTraceback (most recent call last):")
    assert 'gateway_import.py", line 18, in <module>' in text and "PythonGatewayServer during Python UDF" in text
    assert failed.value.cause and failed.value.cause in text

    state.on("GET", "/jobs/j1", (200, {**JOB, "state": "RESTARTING"}))
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(1, 2, 3)))
    with pytest.raises(FlinkJobFailedError, match=r"is failing: 3 failures in a row, since it started \(state RESTA"):
        hook.wait_until_checkpointed("j1", timeout=30, poll_interval=0.01)
    # a production that recovered from old failures (checkpoints after them) and fails anew is not failing yet
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(1, 2, 3, 20)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _checkpoints(10)))
    with pytest.raises(FlinkOperationTimeoutError, match=r"\(state RESTARTING, tasks RUNNING, 1 failure\(s\) so far"):
        hook.wait_until_checkpointed("j1", timeout=0.2, poll_interval=0.05)


def test_a_job_without_a_checkpoint_in_time_says_its_state_and_failures(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, JOB))
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(10)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _checkpoints(5)))  # before the failure: not counted
    with pytest.raises(FlinkOperationTimeoutError) as late:
        make_hook(url).wait_until_checkpointed("j1", timeout=0.2, poll_interval=0.05)
    assert str(late.value).startswith("Flink job prod (j1) completed no checkpoint within 0.2 s (state RUNNING, "
                                      "tasks RUNNING, 1 failure(s) so far):\nTraceback")


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

    from urllib3.util.retry import Retry

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    state = FakeFlink()
    state.on("POST", "/jars/x/run", (200, {"jobid": "j9"}))
    servers: list[ThreadingHTTPServer] = []
    backoff = Retry.sleep

    def start_after_a_refusal(retry: Retry, *args: Any, **kwargs: Any) -> None:
        """The endpoint comes up once a try was refused, before the client's next try (not after a time)."""
        if not servers:
            servers.append(serve(state, port))
        backoff(retry, *args, **kwargs)

    monkeypatch.setattr(Retry, "sleep", start_after_a_refusal)
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


# ------------------------------------------------------------------------------------ one run's stop
# FlinkRestHook's view of one run's stop, against the scripted Flink (``tests/fake_flink.py``): the operation
# found by its per-attempt trigger ids, the savepoint of a run found in the statistics (one matching rule),
# and ``stop_outcome``, which never calls a job with a stop in flight "running".

IN_PROGRESS = {"status": {"id": "IN_PROGRESS"}}
FAILED = {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": {"stack-trace": "java.lang.Exception: boom"}}}


def _done(location: str) -> dict[str, Any]:
    return {"status": {"id": "COMPLETED"}, "operation": {"location": location}}


def _job(state: str, end: int = -1) -> dict[str, Any]:
    return {**JOB, "state": state, "end-time": end}


def _stats(*paths: str) -> dict[str, Any]:
    history = [{"id": i, "status": "COMPLETED", "is_savepoint": True, "external_path": p} for i, p in enumerate(paths)]
    return {"counts": {}, "latest": {"savepoint": None}, "history": history}


def test_find_operation_skips_failed_attempts_and_stops_at_the_first_unknown_id(fake: Any) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1/savepoints/t0", (200, FAILED))
    hook = make_hook(url)
    assert hook.find_operation("j1", ["t0", "t1", "t2"]) == ("t1", None)  # t1 unknown: the next attempt's id
    state.on("GET", "/jobs/j1/savepoints/t1", (200, IN_PROGRESS))
    trigger, status = hook.find_operation("j1", ["t0", "t1", "t2"])
    assert trigger == "t1" and status is not None and status.status == "IN_PROGRESS"
    with pytest.raises(FlinkOperationFailedError, match="boom"):
        hook.find_operation("j1", ["t0"])


def test_one_rule_matches_a_savepoint_of_this_run_whole_directory_or_run_segment() -> None:
    run = "manual__2026-11-29T09:00:00+00:00"
    segment = run_path_segment("replay", run)  # /replay/manual__2026-11-29T09_00_00_00_00/
    stats = CheckpointStats.model_validate(
        _stats(f"file:/sp/other_dag{segment}savepoint-1", f"file:/sp/replay{segment}sp-7", "file:/sp/replay/x/sp-8")
    )
    assert savepoint_of_run(stats, "replay", run) == f"file:/sp/replay{segment}sp-7"
    assert savepoint_of_run(stats, "replay", "manual__2026-11-30T09:00:00+00:00") is None
    whole = savepoint_in(stats, f"file:///sp/replay{segment}")
    assert whole is not None and whole.external_path == f"file:/sp/replay{segment}sp-7"
    assert savepoint_in(stats, "file:///sp/replay/manual__2026-11-29") is None  # segments, not prefixes
    s3 = CheckpointStats.model_validate(_stats(f"s3://bucket/sp/replay{segment}savepoint-2"))
    assert savepoint_of_run(s3, "replay", run) == f"s3://bucket/sp/replay{segment}savepoint-2"
    found = savepoint_in(s3, f"s3://bucket/sp/replay{segment}")
    assert found is not None and found.id == 0


def test_stop_outcome_waits_while_the_stop_is_in_flight_then_reports_its_savepoint(fake: Any) -> None:
    """The job RUNS while its stop is in progress: not "running" — wait, then the stop's savepoint."""
    state, url = fake
    state.on("GET", "/jobs/j1/savepoints/t0", (200, IN_PROGRESS), (200, IN_PROGRESS), (200, _done("file:/sp/d/r/sp-1")))
    state.on("GET", "/jobs/j1", (200, _job("RUNNING")), (200, _job("FINISHED", 1_700_000_000_000)))
    outcome = make_hook(url).stop_outcome("j1", ["t0", "t1"], "/d/r/", timeout=30, poll_interval=0.01)
    assert (outcome.job_state, outcome.savepoint, outcome.kept_running) == ("FINISHED", "file:/sp/d/r/sp-1", False)
    assert outcome.end_time == 1_700_000_000_000
    assert state.calls[("GET", "/jobs/j1/savepoints/t0")] == 3


def test_stop_outcome_after_a_failed_stop_says_the_job_kept_running(fake: Any) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1/savepoints/t0", (200, FAILED))
    state.on("GET", "/jobs/j1", (200, _job("RUNNING")))
    outcome = make_hook(url).stop_outcome("j1", ["t0", "t1"], "/d/r/", timeout=5, poll_interval=0.01)
    assert outcome.kept_running and outcome.savepoint is None and outcome.trigger_id == "t1"


def test_stop_outcome_finds_the_savepoint_in_the_statistics_when_flink_forgot_the_stop(fake: Any) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, _job("FINISHED", 5)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _stats("file:/sp/other/r/sp-0", "file:/sp/d/r/sp-2")))
    outcome = make_hook(url).stop_outcome("j1", ["t0"], "/d/r/", timeout=5, poll_interval=0.01)
    assert (outcome.kept_running, outcome.savepoint) == (False, "file:/sp/d/r/sp-2")


def test_stop_outcome_times_out_naming_the_stop_still_in_flight(fake: Any) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1/savepoints/t0", (200, IN_PROGRESS))
    with pytest.raises(FlinkOperationTimeoutError, match=r"still in progress .* production may still be stopping"):
        make_hook(url).stop_outcome("j1", ["t0"], "/d/r/", timeout=0.2, poll_interval=0.05)


def test_restored_savepoint_reads_the_restore_of_the_statistics(fake: Any) -> None:
    state, url = fake
    restored = {"latest": {"restored": {"id": 3, "is_savepoint": True, "external_path": "file:/sp/d/r/sp-1"}}}
    state.on("GET", "/jobs/j2/checkpoints", (200, restored))
    state.on("GET", "/jobs/j3/checkpoints", (200, {"latest": {"restored": None}}))
    hook = make_hook(url)
    assert hook.restored_savepoint("j2") == "file:/sp/d/r/sp-1"
    assert hook.restored_savepoint("j3") is None

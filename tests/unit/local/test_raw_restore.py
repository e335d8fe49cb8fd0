"""The raw stop-and-restore a person would run by hand (the floor the replay run's stop window is measured
against): its Flink REST calls, its polling, its downtime, and its errors.

Flink's REST API is played by the scripted HTTP server of tests/fake_flink.py (no cluster here). (Against the real
stack: ``flink-replay demo`` and benchmarks/downtime.py.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from airflow_flink_replay.local.airflow_server import free_port
from airflow_flink_replay.local.raw_restore import flink_running_at, raw_drain_and_restore, wait_all_running
from tests.fake_flink import FakeFlink, serve


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeFlink, str]]:
    """One scripted server for the module (stopping one takes half a second)."""
    state = FakeFlink()
    server = serve(state)
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    state.release()
    server.shutdown()
    server.server_close()


@pytest.fixture
def fake(served: tuple[FakeFlink, str]) -> tuple[FakeFlink, str]:
    """The module's server, with no answers scripted and nothing counted yet."""
    state, url = served
    for recorded in (state.routes, state.calls, state.bodies, state.headers):
        recorded.clear()
    return state, url


def _job(state: str, *statuses: str) -> dict[str, object]:
    return {"jid": "j1", "state": state, "vertices": [{"id": f"v{i}", "status": s} for i, s in enumerate(statuses)]}


def test_a_job_runs_once_every_vertex_runs(fake: tuple[FakeFlink, str]) -> None:
    flink, url = fake
    flink.on("GET", "/jobs/j1", (200, _job("RUNNING", "RUNNING", "INITIALIZING")), (200, _job("RUNNING")),
             (200, _job("RUNNING", "RUNNING", "RUNNING")))  # fmt: skip
    before = time.time()
    seen = wait_all_running(url, "j1", poll=0.01)
    assert before <= seen <= time.time()
    assert flink.calls[("GET", "/jobs/j1")] == 3, "a job with no vertices yet is not running either"


@pytest.mark.parametrize("state", ["FAILED", "CANCELED", "FINISHED"])
def test_a_job_that_ended_is_reported_at_once(fake: tuple[FakeFlink, str], state: str) -> None:
    flink, url = fake
    flink.on("GET", "/jobs/j1", (200, _job(state, "CANCELED")))
    with pytest.raises(RuntimeError, match=f"^job j1 ended {state}$"):
        wait_all_running(url, "j1", poll=0.01)


def test_a_job_that_never_runs_times_out_naming_it(fake: tuple[FakeFlink, str]) -> None:
    flink, url = fake
    flink.on("GET", "/jobs/j1", (200, _job("CREATED", "SCHEDULED")))
    with pytest.raises(TimeoutError, match=r"^job j1 not RUNNING after 0.2 s$"):
        wait_all_running(url, "j1", poll=0.05, timeout=0.2)


def test_nothing_listening_is_a_connection_error_not_a_wait() -> None:
    started = time.monotonic()
    with pytest.raises(requests.ConnectionError):
        wait_all_running(f"http://127.0.0.1:{free_port()}", "j1", poll=0.01, timeout=60)
    assert time.monotonic() - started < 30


def test_the_job_runs_from_its_last_subtask_s_running_time(fake: tuple[FakeFlink, str]) -> None:
    flink, url = fake
    flink.on("GET", "/jobs/j1", (200, _job("RUNNING", "RUNNING", "RUNNING")))
    flink.on(
        "GET",
        "/jobs/j1/vertices/v0/subtasktimes",
        (200, {"subtasks": [{"timestamps": {"RUNNING": 1_000_500}}, {"timestamps": {"DEPLOYING": 9_000_000}}]}),
    )
    flink.on("GET", "/jobs/j1/vertices/v1/subtasktimes", (200, {"subtasks": [{"timestamps": {"RUNNING": 1_002_250}}]}))
    assert flink_running_at(url, "j1") == 1_002.25


def test_without_running_timestamps_there_is_no_time(fake: tuple[FakeFlink, str]) -> None:
    flink, url = fake
    flink.on("GET", "/jobs/j1", (200, _job("RUNNING", "RUNNING")))
    flink.on("GET", "/jobs/j1/vertices/v0/subtasktimes", (200, {"subtasks": [{"timestamps": {}}, {}]}))
    assert flink_running_at(url, "j1") is None


def _script_restore(flink: FakeFlink, running_ms: int) -> None:
    flink.on("POST", "/jobs/prod/stop", (200, {"request-id": "t1"}))
    flink.on(
        "GET",
        "/jobs/prod/savepoints/t1",
        (200, {"status": {"id": "IN_PROGRESS"}}),
        (200, {"status": {"id": "COMPLETED"}, "operation": {"location": "file:///sp/savepoint-1"}}),
    )
    flink.on("POST", "/jars/driver.jar/run", (400, {"errors": ["PythonEnvUtils.setGatewayServer failed"]}),
             (200, {"jobid": "new"}))  # fmt: skip
    flink.on(
        "GET", "/jobs/new", (200, {"jid": "new", "state": "RUNNING", "vertices": [{"id": "v0", "status": "RUNNING"}]})
    )
    flink.on(
        "GET", "/jobs/new/vertices/v0/subtasktimes", (200, {"subtasks": [{"timestamps": {"RUNNING": running_ms}}]})
    )


def test_the_raw_procedure_stops_with_drain_and_runs_the_program_from_the_savepoint(
    fake: tuple[FakeFlink, str],
) -> None:
    flink, url = fake
    _script_restore(flink, running_ms=1_000)  # long before the stop: Flink's own time counts
    before = time.time()
    downtime, new_id = raw_drain_and_restore(url, "prod", "driver.jar", ["-py", "/jobs/prod.py"], "file:///sp",
                                             poll=0.01)  # fmt: skip
    assert new_id == "new"
    assert flink.bodies[("POST", "/jobs/prod/stop")] == [{"targetDirectory": "file:///sp", "drain": True}]
    assert flink.calls[("GET", "/jobs/prod/savepoints/t1")] == 2, "polled until the savepoint completed"
    run = {"entryClass": "org.apache.flink.client.python.PythonDriver", "programArgsList": ["-py", "/jobs/prod.py"],
           "savepointPath": "file:///sp/savepoint-1", "allowNonRestoredState": False}  # fmt: skip
    assert flink.bodies[("POST", "/jars/driver.jar/run")] == [run, run], "resent while another run held the gateway"
    assert abs(downtime - (1.0 - before)) < 5, "the stop request to Flink's RUNNING time"


def test_a_running_time_flink_reports_after_the_poll_saw_it_is_not_taken(fake: tuple[FakeFlink, str]) -> None:
    flink, url = fake
    _script_restore(flink, running_ms=int((time.time() + 3600) * 1000))
    downtime, _ = raw_drain_and_restore(url, "prod", "driver.jar", [], "file:///sp", poll=0.01)
    assert 0 <= downtime < 30, "measured to when the poll saw every vertex running"


def test_a_savepoint_that_failed_stops_the_procedure_with_flink_s_cause(fake: tuple[FakeFlink, str]) -> None:
    flink, url = fake
    flink.on("POST", "/jobs/prod/stop", (200, {"request-id": "t1"}))
    flink.on(
        "GET",
        "/jobs/prod/savepoints/t1",
        (200, {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": {"class": "IOException"}}}),
    )
    with pytest.raises(RuntimeError, match=r"^stop with savepoint of prod failed: \{'class': 'IOException'\}$"):
        raw_drain_and_restore(url, "prod", "driver.jar", [], "file:///sp", poll=0.01)
    assert ("POST", "/jars/driver.jar/run") not in flink.calls


def test_a_program_flink_refuses_fails_with_flink_s_answer_and_is_not_resent(fake: tuple[FakeFlink, str]) -> None:
    flink, url = fake
    flink.on("POST", "/jobs/prod/stop", (200, {"request-id": "t1"}))
    flink.on("GET", "/jobs/prod/savepoints/t1", (200, {"status": {"id": "COMPLETED"}, "operation": {"location": "sp"}}))
    flink.on("POST", "/jars/driver.jar/run", (400, {"errors": ["Python process exits with code: 1"]}))
    with pytest.raises(RuntimeError, match=r"^run jar failed: .*Python process exits with code: 1"):
        raw_drain_and_restore(url, "prod", "driver.jar", [], "file:///sp", poll=0.01)
    assert flink.calls[("POST", "/jars/driver.jar/run")] == 1

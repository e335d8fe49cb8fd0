"""``airflow standalone`` driven over Airflow's REST API: the environment it gets, its process group's start and
stop, the health wait, and the REST calls a gate run is triggered and followed with.

Airflow is never started here. Two fakes stand for it, named so: the scripted HTTP server of tests/fake_flink.py
plays Airflow's REST API, and a fake ``airflow`` package in the Airflow home (``python -m airflow`` finds it
first) plays ``airflow standalone``'s process. (The real standalone: tests/integration/test_demo_command.py,
test_production_lease.py.)
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_flink_replay.local.airflow_server import (
    USERS_OPTION,
    AirflowServer,
    free_port,
    passwords_file,
    server_env,
    users,
)
from tests.fake_flink import FakeFlink, serve


def test_a_free_port_can_be_bound_at_once() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


# ------------------------------------------------------------------------------------------ the environment
def test_the_server_gets_its_own_executor_port_and_deferrable_operators() -> None:
    given = {"AIRFLOW_HOME": "/h", "PATH": "/venv/bin", "AIRFLOW__CORE__SQL_ALCHEMY_CONN": "sqlite:////other.db"}
    env = server_env(given, 18080)
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18080/execution/"
    assert (env["AIRFLOW__API__PORT"], env["AIRFLOW__API__HOST"]) == ("18080", "127.0.0.1")
    assert env["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] == "True"
    assert server_env(given, 18080, deferrable=False)["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] == "False"
    assert "AIRFLOW__CORE__SQL_ALCHEMY_CONN" not in env, "the home's own database"
    assert (env["AIRFLOW_HOME"], env["PATH"]) == ("/h", "/venv/bin")
    assert given["AIRFLOW__CORE__SQL_ALCHEMY_CONN"] == "sqlite:////other.db", "the caller's dict is left alone"


def test_the_dag_files_are_parsed_once_and_the_scheduler_looks_again_soon() -> None:
    env = server_env({}, 1)
    assert env["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] == "600"
    assert float(env["AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"]) < 1


def test_the_token_secret_is_kept_when_given_else_made_per_server() -> None:
    assert server_env({"AIRFLOW__API_AUTH__JWT_SECRET": "kept"}, 1)["AIRFLOW__API_AUTH__JWT_SECRET"] == "kept"
    made = [server_env({}, 1)["AIRFLOW__API_AUTH__JWT_SECRET"] for _ in range(2)]
    assert made[0] != made[1] and all(re.fullmatch(r"[0-9a-f]{32}", m) for m in made)


def test_the_server_reads_its_home_and_base_url_from_the_environment(tmp_path: Path) -> None:
    server = AirflowServer({"AIRFLOW_HOME": str(tmp_path / "home")}, 18081, tmp_path / "standalone.log")
    assert (server.home, server.base, server.port) == (tmp_path / "home", "http://127.0.0.1:18081", 18081)
    assert server.env["AIRFLOW__API__PORT"] == "18081"


def test_its_output_s_tail_is_empty_before_it_wrote_any(tmp_path: Path) -> None:
    server = AirflowServer({"AIRFLOW_HOME": str(tmp_path)}, 1, tmp_path / "none.log")
    assert server.tail() == ""
    server.log.write_bytes(b"x" * 5000 + b"\xff the end")
    assert server.tail(8) == " the end" and server.tail(9) == "\ufffd the end", "undecodable bytes replaced"
    assert server.tail() == ("x" * 5000 + "\ufffd the end")[-4000:]


def test_nothing_to_wait_for_or_stop_before_launch(tmp_path: Path) -> None:
    server = AirflowServer({"AIRFLOW_HOME": str(tmp_path)}, free_port(), tmp_path / "s.log")
    with pytest.raises(AssertionError, match=r"launch\(\) first"):
        server.wait_healthy(timeout=0)
    with pytest.raises(AssertionError, match=r"launch\(\) first"):
        server.wait()
    server.stop()  # nothing to stop


def test_a_server_that_does_not_answer_has_no_health(tmp_path: Path) -> None:
    started = time.monotonic()
    assert AirflowServer({"AIRFLOW_HOME": str(tmp_path)}, free_port(), tmp_path / "s.log").health() is None
    assert time.monotonic() - started < 10


def test_resent_requests_are_every_call_s_after_connection_errors_and_read_timeouts(tmp_path: Path) -> None:
    """The api-server shares a sqlite database with the scheduler: slow answers are resent, POSTs included (a
    trigger carries its own run id)."""
    retry = (
        AirflowServer({"AIRFLOW_HOME": str(tmp_path)}, 1, tmp_path / "s.log")
        ._session.get_adapter("http://x")
        .max_retries
    )
    assert (retry.total, retry.connect, retry.read, retry.status, retry.backoff_factor) == (4, 4, 4, 0, 2.5)
    assert retry.allowed_methods is None, "every method, POST too"


# -------------------------------------------------------------------------------------------- the REST API
@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeFlink, int]]:
    """The scripted HTTP server playing Airflow's REST API (one for the module: stopping one takes 0.5 s)."""
    state = FakeFlink()
    server = serve(state)
    yield state, server.server_address[1]
    state.release()
    server.shutdown()
    server.server_close()


@pytest.fixture
def api(served: tuple[FakeFlink, int], tmp_path: Path) -> tuple[FakeFlink, AirflowServer]:
    """The fake Airflow API (no answers scripted but the token) and a server object pointing at it."""
    state, port = served
    for recorded in (state.routes, state.calls, state.bodies, state.headers):
        recorded.clear()
    state.on("GET", "/auth/token", (200, {"access_token": "tok-1"}))
    return state, AirflowServer({"AIRFLOW_HOME": str(tmp_path / "home")}, port, tmp_path / "s.log",
                                run_id_prefix="ci")  # fmt: skip


def test_calls_carry_a_bearer_token_fetched_once(api: tuple[FakeFlink, AirflowServer]) -> None:
    fake, server = api
    fake.on("GET", "/api/v2/dags/gate", (200, {"dag_id": "gate"}))
    assert server.api("GET", "/dags/gate") == {"dag_id": "gate"}
    assert server.api("GET", "/dags/gate") == {"dag_id": "gate"}
    assert fake.calls[("GET", "/auth/token")] == 1
    assert [h.get("Authorization") for h in fake.headers[1:]] == ["Bearer tok-1", "Bearer tok-1"]


def test_with_users_configured_the_server_asks_for_a_login() -> None:
    assert server_env({}, 1)["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] == "True"
    given = {USERS_OPTION: "reviewer:admin,outsider:", "AIRFLOW_HOME": "/h"}
    assert server_env(given, 1)["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] == "False"
    assert users(given) == [("reviewer", "admin"), ("outsider", "")]
    assert users({USERS_OPTION: " a:viewer:team_x , "}) == [("a", "viewer")]  # a team is not part of the role
    assert passwords_file(given) == Path("/h/simple_auth_manager_passwords.json.generated")
    named = {**given, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": "/p.json"}
    assert passwords_file(named) == Path("/p.json")


def test_with_users_the_token_is_the_first_admin_s_logged_in_with_its_generated_password(
    served: tuple[FakeFlink, int], tmp_path: Path
) -> None:
    state, port = served
    for recorded in (state.routes, state.calls, state.bodies, state.headers):
        recorded.clear()
    home = tmp_path / "home"
    home.mkdir()
    (home / "simple_auth_manager_passwords.json.generated").write_text('{"viewer": "pv", "boss": "pb"}')
    server = AirflowServer({"AIRFLOW_HOME": str(home), USERS_OPTION: "viewer:viewer,boss:admin"}, port,
                           tmp_path / "s.log")  # fmt: skip
    state.on("POST", "/auth/token", (201, {"access_token": "tok-boss"}))
    state.on("GET", "/api/v2/dags/gate", (200, {"dag_id": "gate"}))
    assert server.api("GET", "/dags/gate") == {"dag_id": "gate"}
    assert state.bodies[("POST", "/auth/token")] == [{"username": "boss", "password": "pb"}]
    assert ("GET", "/auth/token") not in state.calls
    assert state.headers[-1].get("Authorization") == "Bearer tok-boss"
    state.on("POST", "/auth/token", (401, {"detail": "Invalid credentials"}))
    with pytest.raises(RuntimeError, match="as viewer -> HTTP 401"):
        server.token("viewer")
    assert server.password("viewer") == "pv"


def test_an_error_answer_names_the_call_and_status_with_the_start_of_the_body(
    api: tuple[FakeFlink, AirflowServer],
) -> None:
    fake, server = api
    fake.on("GET", "/api/v2/dags/gate", (404, {"detail": "not found " + "x" * 2000}))
    with pytest.raises(RuntimeError) as err:
        server.api("GET", "/dags/gate")
    message = str(err.value)
    assert message.startswith('GET /api/v2/dags/gate -> HTTP 404: {"detail": "not found xxx')
    assert len(message) == len("GET /api/v2/dags/gate -> HTTP 404: ") + 1000, "the body's first 1000 characters"


def test_a_resent_trigger_that_had_created_the_run_is_a_success(api: tuple[FakeFlink, AirflowServer]) -> None:
    fake, server = api
    fake.on("POST", "/api/v2/dags/gate/dagRuns", (409, {"detail": "DAG run already exists"}))
    run_id = server.trigger("gate", {"candidate": "v2"})
    assert re.fullmatch(r"ci__\d{8}T\d{6}_[0-9a-f]{8}", run_id), run_id
    assert fake.bodies[("POST", "/api/v2/dags/gate/dagRuns")] == [
        {"dag_run_id": run_id, "logical_date": None, "conf": {"candidate": "v2"}}
    ]
    assert server.trigger("gate", {}) != run_id, "each trigger a run id of its own"


def test_a_dag_is_waited_for_until_parsed_then_unpaused(api: tuple[FakeFlink, AirflowServer]) -> None:
    fake, server = api
    fake.on("GET", "/api/v2/dags/gate", (404, {"detail": "not yet"}), (200, {"dag_id": "gate"}))
    fake.on("PATCH", "/api/v2/dags/gate", (200, {"dag_id": "gate", "is_paused": False}))
    server.wait_for_dag("gate", timeout=30)
    assert fake.calls[("GET", "/api/v2/dags/gate")] == 2
    assert fake.bodies[("PATCH", "/api/v2/dags/gate")] == [{"is_paused": False}]


def test_a_dag_never_parsed_fails_with_the_import_errors(api: tuple[FakeFlink, AirflowServer]) -> None:
    fake, server = api
    fake.on("GET", "/api/v2/dags/gate", (404, {"detail": "not found"}))
    fake.on("GET", "/api/v2/importErrors", (200, {"import_errors": [{"filename": "gate.py", "stack_trace": "boom"}]}))
    with pytest.raises(RuntimeError, match=r"^gate not parsed within 0s; import errors: .*'stack_trace': 'boom'"):
        server.wait_for_dag("gate", timeout=0)
    assert ("PATCH", "/api/v2/dags/gate") not in fake.calls


def test_a_run_is_followed_to_its_end_state(api: tuple[FakeFlink, AirflowServer]) -> None:
    fake, server = api
    fake.on("GET", "/api/v2/dags/gate/dagRuns/r1", (200, {"state": "failed"}))
    assert server.wait_for_run("gate", "r1", timeout=30) == "failed"


def test_a_run_still_going_at_the_timeout_names_its_task_states(api: tuple[FakeFlink, AirflowServer]) -> None:
    fake, server = api
    fake.on("GET", "/api/v2/dags/gate/dagRuns/r1", (200, {"state": "running"}))
    fake.on("GET", "/api/v2/dags/gate/dagRuns/r1/taskInstances?limit=100", (200, {"task_instances": [
        {"task_id": "quiesce", "state": "success"}, {"task_id": "replay", "state": "deferred"},
        {"task_id": "compare", "state": None}]}))  # fmt: skip
    with pytest.raises(RuntimeError) as err:
        server.wait_for_run("gate", "r1", timeout=0)
    assert str(err.value).startswith(
        "run r1 still running after 0s; states: {'quiesce': 'success', 'replay': 'deferred', 'compare': 'None'}"
    )


def test_an_xcom_is_read_deserialized(api: tuple[FakeFlink, AirflowServer]) -> None:
    fake, server = api
    path = "/api/v2/dags/gate/dagRuns/r1/taskInstances/compare/xcomEntries/verdict?deserialize=true&stringify=false"
    fake.on("GET", path, (200, {"key": "verdict", "value": {"verdict": "PASS"}}))
    assert server.xcom("gate", "r1", "compare", "verdict") == {"verdict": "PASS"}


# -------------------------------------------------------------------------------------------- the process
FAKE_STANDALONE = '''"""A fake of ``airflow standalone`` (Airflow is not started in unit tests): it prints what it
was started with, then does what FAKE_STANDALONE says: exit 3, or serve (with a child process of its own) until
stopped."""
import os, subprocess, sys, time

print("argv", sys.argv[1:], "cwd", os.getcwd(), flush=True)
print("port", os.environ["AIRFLOW__API__PORT"], "executor", os.environ["AIRFLOW__CORE__EXECUTOR"], flush=True)
if os.environ["FAKE_STANDALONE"] == "exit":
    print("scheduler: cannot reach the metadata database", flush=True)
    sys.exit(3)
if os.environ["FAKE_STANDALONE"] == "serve-with-child":
    print("child", subprocess.Popen(["sleep", "300"]).pid, flush=True)
print("serving", flush=True)
time.sleep(300)
'''


def _standalone(tmp_path: Path, mode: str, port: int | None = None) -> AirflowServer:
    home = tmp_path / "homes" / "airflow-home"
    (home / "airflow").mkdir(parents=True)
    (home / "airflow" / "__init__.py").write_text("")
    (home / "airflow" / "__main__.py").write_text(FAKE_STANDALONE)
    env = {"PATH": os.environ.get("PATH", ""), "AIRFLOW_HOME": str(home), "FAKE_STANDALONE": mode}
    return AirflowServer(env, port or free_port(), tmp_path / "logs" / "standalone.log")


def _wait_for(server: AirflowServer, text: str) -> str:
    deadline = time.monotonic() + 30
    while text not in server.tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.tail()


@pytest.fixture
def launched() -> Iterator[list[AirflowServer]]:
    """Servers a test launched: stopped at teardown whatever happened."""
    servers: list[AirflowServer] = []
    yield servers
    for server in servers:
        server.stop()


def test_a_standalone_that_exits_fails_the_wait_with_its_output(tmp_path: Path, launched: list[AirflowServer]) -> None:
    server = _standalone(tmp_path, "exit")
    launched.append(server)
    server.launch()
    assert server.wait() == 3
    with pytest.raises(RuntimeError) as err:
        server.wait_healthy(timeout=60)
    message = str(err.value)
    assert message.startswith(f"airflow standalone exited with 3 (log: {server.log}):\n")
    assert message.endswith("scheduler: cannot reach the metadata database\n")


def test_standalone_starts_in_its_home_with_the_server_environment_and_appends_to_its_log(
    tmp_path: Path, launched: list[AirflowServer]
) -> None:
    server = _standalone(tmp_path, "serve")
    launched.append(server)
    server.log.parent.mkdir(parents=True)
    server.log.write_text("an earlier run\n")
    server.launch()
    out = _wait_for(server, "serving")
    assert out.startswith("an earlier run\n")
    assert f"argv ['standalone'] cwd {server.home}" in out
    assert f"port {server.port} executor LocalExecutor" in out
    with pytest.raises(RuntimeError) as err:
        server.wait_healthy(timeout=0)
    assert str(err.value).startswith(f"airflow standalone not healthy within 0s (None); log: {server.log}\n")


def test_stop_ends_the_whole_process_group(tmp_path: Path, launched: list[AirflowServer]) -> None:
    """Its scheduler and LocalExecutor workers can outlive standalone itself: the group is stopped."""
    server = _standalone(tmp_path, "serve-with-child")
    launched.append(server)
    server.launch()
    child = int(re.search(r"child (\d+)", _wait_for(server, "serving")).group(1))  # type: ignore[union-attr]
    os.kill(child, 0)  # running
    server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert server.wait() != 0, "stopped by a signal"
    server.stop()  # again: nothing left to stop


def test_health_is_waited_for_on_every_part(
    tmp_path: Path, launched: list[AirflowServer], served: tuple[FakeFlink, int]
) -> None:
    fake, port = served
    healthy = {"status": "healthy"}
    parts = {"metadatabase": healthy, "scheduler": healthy, "triggerer": healthy, "dag_processor": healthy}
    fake.on("GET", "/api/v2/monitor/health", (200, {**parts, "triggerer": {"status": "unhealthy"}}), (200, parts))
    server = _standalone(tmp_path, "serve", port=port)
    launched.append(server)
    server.launch()
    with pytest.raises(
        RuntimeError, match=r"^airflow standalone not healthy within 0s \(.*'triggerer': \{'status': 'unhealthy'\}"
    ):
        server.wait_healthy(timeout=0)
    assert server.wait_healthy(timeout=0) is server

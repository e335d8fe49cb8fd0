"""The distributed Airflow's pure parts: the environment every part and each worker gets (the executor, the
metadata DB, the broker; each worker's own host name, temp and lock folders), its secrets (made once, kept private,
never on a command line), the programs it needs and the errors naming the fix when they are missing, the sessions
it stops, and how the stack records, shows and stops it.

Nothing here starts PostgreSQL, Redis or Airflow (tests/integration/test_celery_gate.py does); the process tests
start ``sleep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from airflow_flink_replay.commands import stack as stack_command
from airflow_flink_replay.exceptions import StackSetupError
from airflow_flink_replay.local import celery_airflow
from airflow_flink_replay.local.airflow_server import USERS_OPTION, free_port
from airflow_flink_replay.local.celery_airflow import (
    HOSTNAME_CALLABLE,
    WORKER_HOSTNAME_ENV,
    CeleryAirflow,
    Ports,
    celery_env,
    load_secrets,
    session_members,
    stop_sessions,
    unreachable_folder,
    worker_env,
    worker_hostname,
    worker_hosts,
)
from airflow_flink_replay.local.stack import LocalStack, ProcessInfo, StackConfig, StackInfo

PORTS = Ports(api=18080, postgres=15432, redis=16379, trigger_log=18794)


@pytest.fixture
def server(tmp_path: Path) -> CeleryAirflow:
    """A CeleryAirflow that is never launched."""
    env = {"AIRFLOW_HOME": str(tmp_path / "home"), "PATH": "/venv/bin", "AIRFLOW__CORE__SQL_ALCHEMY_CONN": "sqlite://"}
    return CeleryAirflow(env, 18080, tmp_path / "airflow.log", workers=3, worker_concurrency=2)


def _secret_values(home: Path) -> list[str]:
    return list(json.loads((home / celery_airflow.SECRETS_FILE).read_text()).values())


# ----------------------------------------------------------------------------------------- the environment
def test_every_part_runs_the_celery_executor_on_postgres_with_redis_as_broker(tmp_path: Path) -> None:
    keys = load_secrets(tmp_path / "s.json", {})
    given = {"AIRFLOW_HOME": "/h", "AIRFLOW__CORE__SQL_ALCHEMY_CONN": "sqlite:////other.db"}
    env = celery_env(given, PORTS, keys)
    db = f"airflow:{keys.db_password}@127.0.0.1:15432/airflow"
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"postgresql+psycopg2://{db}"
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"] == f"db+postgresql+psycopg2://{db}"
    assert env["AIRFLOW__CELERY__BROKER_URL"] == f"redis://:{keys.redis_password}@127.0.0.1:16379/0"
    assert "AIRFLOW__CORE__SQL_ALCHEMY_CONN" not in env, "the older option would win over the PostgreSQL one"
    assert given["AIRFLOW__CORE__SQL_ALCHEMY_CONN"] == "sqlite:////other.db", "the caller's dict is left alone"
    assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == keys.jwt_secret, "one token secret for every part"
    assert env["AIRFLOW__CORE__FERNET_KEY"] == keys.fernet_key
    assert env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] == "18794"


def test_the_celery_parts_keep_what_the_standalone_gets_but_the_executor_and_db(tmp_path: Path) -> None:
    given = {"AIRFLOW__API_AUTH__JWT_SECRET": "j", "AIRFLOW__CORE__FERNET_KEY": "f"}
    keys = load_secrets(tmp_path / "s.json", given)
    env = celery_env({USERS_OPTION: "boss:admin"}, PORTS, keys, deferrable=False)
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18080/execution/"
    assert (env["AIRFLOW__API__PORT"], env["AIRFLOW__API__HOST"]) == ("18080", "127.0.0.1")
    assert env["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] == "False"
    assert env["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] == "600"
    assert float(env["AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"]) < 1
    assert (env[USERS_OPTION], env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"]) == ("boss:admin", "False")
    assert (env["AIRFLOW__API_AUTH__JWT_SECRET"], env["AIRFLOW__CORE__FERNET_KEY"]) == ("j", "f"), "given keys win"


def test_each_worker_is_a_host_of_its_own(tmp_path: Path) -> None:
    hosts = worker_hosts(tmp_path, tmp_path / "logs", 3, machine="box")
    assert [h.name for h in hosts] == ["worker-a", "worker-b", "worker-c"]
    assert [h.node for h in hosts] == ["worker-a@box", "worker-b@box", "worker-c@box"]
    base = {"AIRFLOW_HOME": str(tmp_path), "TMPDIR": "/tmp"}
    envs = [worker_env(base, h) for h in hosts]
    for key in ("TMPDIR", "TEMP", "TMP", "FLINK_REPLAY_LOCK_DIR", WORKER_HOSTNAME_ENV):
        assert len({e[key] for e in envs}) == 3, f"{key} is not shared between workers"
    for host, env in zip(hosts, envs, strict=True):
        assert env["TMPDIR"] == env["TEMP"] == env["TMP"] == str(tmp_path / "workers" / host.name / "tmp")
        assert env["FLINK_REPLAY_LOCK_DIR"] == str(tmp_path / "workers" / host.name / "locks")
        assert (env[WORKER_HOSTNAME_ENV], env["AIRFLOW__CORE__HOSTNAME_CALLABLE"]) == (host.name, HOSTNAME_CALLABLE)
        assert host.log == tmp_path / "logs" / f"{host.name}.log"
    assert base == {"AIRFLOW_HOME": str(tmp_path), "TMPDIR": "/tmp"}, "the caller's dict is left alone"
    assert [h.name for h in worker_hosts(tmp_path, tmp_path, 28)][-2:] == ["worker-27", "worker-28"]


def test_a_worker_reports_its_own_host_name_else_the_machine_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKER_HOSTNAME_ENV, "worker-b")
    assert worker_hostname() == "worker-b"
    monkeypatch.delenv(WORKER_HOSTNAME_ENV)
    import socket

    assert worker_hostname() == socket.getfqdn()
    module, _, name = HOSTNAME_CALLABLE.rpartition(".")
    assert getattr(sys.modules[module], name) is worker_hostname, "the callable Airflow imports exists"


# ---------------------------------------------------------------------------------------------- the secrets
def test_secrets_are_made_once_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "home" / "secrets.json"
    first = load_secrets(path, {})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_secrets(path, {}) == first, "kept across starts (the DB holds values encrypted with the Fernet key)"
    values = [first.db_password, first.redis_password, first.jwt_secret, first.fernet_key, first.api_secret_key]
    assert len(set(values)) == 5 and len(first.jwt_secret) >= 64
    assert not any(v in repr(first) for v in values), "the repr shows no secret"
    given = load_secrets(path, {"AIRFLOW__API_AUTH__JWT_SECRET": "mine"})
    assert given.jwt_secret == "mine" and load_secrets(path, {}).jwt_secret == first.jwt_secret, "not stored"


def test_no_secret_is_on_a_command_line_or_in_the_repr(server: CeleryAirflow) -> None:
    secrets = _secret_values(server.home)
    shown = [repr(server), *(" ".join(cmd) for cmd in server.commands().values())]
    assert not [s for s in secrets if any(s in text for text in shown)]
    assert server._postgres_env().keys() == {"PATH", "LC_ALL", "PGDATA"}, "PostgreSQL gets none of Airflow's settings"


# ------------------------------------------------------------------------------------------- what it runs
def test_its_parts_hosts_and_logs(server: CeleryAirflow, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert server.worker_hostnames() == ["worker-a", "worker-b", "worker-c"]
    assert all(node.startswith(f"{name}@") for name, node in zip(server.worker_hostnames(), server.celery_nodes(),
                                                                    strict=True))
    assert (server.postgres_dir, server.redis_dir) == (home / "postgres", home / "redis")
    assert server.logs["setup"] == tmp_path / "airflow.log"
    assert set(server.logs) == {"setup", "postgres", "redis", "api-server", "scheduler", "dag-processor", "triggerer",
                                "worker-a", "worker-b", "worker-c"}
    assert all(log.parent == home / "logs" / "parts" for name, log in server.logs.items() if name != "setup")
    commands = server.commands()
    assert commands["api-server"][-4:] == ["--port", "18080", "--host", "127.0.0.1"]
    assert commands["worker-b"][3:] == ["celery", "worker", "--celery-hostname", server.celery_nodes()[1],
                                        "--concurrency", "2", "--skip-serve-logs"]
    assert "--skip-serve-logs" in commands["triggerer"], "Airflow's log servers listen on every interface"
    assert len(set(server.ports)) == 4 and server.ports.api == 18080
    assert server.env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"


def test_free_ports_differ_and_avoid_the_ones_named() -> None:
    taken = free_port()
    ports = celery_airflow.free_ports(5, avoid=[taken])
    assert len(set(ports)) == 5 and taken not in ports


def test_bad_sizes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        CeleryAirflow({"AIRFLOW_HOME": str(tmp_path)}, 1, tmp_path / "a.log", workers=0)


def test_nothing_to_stop_before_launch_and_stop_twice_is_fine(server: CeleryAirflow) -> None:
    with pytest.raises(AssertionError, match=r"launch\(\) first"):
        server.wait_healthy(timeout=0)
    server.stop()
    server.stop()
    assert server.processes() == []


def test_a_part_that_exits_fails_naming_it_with_the_end_of_its_log(server: CeleryAirflow) -> None:
    log = server.logs["scheduler"]
    server._spawn("scheduler", ["sh", "-c", "echo the scheduler could not start; exit 3"], dict(os.environ), log)
    server._procs["scheduler"].wait(10)
    with pytest.raises(RuntimeError, match=r"(?s)scheduler of the Celery Airflow exited with 3.*could not start"):
        server._raise_if_a_part_exited()
    server.stop()


# ----------------------------------------------------------------------------------------- the programs
def test_missing_programs_are_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(celery_airflow.glob, "glob", lambda pattern: [])
    with pytest.raises(StackSetupError, match=r"redis-server not found.*apt-get install redis-server.*system-deps"):
        celery_airflow.redis_server()
    with pytest.raises(StackSetupError, match=r"initdb, postgres, pg_ctl.*apt-get install postgresql.*system-deps"):
        celery_airflow.postgres_bindir()


def test_postgres_runs_as_its_own_user_only_for_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(celery_airflow.os, "geteuid", lambda: 1000)
    assert celery_airflow.postgres_account() is None
    monkeypatch.setattr(celery_airflow.os, "geteuid", lambda: 0)
    monkeypatch.setattr(celery_airflow.pwd, "getpwnam", lambda name: (_ for _ in ()).throw(KeyError(name)))
    with pytest.raises(StackSetupError, match=r"refuses to run as root.*no `postgres` user.*install"):
        celery_airflow.postgres_account()


def test_a_folder_postgres_s_account_cannot_enter_is_found() -> None:
    """The folder named is the first on the way that the account cannot enter (under /tmp: pytest's own temp
    folder is private to its user)."""
    base = celery_airflow.enterable_temp_folder("afr-reach-")
    assert stat.S_IMODE(base.stat().st_mode) == 0o711 and base.parent == Path(tempfile.gettempdir())
    closed, inner = base / "closed", base / "closed" / "home"
    inner.mkdir(parents=True)
    stranger = os.getuid() + 4242
    try:
        closed.chmod(0o700)
        assert unreachable_folder(inner, stranger, {stranger}) == closed
        assert unreachable_folder(inner, os.getuid(), {os.getgid()}) is None, "its owner enters"
        closed.chmod(0o701)
        assert unreachable_folder(inner, stranger, {stranger}) is None, "others enter once it has o+x"
        assert unreachable_folder(base / "not-made-yet" / "x", stranger, {stranger}) is None
    finally:
        shutil.rmtree(base)


def test_a_home_postgres_s_account_cannot_reach_fails_naming_the_folder_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    # a short path: under pytest-xdist tmp_path is long enough for PostgreSQL's socket path check to refuse first
    short = Path(tempfile.mkdtemp(prefix="afr-"))
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    closed = short / "closed"
    closed.mkdir(mode=0o700)
    server = CeleryAirflow({"AIRFLOW_HOME": str(closed / "home")}, free_port(), tmp_path / "a.log")
    stranger = os.getuid() + 4242
    account = celery_airflow.pwd.struct_passwd(("pg-test", "x", stranger, stranger, "", "/", "/bin/sh"))
    monkeypatch.setattr(celery_airflow.os, "getgrouplist", lambda name, gid: [gid])
    with pytest.raises(StackSetupError, match=r"(?s)runs as the `pg-test` user.*cannot enter .*Fix: .*enterable_temp"):
        server._prepare_postgres_dir(account)
    assert stat.S_IMODE(server.home.stat().st_mode) & 0o001, "its own home it opens to be entered (not listed)"


# ------------------------------------------------------------------------------------------ the processes
def _sleeper_session() -> subprocess.Popen[bytes]:
    """A session of its own: a shell, a ``sleep`` and a Python it put in a process group of its own (as Airflow's
    supervisor does with a task process)."""
    grouped = f"{sys.executable} -c 'import os, time; os.setpgid(0, 0); time.sleep(60)'"
    return subprocess.Popen(["sh", "-c", f"{grouped} & sleep 60"], start_new_session=True)


def _own_groups(members: list[int]) -> set[int]:
    return {os.getpgid(pid) for pid in members}


def test_stopping_a_session_stops_what_left_its_process_group() -> None:
    proc = _sleeper_session()
    deadline = time.monotonic() + 10
    while len(_own_groups(session_members([proc.pid]))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_own_groups(session_members([proc.pid]))) == 2, "a member in a process group of its own"
    started = time.monotonic()
    assert stop_sessions([proc.pid], timeout=5) is True
    assert session_members([proc.pid]) == [] and time.monotonic() - started < 5
    proc.wait(5)
    assert stop_sessions([proc.pid]) is False, "nothing left: nothing to stop"


# ----------------------------------------------------------------------------------------------- the stack
def _record(workdir: Path, pid: int) -> StackInfo:
    info = StackInfo(
        workdir=str(workdir), flink_home="/n", flink_conf_dir="/n", flink_python="/n",
        flink_rest_url=f"http://127.0.0.1:{free_port()}", kafka_bootstrap=f"127.0.0.1:{free_port()}",
        chroma_host="127.0.0.1", chroma_port=free_port(), mem0_dir="/n", connector_jars=[], savepoint_dir="/n",
        checkpoint_dir="/n", java_home="/n", processes=[ProcessInfo(name="tansu", pid=pid, log="/n/tansu.log")],
        env={}, connections_file="/n/connections.json",
    )  # fmt: skip
    (workdir / "stack.json").write_text(info.model_dump_json())
    return info


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_stack_record_without_airflow_still_reads(tmp_path: Path) -> None:
    info = _record(tmp_path, _dead_pid())
    raw = json.loads((tmp_path / "stack.json").read_text())
    for key in ("airflow_url", "airflow_processes", "airflow_postgres_dir"):
        raw.pop(key)
    (tmp_path / "stack.json").write_text(json.dumps(raw))
    read = LocalStack(StackConfig(workdir=tmp_path)).info()
    assert read is not None and read.java_home == info.java_home
    assert (read.airflow_url, read.airflow_processes, read.airflow_postgres_dir) == (None, [], None)


def test_the_stack_shows_and_stops_its_recorded_airflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local = LocalStack(StackConfig(workdir=tmp_path))
    _record(tmp_path, _dead_pid())
    worker = _sleeper_session()
    url = f"http://127.0.0.1:{free_port()}"
    local.record_airflow(url, [ProcessInfo(name="worker-a", pid=worker.pid, log="/n/worker-a.log")],
                         tmp_path / "no-postgres")
    status = local.status()
    assert status["airflow"] == {"url": url, "answers": False} and status["processes"]["worker-a"]["alive"]
    assert status["up"] is False
    stack_command._print_status(status)
    assert f"DOWN Airflow {url}  (CeleryExecutor; health)" in capsys.readouterr().out
    assert local.stop_airflow(timeout=5) == ["worker-a"]
    worker.wait(5)
    after = local.info()
    assert after is not None
    assert (after.airflow_url, after.airflow_processes, after.airflow_postgres_dir) == (None, [], None)
    assert local.stop_airflow() == [], "once stopped, nothing is left to stop"


def test_the_command_line_asks_for_the_celery_airflow() -> None:
    parser = argparse.ArgumentParser(prog="flink-replay")
    stack_command.add_parser(parser.add_subparsers(dest="command"))
    assert (parser.parse_args(["stack", "up"]).airflow, parser.parse_args(["stack", "up"]).airflow_workers) == (None, 2)
    args = parser.parse_args(["stack", "up", "--airflow", "celery", "--airflow-workers", "3"])
    assert (args.airflow, args.airflow_workers) == ("celery", 3)


def test_the_default_spec_is_the_environment_s_else_the_stack_s_demo_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = _record(tmp_path, _dead_pid())
    monkeypatch.delenv("FLINK_REPLAY_SPEC", raising=False)
    assert stack_command.default_spec_path(info) == tmp_path / "demo" / "replay_spec.yaml"
    monkeypatch.setenv("FLINK_REPLAY_SPEC", "/specs/mine.yaml")
    assert stack_command.default_spec_path(info) == Path("/specs/mine.yaml")

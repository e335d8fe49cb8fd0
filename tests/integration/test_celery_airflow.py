"""The distributed Airflow acts as several hosts: one DAG run's tasks land on both Celery workers, each with its own
host name, temp folder and submission lock folder; and stopping it leaves nothing behind.

A :class:`~airflow_flink_replay.local.celery_airflow.CeleryAirflow` (PostgreSQL, Redis, api-server, scheduler, DAG
processor, triggerer, two workers running two tasks each) runs a DAG of this module's own: six tasks side by side,
each sleeping 3 s and returning where it ran. Triggered over the REST API as CI would; the task instances' host
names, the tasks' answers and their logs (read over the REST API) show which worker ran what. No Flink stack is
needed.

Cost (2 cores): the start (~15-20 s: initdb, ``airflow db migrate``, the parts), the run (~15 s), the stop (~6 s).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.local.airflow_server import free_port
from airflow_flink_replay.local.celery_airflow import CeleryAirflow, enterable_temp_folder, session_members
from airflow_flink_replay.local.stack import port_free

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
DAG_ID = "celery_hosts"
TASKS = 6
DAG_FILE = f'''
import os
import socket
import tempfile
import time

import pendulum
from airflow.sdk import dag, task


@dag(dag_id="{DAG_ID}", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def celery_hosts():
    @task
    def where(index: int) -> dict:
        time.sleep(3)
        print(f"where_{{index}} ran on {{os.environ['FLINK_REPLAY_WORKER_HOSTNAME']}}")
        return {{"hostname": socket.gethostname(), "tmpdir": os.environ["TMPDIR"],
                "gettempdir": tempfile.gettempdir(), "lock_dir": os.environ["FLINK_REPLAY_LOCK_DIR"]}}

    for index in range({TASKS}):
        where.override(task_id=f"where_{{index}}")(index)


celery_hosts()
'''


@pytest.fixture(autouse=True, scope="module")
def _fresh_taskmanager_when_metaspace_fills() -> Iterator[None]:
    """This module needs no Flink stack: the session's TaskManager and metaspace upkeep between integration
    modules (tests/conftest.py) is not done for it."""
    yield


@pytest.fixture(scope="module")
def airflow() -> Iterator[CeleryAirflow]:
    """A healthy Celery Airflow with two workers on this module's DAG folder, its home under /tmp (as root,
    PostgreSQL runs as the `postgres` user, which must enter the home: pytest's temp folder is private)."""
    base = enterable_temp_folder()
    (base / "dags").mkdir()
    (base / "dags" / "celery_hosts.py").write_text(DAG_FILE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "FLINK_REPLAY_"))}
    env.update({
        "AIRFLOW_HOME": str(base / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(base / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    })
    server = CeleryAirflow(env, free_port(), base / "setup.log", run_id_prefix="hosts", workers=2,
                           worker_concurrency=2)
    started = time.monotonic()
    server.launch()
    try:
        server.wait_healthy()
        server.start_seconds = time.monotonic() - started  # type: ignore[attr-defined]
        server.wait_for_dag(DAG_ID)
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def run(airflow: CeleryAirflow) -> dict[str, Any]:
    """One run of the DAG: its state, task instances and each task's answer."""
    run_id = airflow.trigger(DAG_ID, {})
    state = airflow.wait_for_run(DAG_ID, run_id, timeout=240)
    tis = airflow.task_instances(DAG_ID, run_id)
    answers = {task_id: airflow.xcom(DAG_ID, run_id, task_id) for task_id in tis}
    return {"run_id": run_id, "state": state, "tis": tis, "answers": answers}


def test_the_run_s_tasks_ran_on_both_workers(airflow: CeleryAirflow, run: dict[str, Any]) -> None:
    assert run["state"] == "success", run["tis"]
    assert len(run["tis"]) == TASKS and {ti["state"] for ti in run["tis"].values()} == {"success"}
    hosts = {ti["hostname"] for ti in run["tis"].values()}
    assert hosts == set(airflow.worker_hostnames()) == {"worker-a", "worker-b"}
    assert len({answer["hostname"] for answer in run["answers"].values()}) == 1, "two workers, one machine"


def test_each_worker_has_its_own_temp_and_lock_folders(airflow: CeleryAirflow, run: dict[str, Any]) -> None:
    folders: dict[str, set[tuple[str, str, str]]] = {}
    for task_id, ti in run["tis"].items():
        answer = run["answers"][task_id]
        folders.setdefault(ti["hostname"], set()).add((answer["tmpdir"], answer["gettempdir"], answer["lock_dir"]))
    for host in airflow.hosts:
        assert folders[host.name] == {(str(host.tmp), str(host.tmp), str(host.locks))}, "one host, one set of folders"
    tmps, locks = zip(*[(h.tmp, h.locks) for h in airflow.hosts], strict=True)
    assert len(set(tmps)) == len(set(locks)) == 2, "the hosts share neither folder"
    for host in airflow.hosts:
        assert (host.locks.stat().st_mode & 0o077) == 0, "private: the provider refuses a lock folder others can write"


def test_the_api_server_reads_the_task_logs_of_both_workers(airflow: CeleryAirflow, run: dict[str, Any]) -> None:
    one_per_host = {ti["hostname"]: task_id for task_id, ti in run["tis"].items()}
    for host, task_id in one_per_host.items():
        try_number = run["tis"][task_id]["try_number"]
        logs = airflow.api("GET", f"/dags/{DAG_ID}/dagRuns/{run['run_id']}/taskInstances/{task_id}/logs/{try_number}")
        assert f"{task_id} ran on {host}" in json.dumps(logs["content"]), f"{task_id}'s log ({host}): {logs}"


def test_stop_leaves_no_process_behind_and_frees_every_port(airflow: CeleryAirflow) -> None:
    parts = airflow.processes()
    assert {p.name for p in parts} == {"postgres", "redis", "api-server", "scheduler", "dag-processor", "triggerer",
                                       "worker-a", "worker-b"}
    sessions = [p.pid for p in parts]
    listening = [airflow.port, airflow.ports.postgres, airflow.ports.redis]
    assert not any(port_free(port) for port in listening), "each part listens before the stop"
    started = time.monotonic()
    airflow.stop()
    took = time.monotonic() - started
    assert session_members(sessions) == [], "no process of any part's session is left"
    assert _processes_naming(airflow.home) == [], "nothing runs with its home on its command line"
    assert all(port_free(port) for port in listening)
    assert took < 60, f"stopped in {took:.1f}s"
    airflow.stop()  # twice is fine
    print(f"celery airflow: healthy {airflow.start_seconds:.1f}s after launch, stopped in {took:.1f}s")  # type: ignore[attr-defined]


def _processes_naming(home: Path) -> list[str]:
    """The command lines of live processes that name ``home``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(home) in text:
            found.append(text)
    return found

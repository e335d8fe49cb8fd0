"""The release gate on a distributed Airflow: two productions, each gated twice at the same moment (issue 44).

The Airflow is the stack's Celery one (:class:`~airflow_flink_replay.local.celery_airflow.CeleryAirflow`):
PostgreSQL, Redis, a scheduler, a triggerer, a DAG processor, an API server and two Celery workers that behave
as two hosts (each its own temp folder, host lock folder and hostname), so nothing but the shared places keeps
their tasks apart: the metadata DB, Kafka, Flink's REST API and the runs folder. The two productions share the
replay cluster (4 task slots; a run's three replays take 3).

- Before the four runs, each production's candidate is gated once under ``dag.test()``: the reference verdicts.
- Then production A's gate is triggered twice with candidate v2 and production B's twice with v1, all four over
  the REST API at once. Every run ends with the reference verdict of its candidate; the replay tasks ran on both
  workers; production's lease kept the two runs of one production apart; the JobManager's submission lease was
  never held by two Python programs at once (its kept history); the replays queued for the replay cluster's
  slots instead of failing (their waits are in the run records).
- Afterwards both productions run as exactly one job each, and no replay job, topic or memory fork is left.

The same Airflow first shows that its workers act as two hosts, on a DAG of this module's own (``celery_hosts``:
nine tasks side by side, each sleeping 3 s and answering where it ran): its tasks land on both workers, each with
its own host name, temp folder and lock folder, and the API server reads their logs. Last, stopping the Airflow
leaves no process behind and frees every port.

Cost (2 cores): Airflow's start (~20 s, the two reference runs meanwhile: ~200 s), the hosts DAG (~15 s), the four
runs (~300 s: two runs of one production follow each other through its lease), the stop (~6 s).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay import ids
from tests.dag_testing import (
    assert_no_replay_leftovers,
    deploy_planned_production,
    plan_test_production,
    run_record_of,
    run_replay_dag,
    running_jobs,
    stop_production,
)

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(1800)]
HOSTS_DAG_ID = "celery_hosts"
#: more than one worker runs at once (two workers, four tasks each): both workers take some
HOSTS_TASKS = 9
HOSTS_DAG_FILE = f'''
import os
import socket
import tempfile
import time

import pendulum
from airflow.sdk import dag, task


@dag(dag_id="{HOSTS_DAG_ID}", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def celery_hosts():
    @task
    def where(index: int) -> dict:
        time.sleep(3)
        print(f"where_{{index}} ran on {{os.environ['FLINK_REPLAY_WORKER_HOSTNAME']}}")
        return {{"hostname": socket.gethostname(), "tmpdir": os.environ["TMPDIR"],
                "gettempdir": tempfile.gettempdir(), "lock_dir": os.environ["FLINK_REPLAY_LOCK_DIR"]}}

    for index in range({HOSTS_TASKS}):
        where.override(task_id=f"where_{{index}}")(index)


celery_hosts()
'''
V1, V2 = "examples.review_agent.v1.job:job", "examples.review_agent.v2.job:job"
#: production -> the candidate its two gate runs carry
CANDIDATES = {"a": V2, "b": V1}
#: production -> its window: v2's changes need 30 records to be told from the A/A noise every time (on 8 the
#: reference run under dag.test once came out INCONCLUSIVE); v1 against itself passes on 8
WINDOWS = {"a": 30, "b": 8}
RUN_TIMEOUT_S = 1200


def _dag_file(specs: dict[str, Path]) -> str:
    lines = ["from airflow_flink_replay.core.replay_spec import ReplaySpec",
             "from airflow_flink_replay.dag_factory import build_replay_dag", ""]  # fmt: skip
    for name, path in specs.items():
        lines.append(f"gate_{name} = build_replay_dag(ReplaySpec.from_yaml({str(path)!r}), "
                     f"dag_id='celery_gate_{name}', kind='gate')")  # fmt: skip
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def celery(stack, airflow_db, tmp_path_factory) -> Any:
    """The Celery Airflow on two productions of this module's own (deployed while it starts), the reference verdicts
    of their candidates under ``dag.test()``; all of it removed afterwards."""
    from airflow_flink_replay.local.airflow_runner import airflow_env
    from airflow_flink_replay.local.airflow_server import free_port
    from airflow_flink_replay.local.celery_airflow import CeleryAirflow, enterable_temp_folder

    work = tmp_path_factory.mktemp("celery")
    base = enterable_temp_folder()  # the Airflow home: PostgreSQL (as `postgres` when root runs it) must reach it
    planned = {name: plan_test_production(stack, work / name, f"cel{name}", window_records=WINDOWS[name])
               for name in CANDIDATES}
    dags = work / "dags"
    dags.mkdir()
    (dags / "celery_gates.py").write_text(_dag_file({n: Path(p["spec_path"]) for n, p in planned.items()}))
    (dags / "celery_hosts.py").write_text(HOSTS_DAG_FILE)
    env = airflow_env(stack, base / "airflow", Path(planned["a"]["spec_path"]))
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    server = CeleryAirflow(env, free_port(), base / "airflow.log", workers=2, run_id_prefix="celery")
    productions: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    server.launch()
    try:
        for name, plan in planned.items():
            productions[name] = deploy_planned_production(stack, plan)
        reference = {}
        for name, candidate in CANDIDATES.items():
            _, run = run_replay_dag(stack, productions[name], {"candidate": candidate}, kind="gate")
            reference[name] = run["record"]["verdict"]
        server.wait_healthy()
        server.start_seconds = time.monotonic() - started  # type: ignore[attr-defined]  # the references ran meanwhile
        for dag_id in [*(f"celery_gate_{name}" for name in CANDIDATES), HOSTS_DAG_ID]:
            server.wait_for_dag(dag_id)
        yield {"server": server, "productions": productions, "reference": reference}
    finally:
        server.stop()
        for production in productions.values():
            stop_production(stack, production)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def hosts_run(celery) -> dict[str, Any]:
    """One run of the hosts DAG: its state, task instances and each task's answer."""
    server = celery["server"]
    run_id = server.trigger(HOSTS_DAG_ID, {})
    state = server.wait_for_run(HOSTS_DAG_ID, run_id, timeout=240)
    tis = server.task_instances(HOSTS_DAG_ID, run_id)
    answers = {task_id: server.xcom(HOSTS_DAG_ID, run_id, task_id) for task_id in tis}
    return {"run_id": run_id, "state": state, "tis": tis, "answers": answers}


def test_the_workers_act_as_two_hosts(celery, hosts_run) -> None:
    """A run's tasks land on both workers, each with its own host name, temp folder and lock folder (private)."""
    server, run = celery["server"], hosts_run
    assert run["state"] == "success", run["tis"]
    assert len(run["tis"]) == HOSTS_TASKS and {ti["state"] for ti in run["tis"].values()} == {"success"}
    assert {ti["hostname"] for ti in run["tis"].values()} == set(server.worker_hostnames()) == {"worker-a", "worker-b"}
    assert len({answer["hostname"] for answer in run["answers"].values()}) == 1, "two workers, one machine"
    folders: dict[str, set[tuple[str, str, str]]] = {}
    for task_id, ti in run["tis"].items():
        answer = run["answers"][task_id]
        folders.setdefault(ti["hostname"], set()).add((answer["tmpdir"], answer["gettempdir"], answer["lock_dir"]))
    for host in server.hosts:
        assert folders[host.name] == {(str(host.tmp), str(host.tmp), str(host.locks))}, "one host, one set of folders"
    tmps, locks = zip(*[(h.tmp, h.locks) for h in server.hosts], strict=True)
    assert len(set(tmps)) == len(set(locks)) == 2, "the hosts share neither folder"
    for host in server.hosts:
        assert (host.locks.stat().st_mode & 0o077) == 0, "private: the provider refuses a lock folder others can write"


def test_the_api_server_reads_the_task_logs_of_both_workers(celery, hosts_run) -> None:
    server, run = celery["server"], hosts_run
    one_per_host = {ti["hostname"]: task_id for task_id, ti in run["tis"].items()}
    for host, task_id in one_per_host.items():
        try_number = run["tis"][task_id]["try_number"]
        path = f"/dags/{HOSTS_DAG_ID}/dagRuns/{run['run_id']}/taskInstances/{task_id}/logs/{try_number}"
        logs = server.api("GET", path)
        assert f"{task_id} ran on {host}" in json.dumps(logs["content"]), f"{task_id}'s log ({host}): {logs}"


def _at(value: str | None) -> datetime:
    assert value, "a lease generation without its time"
    return datetime.fromisoformat(value)


def test_two_productions_gated_twice_at_once_on_two_workers(stack, celery) -> None:
    server, productions, reference = celery["server"], celery["productions"], celery["reference"]
    assert reference == {"a": "FAIL", "b": "PASS"}, reference  # v2 changes the outputs, v1 is production's own

    from airflow_flink_replay.local.demo import ReviewFeeder

    # reviews keep flowing into both productions (a drained window holds what arrives after the resume)
    feeders = [ReviewFeeder(stack.kafka_bootstrap, production["topics"].reviews, start_index=80_000 + 20_000 * i,
                            rate=5) for i, production in enumerate(productions.values())]  # fmt: skip
    with contextlib.ExitStack() as feeding:
        for feeder in feeders:
            feeding.enter_context(feeder)
        runs = [(name, server.trigger(f"celery_gate_{name}", {"candidate": candidate}))
                for name, candidate in CANDIDATES.items() for _ in range(2)]  # fmt: skip
        states = {run_id: server.wait_for_run(f"celery_gate_{name}", run_id, RUN_TIMEOUT_S) for name, run_id in runs}

    records: dict[str, dict[str, Any]] = {}
    hosts: set[str] = set()
    for name, run_id in runs:
        record = run_record_of(f"file://{Path(productions[name]['spec_path']).parent / 'runs'}", run_id)
        records[run_id] = record
        # every verdict is the one dag.test gives for the same candidate; a FAIL fails the gate run
        assert record["verdict"] == reference[name], (name, run_id, record.get("verdict"), record.get("reasons"))
        assert states[run_id] == ("failed" if reference[name] == "FAIL" else "success"), (run_id, states[run_id])
        tis = server.task_instances(f"celery_gate_{name}", run_id)
        replay_tasks = [ti for task, ti in tis.items()
                        if task == ids.TASK_SUBMIT_REPLAYS or task.startswith("replay_")]  # fmt: skip
        assert replay_tasks, sorted(tis)
        hosts |= {str(ti["hostname"]) for ti in replay_tasks if ti.get("hostname")}
        # the replays' submission said what it waited for: the replay cluster's slots and the JobManager's lock
        for variant in record["variants"]:
            assert variant["capacity_wait_s"] is not None and variant["submit_lock_wait_s"] is not None, variant
        assert_no_replay_leftovers(stack, record)
    # the replay tasks ran on both workers ("hosts")
    assert {h.split("@")[0] for h in hosts} >= {n.split("@")[0] for n in server.worker_hostnames()}, hosts

    # 12 replays on 4 slots: some submission queued for slots (never more than the cluster has)
    waits = [v["capacity_wait_s"] for r in records.values() for v in r["variants"]]
    assert max(waits) > 0, waits

    # production's lease kept each production's two runs apart: their holds never overlap
    for name in CANDIDATES:
        held = [records[run_id]["lease"] for n, run_id in runs if n == name]
        assert all(lease and lease["released_at"] for lease in held), held
        first, second = sorted(held, key=lambda lease: lease["acquired_at"])
        assert _at(first["released_at"]) <= _at(second["acquired_at"]), held

    # the replay JobManager's submission lease: never two Python programs at once, across both workers
    from airflow_flink_replay.hooks.submission_lease import SharedSubmissionLease

    uri = f"file://{Path(stack.workdir) / 'submission-leases'}"
    history = SharedSubmissionLease(stack.replay_flink_rest_url or stack.flink_rest_url, uri).leases.records()
    assert len(history) >= 4, history
    spans = sorted((h.acquired_at, h.released_at or h.expires_at) for h in history)
    for (_, end), (begin, _) in itertools.pairwise(spans):
        assert begin >= end, spans

    # both productions RUNNING as exactly one job each
    for production in productions.values():
        deadline = time.monotonic() + 60
        while len(running_jobs(stack, production["job_name"])) != 1 and time.monotonic() < deadline:
            time.sleep(2)
        assert len(running_jobs(stack, production["job_name"])) == 1, production["job_name"]


def test_stop_leaves_no_process_behind_and_frees_every_port(celery) -> None:
    """Last in the module: stopping the Airflow ends every part's session and frees its ports (twice is fine)."""
    from airflow_flink_replay.local.celery_airflow import session_members
    from airflow_flink_replay.local.stack import port_free

    server = celery["server"]
    parts = server.processes()
    assert {p.name for p in parts} == {"postgres", "redis", "api-server", "scheduler", "dag-processor", "triggerer",
                                       "worker-a", "worker-b"}
    sessions = [p.pid for p in parts]
    listening = [server.port, server.ports.postgres, server.ports.redis]
    assert not any(port_free(port) for port in listening), "each part listens before the stop"
    started = time.monotonic()
    server.stop()
    took = time.monotonic() - started
    assert session_members(sessions) == [], "no process of any part's session is left"
    assert _processes_naming(server.home) == [], "nothing runs with its home on its command line"
    assert all(port_free(port) for port in listening)
    assert took < 60, f"stopped in {took:.1f}s"
    server.stop()  # twice is fine
    print(f"celery airflow: healthy {server.start_seconds:.1f}s after launch, stopped in {took:.1f}s")  # type: ignore[attr-defined]


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

"""`stack up` / `status` / `down` on a second stack (own work folder and ports, shared cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from airflow_flink_replay.local.airflow_server import free_port
from airflow_flink_replay.local.components import venv_site_packages
from airflow_flink_replay.local.stack import _pid_alive, port_free

JOBS = Path(__file__).resolve().parent.parent / "jobs"




def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_flink_replay.cli", *args],
        capture_output=True, text=True, timeout=300, env=os.environ.copy(),
    )


def test_up_status_down_leaves_no_process_and_frees_ports(stack, tmp_path: Path) -> None:
    cache = Path(stack.workdir)  # reuse the session stack's venv and downloads
    ports = {"--flink-rest-port": free_port(), "--flink-rpc-port": free_port(),
             "--kafka-port": free_port(), "--chroma-port": free_port()}
    common = ["--workdir", str(tmp_path / "stack2"), "--cache-dir", str(cache)]
    # the second stack runs production's cluster only: the session's stack holds the replay cluster's ports
    port_args = [x for kv in ports.items() for x in (kv[0], str(kv[1]))] + ["--no-replay-cluster"]

    up = _cli("stack", "up", *common, *port_args, "--task-slots", "1")
    assert up.returncode == 0, up.stdout + up.stderr
    info = json.loads((tmp_path / "stack2" / "stack.json").read_text())
    pids = [p["pid"] for p in info["processes"]]
    assert {p["name"] for p in info["processes"]} == {"tansu", "chroma", "flink-jobmanager", "flink-taskmanager"}
    try:
        # Idempotent: a second `up` reports the running stack and starts nothing.
        again = _cli("stack", "up", *common, *port_args, "--json")
        assert again.returncode == 0, again.stderr
        assert [p["pid"] for p in json.loads(again.stdout)["processes"]] == pids

        status = _cli("stack", "status", *common, "--json")
        assert status.returncode == 0, status.stdout
        st = json.loads(status.stdout)
        assert st["up"] and st["flink"]["taskmanagers"] == 1
        assert st["flink"]["rest_url"].endswith(str(ports["--flink-rest-port"]))
        assert st["kafka"]["answers"] and st["mem0"]["answers"]

        # restart-taskmanager: a new TaskManager registers; the old one's working folder is gone
        tmp = tmp_path / "stack2" / "tmp"
        old_tm_dirs = set(tmp.glob("tm_*"))
        assert old_tm_dirs, sorted(p.name for p in tmp.iterdir())
        restarted = _cli("stack", "restart-taskmanager", *common, *port_args)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        info = json.loads((tmp_path / "stack2" / "stack.json").read_text())
        new_tm = next(p["pid"] for p in info["processes"] if p["name"] == "flink-taskmanager")
        assert new_tm not in pids and _pid_alive(new_tm)
        pids = [p["pid"] for p in info["processes"]]
        assert not old_tm_dirs & set(tmp.glob("tm_*"))
        assert json.loads(_cli("stack", "status", *common, "--json").stdout)["flink"]["taskmanagers"] == 1

        # a PyFlink job runs on it: its Python workers (TaskManager children) must go with `down` too
        workers = _run_a_python_job(info, new_tm)
        assert workers and all(_pid_alive(w) for w in workers)
    finally:
        down = _cli("stack", "down", *common, "--json")
    assert down.returncode == 0, down.stderr
    assert set(json.loads(down.stdout)["stopped"]) == {"tansu", "chroma", "flink-jobmanager", "flink-taskmanager"}
    assert not any(_pid_alive(pid) for pid in pids)
    assert not any(_pid_alive(w) for w in workers)
    assert all(port_free(p) for p in ports.values())
    after = _cli("stack", "status", *common)
    assert after.returncode == 1 and "down" in after.stdout
    # Flink's temp files (job blobs: ~115 MB per agent job) do not outlive the stack
    assert not any((tmp_path / "stack2" / "tmp").iterdir()) and not any((tmp_path / "stack2" / "web").iterdir())


def _run_a_python_job(info: dict, taskmanager: int) -> list[int]:
    """Submit the smoke job (unbounded) to the stack in ``info``; return the TaskManager's child processes
    once the job runs Python workers."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from airflow_flink_replay.local.stack import _descendants

    admin = AdminClient({"bootstrap.servers": info["kafka_bootstrap"]})
    for fut in admin.create_topics([NewTopic(t, 1, 1) for t in ("life-in", "life-out")]).values():
        fut.result(10)
    env = {**os.environ, "FLINK_CONF_DIR": info["flink_conf_dir"], "JAVA_HOME": info["java_home"]}
    run = subprocess.run(
        [f"{info['flink_home']}/bin/flink", "run", "-d", "-py", str(JOBS / "smoke_keyed_counter.py"),
         "--bootstrap", info["kafka_bootstrap"], "--source", "life-in", "--sink", "life-out",
         "--jars", ",".join(info["connector_jars"]), "--unbounded"],
        capture_output=True, text=True, env=env, timeout=180,
    )
    assert "JobID" in run.stdout, run.stdout + run.stderr
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        children = _descendants(taskmanager)
        if any(b"python" in _cmdline(c) for c in children):
            return children
        time.sleep(1)
    raise AssertionError(f"no Python worker under TaskManager {taskmanager} after 90 s")


def test_a_process_that_dies_at_start_is_named_with_its_log_and_nothing_is_left(stack, tmp_path: Path) -> None:
    """Chroma cannot start (its data path is a file): `up` names it, shows its log's tail, stops what it had
    already started and records no stack."""
    cache = Path(stack.workdir)
    work = tmp_path / "broken"
    work.mkdir()
    (work / "chroma").write_text("not a folder")  # Chroma's --path
    ports = {"--flink-rest-port": free_port(), "--flink-rpc-port": free_port(),
             "--kafka-port": free_port(), "--chroma-port": free_port()}
    # the second stack runs production's cluster only: the session's stack holds the replay cluster's ports
    port_args = [x for kv in ports.items() for x in (kv[0], str(kv[1]))] + ["--no-replay-cluster"]
    assert _pids_mentioning(work) == set()
    up = _cli("stack", "up", "--workdir", str(work), "--cache-dir", str(cache), *port_args)
    assert up.returncode != 0
    err = up.stdout + up.stderr
    assert "chroma (pid" in err and "died at start" in err, err
    assert str(work / "logs" / "chroma.log") in err and "File exists" in err, err  # the log's tail
    assert not (work / "stack.json").exists()
    assert _pids_mentioning(work) == set()  # Flink was stopped again
    assert all(port_free(p) for p in ports.values()), ports  # and tansu (its command names no folder)


def _cmdline(pid: int) -> bytes:
    """The command line of a live process, or b"" once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ") if _pid_alive(pid) else b""
    except OSError:
        return b""


def _pids_mentioning(workdir: Path) -> set[int]:
    """Live processes whose command line mentions ``workdir`` (what a stack in it started)."""
    pids = (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
    return {pid for pid in pids if str(workdir).encode() in _cmdline(pid)}


def test_prepare_installs_the_parts_and_starts_nothing(stack, tmp_path: Path) -> None:
    """`stack prepare` (what `make test` runs before the tests) finds the parts in the cache — the Flink-side
    venv linked to this checkout, tansu, the connector jars with kafka-clients and Flink Agents' jar in Flink's
    lib/ — and starts nothing: no process, no stack recorded."""
    cache = Path(stack.workdir)
    work = tmp_path / "prepared"
    done = _cli("stack", "prepare", "--workdir", str(work), "--cache-dir", str(cache))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stack parts ready" in done.stdout and "flink-replay stack up" in done.stdout, done.stdout
    venv = cache / "flink-venv"
    assert (venv / ".flink-replay-ready").exists() and (cache / "bin" / "tansu").exists()
    assert sorted(p.name for p in (cache / "jars").glob("*.jar")) == [
        "flink-connector-kafka-4.0.1-2.0.jar", "kafka-clients-3.9.1.jar"]
    lib = sorted(p.name for p in (venv_site_packages(venv) / "pyflink" / "lib").glob("*.jar"))
    assert "kafka-clients-3.9.1.jar" in lib and lib[-1].startswith("zz-flink-agents-dist-flink-2.2-"), lib
    assert not (work / "stack.json").exists() and _pids_mentioning(work) == set()

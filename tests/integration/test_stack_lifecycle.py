"""`stack up` / `status` / `down` on a second stack (own work folder and ports, shared cache)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from airflow_flink_replay.local.stack import _pid_alive, _port_free


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_flink_replay.cli", *args],
        capture_output=True, text=True, timeout=300, env=os.environ.copy(),
    )


def test_up_status_down_leaves_no_process_and_frees_ports(stack, tmp_path: Path) -> None:
    cache = Path(stack.workdir)  # reuse the session stack's venv and downloads
    ports = {"--flink-rest-port": _free_port(), "--flink-rpc-port": _free_port(),
             "--kafka-port": _free_port(), "--chroma-port": _free_port()}
    common = ["--workdir", str(tmp_path / "stack2"), "--cache-dir", str(cache)]
    port_args = [x for kv in ports.items() for x in (kv[0], str(kv[1]))]

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
    finally:
        down = _cli("stack", "down", *common, "--json")
    assert down.returncode == 0, down.stderr
    assert set(json.loads(down.stdout)["stopped"]) == {"tansu", "chroma", "flink-jobmanager", "flink-taskmanager"}
    assert not any(_pid_alive(pid) for pid in pids)
    assert all(_port_free(p) for p in ports.values())
    after = _cli("stack", "status", *common)
    assert after.returncode == 1 and "down" in after.stdout
    # Flink's temp files (job blobs: ~115 MB per agent job) do not outlive the stack
    assert not any((tmp_path / "stack2" / "tmp").iterdir()) and not any((tmp_path / "stack2" / "web").iterdir())

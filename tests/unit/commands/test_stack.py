"""``flink-replay stack`` (``commands/stack.py``): its command line, and what each action prints and exits with in
the cases that start nothing — no stack recorded in the folder, a recorded stack whose processes are gone and
whose ports answer nothing, ports that something else holds (``up`` refuses before it sets anything up), a
cluster the stack does not run. The stack itself is started only by the integration tests.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_flink_replay.commands import stack
from airflow_flink_replay.local.stack import LocalStack, ProcessInfo, StackInfo


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="flink-replay")
    stack.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["stack", *argv])


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    args = parse(*argv)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack's settings come from the command line here, not from the developer's environment."""
    names = "REPLAY_CLUSTER CACHE_DIR FLINK_REST_PORT FLINK_RPC_PORT KAFKA_PORT CHROMA_PORT"
    names += " REPLAY_REST_PORT REPLAY_RPC_PORT"
    for name in names.split():
        monkeypatch.delenv(f"FLINK_REPLAY_{name}", raising=False)


def test_the_command_line_defaults() -> None:
    args = parse("status")
    assert (args.action, args.cluster, args.task_slots) == ("status", "production", 4)
    assert args.workdir is None and args.cache_dir is None
    ports = ("flink_rest_port", "flink_rpc_port", "kafka_port", "chroma_port", "replay_rest_port", "replay_rpc_port")
    assert all(getattr(args, p) is None for p in ports)
    assert not args.json and not args.no_replay_cluster and args.func is stack.run


def test_the_command_line_reads_every_option(tmp_path: Path) -> None:
    args = parse(
        *f"restart-taskmanager --cluster replay --workdir {tmp_path} --cache-dir {tmp_path / 'c'} --flink-rest-port "
        "18081 --kafka-port 19092 --task-slots 2 --no-replay-cluster --json".split()
    )
    assert (args.action, args.cluster) == ("restart-taskmanager", "replay")
    assert (args.workdir, args.cache_dir) == (tmp_path, tmp_path / "c")
    assert (args.flink_rest_port, args.kafka_port, args.task_slots) == (18081, 19092, 2)
    assert args.no_replay_cluster and args.json


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("bogus",), "invalid choice: 'bogus'"),
        (("restart-taskmanager", "--cluster", "staging"), "argument --cluster: invalid choice: 'staging'"),
        (("up", "--replay-rpc-port", "0"), "argument --replay-rpc-port: '0' is not a port (1-65535)"),
        (("up", "--task-slots", "-2"), "argument --task-slots: '-2' is not a whole number of at least 1"),
    ],
)
def test_a_bad_command_line_is_refused_naming_the_argument(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], named: str
) -> None:
    with pytest.raises(SystemExit):
        parse(*argv)
    assert named in capsys.readouterr().err


def test_status_of_a_folder_without_a_stack_is_down_and_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "status", "--workdir", str(tmp_path))
    assert (code, out, err) == (1, f"down: no stack.json in {tmp_path.resolve()}\n", "")
    code, out, _ = run(capsys, "status", "--workdir", str(tmp_path), "--json")
    assert code == 1 and json.loads(out) == {"up": False, "reason": f"no stack.json in {tmp_path.resolve()}"}


def test_down_of_a_folder_without_a_stack_stops_nothing_and_succeeds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(capsys, "down", "--workdir", str(tmp_path)) == (0, "stopped: nothing\n", "")
    code, out, _ = run(capsys, "down", "--workdir", str(tmp_path), "--json")
    assert code == 0 and json.loads(out) == {"stopped": []}


def test_a_restart_without_a_stack_fails_saying_to_start_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for action in ("restart-taskmanager", "recycle-replay"):
        code, out, err = run(capsys, action, "--workdir", str(tmp_path))
        assert (code, out) == (1, "")
        assert err == f"restart failed: no stack in {tmp_path.resolve()}: run `flink-replay stack up` first\n"


def test_the_replay_cluster_cannot_be_restarted_when_the_stack_runs_without_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--no-replay-cluster`` reaches the stack's settings: it then runs no replay cluster to recycle."""
    for argv in (("recycle-replay",), ("restart-taskmanager", "--cluster", "replay")):
        code, _out, err = run(capsys, *argv, "--workdir", str(tmp_path), "--no-replay-cluster")
        assert code == 1 and err.startswith("restart failed: this stack runs no 'replay' Flink cluster"), err


def _unused_ports(count: int) -> list[int]:
    held = [socket.socket() for _ in range(count)]
    try:
        for s in held:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()  # finished and reaped: its pid names no process
    return proc.pid


def test_status_of_a_recorded_stack_that_died_shows_every_part_down(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Every process gone, nothing listening at the recorded addresses: each part is marked DOWN, exit 1."""
    flink, replay, kafka, chroma = _unused_ports(4)
    pid = _dead_pid()
    info = StackInfo(
        workdir=str(tmp_path),
        flink_home="/nowhere",
        flink_conf_dir="/nowhere",
        flink_python="/nowhere",
        flink_rest_url=f"http://127.0.0.1:{flink}",
        replay_flink_rest_url=f"http://127.0.0.1:{replay}",
        kafka_bootstrap=f"127.0.0.1:{kafka}",
        chroma_host="127.0.0.1",
        chroma_port=chroma,
        mem0_dir="/nowhere",
        connector_jars=[],
        savepoint_dir="/nowhere",
        checkpoint_dir="/nowhere",
        java_home="/nowhere",
        processes=[ProcessInfo(name="tansu", pid=pid, log="/nowhere/tansu.log")],
        env={},
        connections_file="/nowhere/connections.json",
    )
    (tmp_path / "stack.json").write_text(info.model_dump_json())
    code, out, err = run(capsys, "status", "--workdir", str(tmp_path))
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        f"DOWN Flink  http://127.0.0.1:{flink}  taskmanagers=0",
        f"DOWN Flink  http://127.0.0.1:{replay}  taskmanagers=0  (replays)",
        f"DOWN Kafka  127.0.0.1:{kafka}  (tansu metadata)",
        f"DOWN Mem0   http://127.0.0.1:{chroma}  (chroma heartbeat)",
        f"     tansu              pid {pid:<8} DEAD",
    ]
    assert (tmp_path / "stack.json").exists()  # status only reads


@pytest.fixture
def held_ports() -> Iterator[list[int]]:
    """Six loopback ports this test listens on (something else holds them, for the stack)."""
    held = []
    for _ in range(6):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        held.append(s)
    yield [s.getsockname()[1] for s in held]
    for s in held:
        s.close()


def test_up_refuses_ports_something_else_holds_before_setting_anything_up(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, held_ports: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_prepare(self: LocalStack) -> None:
        raise AssertionError("stack up went on to set the stack up")

    monkeypatch.setattr(LocalStack, "_prepare", must_not_prepare)  # a guard: the refusal must come first
    names = (
        "--flink-rest-port",
        "--flink-rpc-port",
        "--kafka-port",
        "--chroma-port",
        "--replay-rest-port",
        "--replay-rpc-port",
    )
    argv = [part for name, p in zip(names, held_ports, strict=True) for part in (name, str(p))]
    code, out, err = run(capsys, "up", "--workdir", str(tmp_path), *argv)
    assert (code, out) == (1, "")
    first, _, fix = err.partition(". Stop what holds them")
    assert first.startswith("stack up failed: port(s) already taken on 127.0.0.1: ")
    for option, p in zip(names, held_ports, strict=True):
        assert f"{option[2:].replace('-', '_')}={p}" in first, first
    assert "pick other ports" in fix
    assert not (tmp_path / "stack.json").exists()

"""Clear errors from `stack up` before anything starts: a taken port is named with the flag that moves it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from airflow_flink_replay.local.components import StackSetupError
from airflow_flink_replay.local.stack import LocalStack, StackConfig


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_taken_port_is_named_with_the_fix(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        stack = LocalStack(StackConfig(workdir=tmp_path / "s", kafka_port=port, flink_rest_port=_free_port(),
                                       flink_rpc_port=_free_port(), chroma_port=_free_port()))
        with pytest.raises(StackSetupError, match=rf"kafka_port={port}.*--kafka-port"):
            stack.up()
    assert not (tmp_path / "s" / "stack.json").exists()


def test_stack_changes_hold_a_lock_other_processes_wait_for(tmp_path) -> None:
    """up/down/restart hold the stack's lock (re-entrant here): another process looking at the stack in the
    middle of a recycle would otherwise see the old pids dead and tear the whole stack down."""
    import subprocess
    import sys

    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    stack = LocalStack(StackConfig(workdir=tmp_path))
    probe = (
        "import fcntl, sys\n"
        f"h = open({str(tmp_path / 'stack.lock')!r}, 'a+')\n"
        "try:\n    fcntl.flock(h.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(3)\n"
    )
    with stack._changing(), stack._changing():  # re-entrant: down() inside up() does not deadlock
        held = subprocess.run([sys.executable, "-c", probe], check=False).returncode
    free = subprocess.run([sys.executable, "-c", probe], check=False).returncode
    assert (held, free) == (3, 0)

"""``flink-replay stack up`` started in a process of its own, to be waited for later: the test session's
stack start (tests/conftest.py) and ``make test``'s (tests/suite.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class StackStart:
    """``flink-replay stack up`` in a process of its own, started at once; ``already_up`` says whether the stack
    was up before. A process, not a thread: what a unit test changes in this process (working directory,
    environment) must not reach the stack's processes."""

    def __init__(self) -> None:
        from airflow_flink_replay.local.stack import LocalStack, StackConfig

        self.local = LocalStack(StackConfig())
        # "Already up" = started outside this session: reuse it and leave it running. (Recorded is enough: a
        # process of it may be mid-restart — a recycle of the replay cluster — which `up` waits out.)
        self.already_up = self.local.info() is not None
        self.log = Path(tempfile.mkstemp(prefix="afr-stack-up-", suffix=".log")[1])
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [str(Path(sys.executable).parent / "flink-replay"), "stack", "up"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT, env=os.environ.copy(),
            )

    def wait(self) -> None:
        """Wait for the start; a failed start fails with its output."""
        if self.process.wait() != 0:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])
            raise RuntimeError(f"`flink-replay stack up` failed (exit {self.process.returncode}):\n{tail}")

    def abandon(self) -> None:
        """Stop the start if it still runs (the caller gave up before waiting for it)."""
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)

"""docs/your-agent.md run as it is written: its shell blocks, with the work folder and production's name replaced
(unique per test run), and the production a ``deploy`` block starts, stopped again afterwards. Shared by the
walkthrough's integration tests (test_quickstart_agent.py, test_pipeline_agents.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.dag_testing import stop_production
from tests.doc_blocks import ROOT, fenced_blocks

PAGE = ROOT / "docs" / "your-agent.md"


def doc_step(step: str, folder: Path, name: str, *, doc_folder: str, doc_name: str) -> str:
    """The page's shell block ``step`` with its work folder (``doc_folder``) and production name (``doc_name``)
    replaced by ``folder`` and ``name``."""
    block = next(b for b in fenced_blocks(PAGE) if b.kind == "run" and b.target == step)
    assert doc_folder in block.text, block.text
    return block.text.replace(doc_folder, str(folder)).replace(doc_name, name)


def run_step(script: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a shell block with bash in the repository's folder, as a reader would. It runs in a process group of
    its own, ended as a whole afterwards: a background feeder of a block that failed half-way stops too."""
    proc = subprocess.Popen(["bash", "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def deployed(stack: Any, folder: Path, *, step: str, doc_folder: str, doc_name: str, prefix: str) -> Iterator[Any]:
    """Run the page's deploy block ``step`` in ``folder`` for a production named ``<prefix>-<random>``; yield its
    facts (job name, topics, spec path, folder, deploy time) and stop it, topics and memories included, after."""
    from airflow_flink_replay.local.demo import DemoTopics

    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    prod = {"job_name": name, "identifier": name, "spec_path": folder / "spec.yaml", "folder": folder,
            "topics": DemoTopics(reviews=f"{name}-input", outputs=f"{name}-outputs", capture=f"{name}-capture",
                                 action_state=f"{name}-action-state")}  # fmt: skip
    started = time.monotonic()
    done = run_step(doc_step(step, folder, name, doc_folder=doc_folder, doc_name=doc_name), timeout=400)
    prod["deploy_s"] = time.monotonic() - started
    try:
        assert done.returncode == 0, done.stdout[-4000:]
        yield prod
    finally:
        stop_production(stack, prod)

"""Shared fixtures: a test-only AIRFLOW_HOME with a migrated sqlite DB, and the real local stack.

AIRFLOW_HOME is set before anything imports Airflow. The ``stack`` fixture brings the embedded stack up
once per session with the same code as ``flink-replay stack up``; a stack that is already up (for
example from an earlier ``stack up``) is reused and left running.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_AIRFLOW_HOME = Path(os.environ.get("FLINK_REPLAY_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="afr-airflow-"))
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
os.environ.setdefault("FLINK_REPLAY_STACK_DIR", str(ROOT / ".stack"))
for _k, _v in {"MEM0_TELEMETRY": "False", "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}.items():
    os.environ.setdefault(_k, _v)
os.environ.setdefault("MEM0_DIR", str(_AIRFLOW_HOME / "mem0"))


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated sqlite metadata DB in the test-only AIRFLOW_HOME."""
    marker = _AIRFLOW_HOME / ".migrated"
    if not marker.exists():
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            check=True,
            capture_output=True,
            env=os.environ.copy(),
        )
        marker.write_text("ok")
    return _AIRFLOW_HOME


def _alive(pid: int) -> bool:
    from airflow_flink_replay.local.stack import _pid_alive

    return _pid_alive(pid)


@pytest.fixture(scope="session")
def stack() -> Iterator:
    """The real local stack (Flink, tansu, Chroma), up for the whole session."""
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    local = LocalStack(StackConfig())
    recorded = local.info()
    # "Already up" = started outside this session: reuse it and leave it running. (Recorded is enough: a
    # process of it may be mid-restart — a recycle of the replay cluster — which `up` waits out.)
    already_up = recorded is not None
    info = local.up()
    yield info
    keep = os.environ.get("FLINK_REPLAY_KEEP_STACK") or (Path(info.workdir) / "keep").exists()
    if not already_up and not keep:
        local.down()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests under tests/integration are integration tests, the rest unit tests, unless marked."""
    for item in items:
        if "integration" in item.path.parts and not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.integration)
        elif not item.get_closest_marker("integration") and not item.get_closest_marker("unit"):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True, scope="module")
def _fresh_taskmanager_when_metaspace_fills(request: pytest.FixtureRequest) -> None:
    """Every Flink Agents job leaves ~25 MB in the TaskManager's metaspace: before an integration module,
    replace a TaskManager (production's or the replay cluster's) that is more than half full, so a long
    session never hits Metaspace OOM — or that died (PyFlink's embedded Python can crash one natively)."""
    if "integration" not in Path(str(request.node.path)).parts:
        return
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    local = LocalStack(StackConfig())
    info = local.info()
    dead = {p.name for p in info.processes if not _alive(p.pid)} if info else set()
    if info is None or dead - {"flink-taskmanager", "replay-taskmanager"}:
        return  # more than a TaskManager is gone: the session's stack fixture starts the stack again
    from airflow_flink_replay.local.stack import flink_taskmanagers

    if flink_taskmanagers(info.flink_rest_url) < 1 or local.taskmanager_metaspace_used() > 0.5:
        local.restart_taskmanager()
    if info.replay_flink_rest_url and (
        flink_taskmanagers(info.replay_flink_rest_url) < 1 or local.taskmanager_metaspace_used("replay") > 0.5
    ):
        local.restart_taskmanager("replay")
    if info.replay_flink_rest_url:
        local.recycle_if_worn("replay")  # the JobManager's metaspace: see docs/local-stack.md
    # Production's cluster too: the Flink-side and control-plane tests submit dozens of Python jobs there,
    # and the submitters' guard refuses a run below 96 MB free. Between modules nothing of a test needs it.
    local.recycle_if_worn("production", min_free_mb=300.0, when_busy=True)

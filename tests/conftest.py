"""Shared fixtures: a test-only AIRFLOW_HOME with a migrated sqlite DB, and the real local stack.

AIRFLOW_HOME is set before anything imports Airflow. The ``stack`` fixture brings the embedded stack up
once per session with the same code as ``flink-replay stack up``; a stack that is already up (for
example from an earlier ``stack up``) is reused and left running.

In one session unit tests run first. When integration tests are selected, the stack starts in a process of
its own as soon as collection ends, so its start overlaps the unit tests instead of following them. (``make
test`` runs a unit session, then an integration session: tests/suite.py.)
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.stack_start import StackStart

ROOT = Path(__file__).resolve().parent.parent
_AIRFLOW_HOME = Path(os.environ.get("FLINK_REPLAY_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="afr-airflow-"))
if not os.environ.get("FLINK_REPLAY_TEST_AIRFLOW_HOME"):  # this process made it: removed when it ends
    atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)
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


@functools.cache
def _start_stack_in_background() -> StackStart:
    """The session's one stack start (begun at the first call)."""
    return StackStart()


@pytest.fixture(scope="session")
def stack() -> Iterator:
    """The real local stack (Flink, tansu, Chroma), up for the whole session."""
    start = _start_stack_in_background()
    start.wait()
    local, already_up = start.local, start.already_up
    info = local.up()  # at once when it is up; restarts a part that died since
    yield info
    keep = os.environ.get("FLINK_REPLAY_KEEP_STACK") or (Path(info.workdir) / "keep").exists()
    if not already_up and not keep:
        local.down()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests under tests/integration are integration tests, the rest unit tests, unless marked; unit tests
    run first (in their collected order), while the stack starts; the distributed Airflow's tests (marked
    ``distributed``: PostgreSQL, Redis and a Celery Airflow of their own) run last."""
    for item in items:
        if "integration" in item.path.parts and not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.integration)
        elif not item.get_closest_marker("integration") and not item.get_closest_marker("unit"):
            item.add_marker(pytest.mark.unit)
    items.sort(key=lambda item: (item.get_closest_marker("integration") is not None,
                                 item.get_closest_marker("distributed") is not None))  # stable


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the stack now when an integration test will need it (the unit tests run meanwhile)."""
    if session.config.option.collectonly:
        return
    if any("stack" in getattr(item, "fixturenames", ()) for item in session.items):
        _start_stack_in_background()


#: What the session spent between integration modules on the stack (restarts, recycles) and in each module:
#: printed at the end of the run (the README's Development section), so the suite's time reads by part.
_TIMELINE: list[tuple[str, str, float]] = []


def _timed(module: str, what: str, action: Callable[[], object]) -> object:
    started, result = time.monotonic(), None
    try:
        result = action()
        return result
    finally:
        _TIMELINE.append((module, f"{what}{': recycled' if result is True else ''}", time.monotonic() - started))


@pytest.fixture(autouse=True, scope="module")
def _fresh_taskmanager_when_metaspace_fills(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every Flink Agents job leaves ~25 MB in the TaskManager's metaspace: before an integration module,
    replace a TaskManager (production's or the replay cluster's) that is more than half full, so a long
    session never hits Metaspace OOM — or that died (PyFlink's embedded Python can crash one natively)."""
    module = Path(str(request.node.path)).name
    if "integration" not in Path(str(request.node.path)).parts:
        yield
        return
    started = time.monotonic()
    _keep_the_stack_fresh(module)
    yield
    _TIMELINE.append((module, "module", time.monotonic() - started))


def _keep_the_stack_fresh(module: str) -> None:
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    local = LocalStack(StackConfig())
    info = local.info()
    dead = {p.name for p in info.processes if not _alive(p.pid)} if info else set()
    if info is None or dead - {"flink-taskmanager", "replay-taskmanager"}:
        return  # more than a TaskManager is gone: the session's stack fixture starts the stack again
    from airflow_flink_replay.local.stack import flink_taskmanagers

    used = {"production": local.taskmanager_metaspace_used(),
            "replay": local.taskmanager_metaspace_used("replay") if info.replay_flink_rest_url else 0.0}
    with (Path(info.workdir) / "logs" / "suite-timeline.jsonl").open("a") as log:  # the readings, for tuning
        log.write(json.dumps({"module": module, "taskmanager_metaspace_used": used,
                              "jobmanager_metaspace_used_mb": _jobmanager_metaspace_mb(info)}) + "\n")
    if flink_taskmanagers(info.flink_rest_url) < 1 or used["production"] > 0.5:
        _timed(module, "production TaskManager restart", local.restart_taskmanager)
    if info.replay_flink_rest_url and (flink_taskmanagers(info.replay_flink_rest_url) < 1 or used["replay"] > 0.5):
        _timed(module, "replay TaskManager restart", lambda: local.restart_taskmanager("replay"))
    if info.replay_flink_rest_url:  # the JobManager's metaspace: see docs/local-stack.md
        _timed(module, "replay cluster recycle check", lambda: local.recycle_if_worn("replay"))
    # Production's cluster too: the Flink-side and control-plane tests submit dozens of Python jobs there,
    # and the submitters' guard refuses a run below 96 MB free. Between modules nothing of a test needs it.
    _timed(module, "production cluster recycle check",
           lambda: local.recycle_if_worn("production", min_free_mb=300.0, when_busy=True))


def _jobmanager_metaspace_mb(info: object) -> dict[str, float]:
    """Each cluster's JobManager metaspace in use, in MB (a reading for tuning only: none when unreadable)."""
    from airflow_flink_replay.exceptions import FlinkRestError
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    used = {}
    for cluster in ("production", "replay"):
        try:
            hook = FlinkRestHook(settings=FlinkRestSettings(base_url=info.rest_url(cluster), retries=0))  # type: ignore[attr-defined]
            used[cluster] = round(hook.jobmanager_memory().metaspace_used / 2**20, 1)
        except FlinkRestError:
            continue
    return used


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The integration session's timeline: each module's wall time and what keeping the stack fresh cost."""
    if not _TIMELINE:
        return
    tr = terminalreporter
    tr.section("suite timeline")
    modules = sorted(((s, m) for m, w, s in _TIMELINE if w == "module"), reverse=True)
    for seconds, module in modules[:25]:
        tr.write_line(f"{seconds:8.1f}s  {module}")
    upkeep = [(m, w, s) for m, w, s in _TIMELINE if w != "module" and s >= 1.0]
    for module, what, seconds in upkeep:
        tr.write_line(f"{seconds:8.1f}s  before {module}: {what}")
    tr.write_line(f"modules {sum(s for s, _ in modules):.0f}s, stack upkeep between them "
                  f"{sum(s for _, _, s in upkeep):.0f}s")

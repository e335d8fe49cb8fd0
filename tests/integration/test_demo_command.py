"""`flink-replay demo` as a user runs it, and `make demo-ui`'s Airflow in an environment without the venv on PATH.

The demo runs as a subprocess on the local stack with a small window (the replays' cost hardly depends on
it): candidate v2 must FAIL and v1 PASS, the exit code says so, the console shows at most ~60 lines (one
per chain step per run, the verdicts and their reasons) and names the log file that holds Airflow's
output. The UI test starts the Makefile's ``demo-ui`` command with ``PATH`` free of ``.venv/bin``:
``airflow standalone`` starts its parts as ``airflow ...`` by name and must find them anyway.

Cost (2 cores): the demo 8 min with the machine otherwise idle, 11 min beside two other integration
modules (deploying production ~1 min, each gate run ~3.5 min); the UI ~2 min. The demo's two gate runs
assert what ``test_release_gate_dag.py`` asserts under ``dag.test()``, here through the command a user runs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.airflow_server import free_port
from tests.dag_testing import running_jobs, stop_production

pytestmark = pytest.mark.timeout(1800)
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MAX_CONSOLE_LINES = 60
STEPS = ("preflight", "agent check", "savepoint", "production resumed", "capture window", "memory forks", "replays",
         "compare", "cleanup")


def _clean_env() -> dict[str, str]:
    """The caller's environment without the venv's bin on PATH (a fresh shell that never activated it)."""
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if Path(p) != BIN]
    return {**os.environ, "PATH": os.pathsep.join(path)}


@pytest.fixture(scope="module")
def demo_production(stack: Any) -> Any:
    """The demo's production, cancelled (with its topics, memories, savepoints) afterwards when this module
    started it."""
    from airflow_flink_replay.local.demo import JOB_IDENTIFIER, PRODUCTION_JOB_NAME, DemoTopics

    was_running = bool(running_jobs(stack, PRODUCTION_JOB_NAME))
    demo_dir = Path(stack.workdir) / "demo"
    yield demo_dir
    if not was_running:
        stop_production(stack, {"job_name": PRODUCTION_JOB_NAME, "topics": DemoTopics.named("demo"),
                                "identifier": JOB_IDENTIFIER, "spec_path": demo_dir / "replay_spec.yaml"})


def test_demo_v2_fails_v1_passes_in_a_few_lines(demo_production: Path) -> None:
    started = time.monotonic()
    done = subprocess.run([str(BIN / "flink-replay"), "demo", "--window", "16"], cwd=ROOT, env=_clean_env(),
                          capture_output=True, text=True, timeout=1700, check=False)
    took = time.monotonic() - started
    out = done.stdout + done.stderr
    lines = out.splitlines()
    assert done.returncode == 0, f"demo exit {done.returncode} after {took:.0f}s:\n{out}"
    assert len(lines) <= MAX_CONSOLE_LINES, f"{len(lines)} console lines:\n{out}"
    log = re.search(r"full Airflow log: (\S+\.log)", out)
    assert log and Path(log.group(1)).is_file(), out
    assert "flink_agents_release_gate" in Path(log.group(1)).read_text(errors="replace")  # Airflow's output went there
    blocks = re.split(r"\n(?=flink_agents_release_gate with candidate)", out)[1:]
    assert [b.split("(", 1)[0].split("with ")[1].strip() for b in blocks] == ["candidate v2", "candidate v1"], out
    verdicts = [re.search(r"^  => (\w+)", b, re.M) for b in blocks]
    assert [v.group(1) if v else None for v in verdicts] == ["FAIL", "PASS"], out
    for block in blocks:
        assert [s for s in STEPS if re.search(rf"^  {s} +\d+\.\ds", block, re.M)] == list(STEPS), block
        assert re.search(r"downtime \d+\.\d s", block) and re.search(r"\d+ records in the window", block), block
        assert "report: " in block and "run record: " in block, block
        # the baseline reproduces what production itself output for the window (deterministic chat model)
        assert "baseline = production for 100.0% of its outputs" in block, block
    assert re.search(r"\[\w+\] ", blocks[0]), blocks[0]  # v2's FAIL comes with its reasons
    print(f"demo took {took:.0f}s, {len(lines)} console lines")


def test_demo_ui_serves_without_the_venv_on_path(demo_production: Path) -> None:
    recipe = _makefile_recipe("demo-ui").replace("$(BIN)", str(BIN))
    port = free_port()
    log = demo_production / "demo-ui-test.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*recipe.split(), "--port", str(port)], cwd=ROOT, env=_clean_env(), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline, health = time.monotonic() + 600, None
        while time.monotonic() < deadline and proc.poll() is None:
            health = _health(port)
            if health and all((health.get(p) or {}).get("status") == "healthy"
                              for p in ("metadatabase", "scheduler", "dag_processor")):
                break
            time.sleep(3)
        text = log.read_text(errors="replace")
        assert proc.poll() is None, f"demo --ui exited {proc.returncode}:\n{text[-4000:]}"
        assert health and health["scheduler"]["status"] == "healthy", f"{health}\n{text[-4000:]}"
        assert "FileNotFoundError" not in text
        assert requests.get(f"http://127.0.0.1:{port}/", timeout=10).ok  # the UI page itself
    finally:
        _stop(proc)


def _makefile_recipe(target: str) -> str:
    """The one command of ``target`` in the Makefile."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    return next(line.strip() for line in lines[start + 1:]
                if line.startswith("\t") and not line.strip().startswith("@#"))


def _health(port: int) -> dict[str, Any] | None:
    try:
        r = requests.get(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=5)
        return r.json() if r.ok else None
    except (requests.RequestException, ValueError):
        return None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the demo and its standalone (their own process group, started above)."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue

"""The Flink-side Python for unit tests: a script run in ``.stack/flink-venv`` (written by ``flink-replay stack
up``), the only venv with PyFlink and Flink Agents.

The script builds job graphs in PyFlink's local gateway (a JVM of its own: no cluster is started, nothing is
submitted or executed) and prints what it found as JSON on its last line. One script per test module, run by a
module-scoped fixture, so a module pays for one JVM start. Without that venv the tests that need it are skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Where the stack keeps its Flink-side venv and jars: its cache (a second stack shares the first's), else its folder.
STACK_DIR = Path(os.environ.get("FLINK_REPLAY_CACHE_DIR") or os.environ.get("FLINK_REPLAY_STACK_DIR")
                 or ROOT / ".stack")
FLINK_PYTHON = STACK_DIR / "flink-venv" / "bin" / "python"
#: The Kafka connector jars the stack downloaded (flink-connector-kafka, kafka-clients).
CONNECTOR_JARS = sorted(str(p) for p in (STACK_DIR / "jars").glob("*.jar"))


def flink_side_facts(script: str, *args: str, jars: bool = False, timeout: float = 300) -> dict[str, Any]:
    """Run ``script`` in the Flink-side Python with ``args``; the JSON object it printed last. Skips the calling
    test (or fixture) without the Flink-side venv, or without the connector jars when ``jars``."""
    if not FLINK_PYTHON.exists():
        pytest.skip("no Flink-side venv (flink-replay stack up writes it)")
    if jars and not CONNECTOR_JARS:
        pytest.skip(f"no Kafka connector jars in {STACK_DIR / 'jars'} (flink-replay stack up downloads them)")
    # Flink Agents reads agent options from $FLINK_CONF_DIR's config file: the stack's must not leak in
    env = {k: v for k, v in os.environ.items() if k != "FLINK_CONF_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([str(FLINK_PYTHON), "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))

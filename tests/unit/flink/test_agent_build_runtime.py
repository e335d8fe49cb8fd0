"""The replay runtime a job ships (``flink/agent_build.py`` ``_RUNTIME_FILES``) is closed under its own imports:
a module the proxies, the cassette or the audit import but the list lacks fails only on the TaskManager, at the
first resource call (``No module named 'afr_rt_....core.call_match'`` after call matching was added)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from airflow_flink_replay.flink.agent_build import _RUNTIME_FILES

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[3] / "airflow_flink_replay"


def _imported_files(rel: str) -> set[str]:
    """The package's modules ``rel`` imports anywhere in its body (but under ``if TYPE_CHECKING:``), as file paths
    relative to the package."""
    tree = ast.parse((PACKAGE / rel).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if not name.startswith("airflow_flink_replay."):
                continue
            path = name.removeprefix("airflow_flink_replay.").replace(".", "/")
            if (PACKAGE / f"{path}.py").exists():
                found.add(f"{path}.py")
            elif (PACKAGE / path / "__init__.py").exists():
                found.add(f"{path}/__init__.py")
    return found


def test_the_shipped_runtime_holds_every_module_it_imports() -> None:
    shipped = set(_RUNTIME_FILES)
    missing = {f"{rel} imports {dep}" for rel in shipped for dep in _imported_files(rel) - shipped}
    assert not missing, sorted(missing)

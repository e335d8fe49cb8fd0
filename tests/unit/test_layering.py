"""The package's layering holds: the provider works without the development stack, ``core/`` stays pure, and
``flink/`` (the job side, run by Flink's Python) never needs Airflow.

- Every module under the provider's subpackages imports in a fresh interpreter where
  ``airflow_flink_replay.local`` cannot be imported (a meta-path finder refuses it): the stack writes
  connections, the provider reads only connections.
- Read from the source (AST, every import statement, including those inside functions): nothing in ``core/``
  imports airflow, pyflink or flink_agents; nothing in ``flink/`` imports airflow; nothing in ``lifecycle/``
  imports airflow or the operators; nothing outside ``local/`` and ``commands/`` imports
  ``airflow_flink_replay.local``.
- Imported in a fresh interpreter, the ``memory/`` modules (the Mem0 fork; the Flink side builds its memory and
  journal with them) load neither airflow nor pyflink, except ``memory/journal_reader.py`` (the Airflow side's
  reader of the journal, a Kafka-provider hook).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_flink_replay

PACKAGE = Path(airflow_flink_replay.__file__).resolve().parent
ROOT_NAME = "airflow_flink_replay"
LOCAL = f"{ROOT_NAME}.local"

# The subpackages the provider (Airflow side) is made of; each must import without ``local``.
PROVIDER_SUBPACKAGES = (
    "core", "hooks", "operators", "sensors", "triggers", "links", "replay_dag", "memory", "run_io", "lifecycle",
)
# Package-root modules of the provider side; ``cli`` wires the ``commands`` (which may use ``local``).
PROVIDER_ROOT_MODULES_EXCLUDED = {"__init__", "cli"}

_IMPORT_ALL_WITHOUT_LOCAL = r"""
import importlib, importlib.abc, json, pkgutil, sys, traceback

LOCAL = "airflow_flink_replay.local"


class RefuseLocal(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == LOCAL or fullname.startswith(LOCAL + "."):
            raise ImportError(f"{fullname} is made unimportable by the layering test")
        return None


sys.meta_path.insert(0, RefuseLocal())
modules = json.loads(sys.argv[1])
failures = {}
for name in modules:
    try:
        importlib.import_module(name)
    except BaseException:
        failures[name] = traceback.format_exc(limit=-3)
leaked = sorted(m for m in sys.modules if m == LOCAL or m.startswith(LOCAL + "."))
print(json.dumps({"imported": len(modules) - len(failures), "failures": failures, "leaked": leaked}))
"""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules_under(subpackage: str) -> list[Path]:
    return sorted((PACKAGE / subpackage).rglob("*.py"))


def _provider_modules() -> list[str]:
    names = [_module_name(p) for sub in PROVIDER_SUBPACKAGES for p in _modules_under(sub)]
    names += [_module_name(p) for p in sorted(PACKAGE.glob("*.py")) if p.stem not in PROVIDER_ROOT_MODULES_EXCLUDED]
    return names


def _imported_modules(path: Path) -> set[str]:
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    return _imports_in(path.read_text(), package)


def _imports_in(source: str, package: str) -> set[str]:
    """Every module an import statement in ``source`` names, relative imports resolved against ``package``
    (``from . import x`` gives both the package and ``package.x``, since ``x`` may be a submodule)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base = ".".join(base_parts[: len(base_parts) - (node.level - 1)])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _offenders(paths: list[Path], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    """``{module: [forbidden imports]}`` for the files in ``paths`` importing a name in or under ``forbidden``."""
    out: dict[str, list[str]] = {}
    for path in paths:
        bad = sorted(m for m in _imported_modules(path) if any(m == f or m.startswith(f + ".") for f in forbidden))
        if bad:
            out[_module_name(path)] = bad
    return out


def test_the_module_lists_are_not_empty() -> None:
    """Guards the other tests against passing vacuously after a move of the package."""
    modules = _provider_modules()
    for sub in ("core", "hooks", "operators", "triggers", "sensors", "links"):
        assert any(m.startswith(f"{ROOT_NAME}.{sub}.") for m in modules), sub
    assert _modules_under("flink") and _modules_under("local")


@pytest.mark.timeout(300)
def test_every_provider_module_imports_with_local_unimportable() -> None:
    modules = _provider_modules()
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL_WITHOUT_LOCAL, json.dumps(modules)],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=PACKAGE.parent,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["failures"] == {}, "\n\n".join(f"{m}:\n{tb}" for m, tb in result["failures"].items())
    assert result["leaked"] == []
    assert result["imported"] == len(modules)


def test_core_imports_neither_airflow_nor_the_flink_side() -> None:
    assert _offenders(_modules_under("core"), ("airflow", "pyflink", "flink_agents")) == {}


def test_flink_never_imports_airflow() -> None:
    assert _offenders(_modules_under("flink"), ("airflow",)) == {}


#: The one module of ``memory/`` that runs on the Airflow side only.
MEMORY_AIRFLOW_SIDE = {f"{ROOT_NAME}.memory.journal_reader"}

_LOADED_AFTER_IMPORTS = r"""
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("airflow", "pyflink", "flink_agents"))))
"""


def test_memory_loads_neither_airflow_nor_pyflink() -> None:
    """Transitively, not only the modules' own imports: the Flink side imports ``memory.journal`` and
    ``memory.offline``; the backends need no Airflow either (the hook builds them, a script may too)."""
    modules = [_module_name(p) for p in _modules_under("memory")]
    shared = [m for m in modules if m not in MEMORY_AIRFLOW_SIDE]
    assert len(shared) == len(modules) - len(MEMORY_AIRFLOW_SIDE) and f"{ROOT_NAME}.memory.offline" in shared
    proc = subprocess.run(
        [sys.executable, "-c", _LOADED_AFTER_IMPORTS, json.dumps(shared)],
        capture_output=True, text=True, timeout=120, cwd=PACKAGE.parent,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_lifecycle_procedures_import_neither_airflow_nor_the_operators() -> None:
    """The procedures take hooks and return typed results; the operators wire them (never the other way)."""
    assert _modules_under("lifecycle")
    assert _offenders(_modules_under("lifecycle"), ("airflow", f"{ROOT_NAME}.operators")) == {}


def test_only_local_and_commands_import_the_development_stack() -> None:
    allowed = (PACKAGE / "local", PACKAGE / "commands")
    paths = [p for p in sorted(PACKAGE.rglob("*.py")) if not any(p.is_relative_to(a) for a in allowed)]
    assert _offenders(paths, (LOCAL,)) == {}


def test_the_import_reader_sees_relative_and_nested_imports() -> None:
    """The AST reader resolves ``from ..local import x`` and finds imports inside functions."""
    source = "def f():\n    from ..local import stack\n    import airflow.sdk\n    from . import flink_rest\n"
    found = _imports_in(source, f"{ROOT_NAME}.hooks")
    assert {LOCAL, f"{LOCAL}.stack", "airflow.sdk", f"{ROOT_NAME}.hooks.flink_rest"} <= found
    assert _offenders([PACKAGE / "commands" / "stack.py"], (LOCAL,)), "commands/stack.py uses local: seen"

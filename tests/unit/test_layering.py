"""The package's layering holds: the provider works without the development stack, ``core/`` stays pure, and
``flink/`` (the job side, run by Flink's Python) never needs Airflow.

- Every module under the provider's subpackages imports in a fresh interpreter where
  ``airflow_flink_replay.local`` cannot be imported (a meta-path finder refuses it): the stack writes
  connections, the provider reads only connections.
- Read from the source (AST, every import statement, including those inside functions): nothing in ``core/``
  imports airflow, pyflink or flink_agents; nothing in ``flink/`` imports airflow; nothing in ``lifecycle/``
  imports airflow or the operators; nothing outside ``local/`` and ``commands/`` imports
  ``airflow_flink_replay.local``; outside ``ui/`` (the API server's plugin) only its leaf ``ui/paths.py`` is
  imported.
- Imported in a fresh interpreter, the ``memory/`` modules (the Mem0 fork; the Flink side builds its memory and
  journal with them) load neither airflow nor pyflink, except ``memory/journal_reader.py`` (the Airflow side's
  reader of the journal, a Kafka-provider hook).
- No import cycles (AST again): ``operators``, ``replay_dag``, ``lifecycle``, ``sensors``, ``links`` and
  ``triggers`` take part in no cycle between subpackages (the task ids and XCom keys both sides use are the leaf
  ``ids.py``); no module imports itself at import time; the cycles through imports inside functions that exist
  today are listed, and a new one fails.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import airflow_flink_replay

PACKAGE = Path(airflow_flink_replay.__file__).resolve().parent
ROOT_NAME = "airflow_flink_replay"
LOCAL = f"{ROOT_NAME}.local"

# The subpackages the provider (Airflow side) is made of; each must import without ``local``.
PROVIDER_SUBPACKAGES = (
    "core", "hooks", "operators", "sensors", "triggers", "links", "replay_dag", "memory", "run_io", "lifecycle", "ui",
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


def _imported_modules(path: Path, *, import_time: bool = False) -> set[str]:
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    return _imports_in(path.read_text(), package, import_time=import_time)


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): a block that never runs."""
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_nodes(node: ast.AST) -> list[ast.AST]:
    """The nodes under ``node`` that run when the module is imported: not function bodies, not
    ``if TYPE_CHECKING:`` blocks (class bodies, ``try`` and other ``if`` blocks do run)."""
    found: list[ast.AST] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or _is_type_checking(child):
            continue
        found.append(child)
        found.extend(_import_time_nodes(child))
    return found


def _imports_in(source: str, package: str, *, import_time: bool = False) -> set[str]:
    """Every module an import statement in ``source`` names, relative imports resolved against ``package``
    (``from . import x`` gives both the package and ``package.x``, since ``x`` may be a submodule). With
    ``import_time``, only the statements that run when the module is imported (:func:`_import_time_nodes`)."""
    found: set[str] = set()
    tree = ast.parse(source)
    for node in _import_time_nodes(tree) if import_time else ast.walk(tree):
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


def test_outside_ui_only_its_leaf_is_imported() -> None:
    """``ui/`` is the API server's plugin; outside it only ``ui/paths.py`` (the report link's URL, built by the
    comparison operator on the worker) is imported, and that module imports nothing of the package."""
    ui = f"{ROOT_NAME}.ui"
    paths = [p for p in sorted(PACKAGE.rglob("*.py")) if not p.is_relative_to(PACKAGE / "ui")]
    used = {m for p in paths for m in _imported_modules(p) if m.startswith(ui + ".")}
    assert used and all(m.startswith(f"{ui}.paths") for m in used), sorted(used)
    assert _module_graph()[f"{ui}.paths"] == set()


def test_the_import_reader_sees_relative_and_nested_imports() -> None:
    """The AST reader resolves ``from ..local import x`` and finds imports inside functions."""
    source = "def f():\n    from ..local import stack\n    import airflow.sdk\n    from . import flink_rest\n"
    found = _imports_in(source, f"{ROOT_NAME}.hooks")
    assert {LOCAL, f"{LOCAL}.stack", "airflow.sdk", f"{ROOT_NAME}.hooks.flink_rest"} <= found
    assert _offenders([PACKAGE / "commands" / "stack.py"], (LOCAL,)), "commands/stack.py uses local: seen"


# --- import cycles. A cycle between subpackages means neither can be read (or moved) without the other; a cycle
# between modules at import time means one of them is used half-initialised, and which one depends on who imports
# first. Names shared by both sides (task ids, XCom keys: ``ids.py``) live in a leaf module both import.

#: Subpackages of the Airflow side that must take part in no cycle: the operators are built from the lifecycle
#: procedures, sensors and links, and ``replay_dag`` is built from the operators, never the other way.
ACYCLIC_SUBPACKAGES = ("operators", "replay_dag", "lifecycle", "sensors", "links", "triggers")
#: Cycles between subpackages that exist today (every import counted, lazy ones too): a new one, or one that grows,
#: fails the test. ``exceptions`` builds two messages from ``core`` (lazily); ``hooks`` reads the run folder
#: (``run_io``) and builds the memory backends (``memory``), which read Kafka through ``hooks.kafka_offsets``.
KNOWN_SUBPACKAGE_CYCLES = {
    frozenset({"core", "exceptions"}),
    frozenset({"hooks", "memory", "run_io"}),
}
#: Cycles between modules through imports inside functions (none at import time, which
#: :func:`test_no_module_imports_itself_at_import_time` checks): a new one, or one that grows, fails the test.
KNOWN_LAZY_MODULE_CYCLES = {
    frozenset({f"{ROOT_NAME}.{m}" for m in names})
    for names in (
        ("core.identity", "core.manifest", "exceptions"),
        ("core.compare", "core.compare.audit", "core.compare.engine"),
        ("core.compare.config", "core.compare.content_rules"),
        ("hooks.flink_rest", "hooks.flink_savepoints"),
        ("flink.audit_context", "flink.unmediated"),
        ("flink.agent_check", "flink.sample_run", "flink.worker_import"),
        ("flink.replay_job", "flink.replay_plans"),
    )
}


def _module_graph(*, import_time: bool = False) -> dict[str, set[str]]:
    """``{module: the package's modules it imports}`` over every module of the package. At import time, importing
    ``a.b.c`` also runs the packages ``a.b`` and ``a`` (those not already the importer's own)."""
    modules = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
        found = {m for m in _imported_modules(path, import_time=import_time) if m in modules}
        if import_time:
            found |= {a for m in found for a in _ancestors(m) if a in modules and a not in own}
        graph[name] = found - {name}
    return graph


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _subpackage(module: str) -> str:
    """The top-level subpackage a module is in, or the package-root module's own name (``ids``, ``exceptions``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative): each a set of nodes that all
    reach one another."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def _subpackage_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, imported in graph.items():
        if _subpackage(module):
            out.setdefault(_subpackage(module), set()).update(
                _subpackage(m) for m in imported if _subpackage(m) and _subpackage(m) != _subpackage(module)
            )
    return out


def _edges_within(graph: dict[str, set[str]], cycle: frozenset[str], group: Any = lambda m: m) -> list[str]:
    """The imports that make ``cycle`` (for the failure message)."""
    return sorted(f"{m} -> {d}" for m, ds in graph.items() for d in ds
                  if group(m) in cycle and group(d) in cycle and group(m) != group(d))  # fmt: skip


def test_ids_is_a_leaf() -> None:
    """The task ids and XCom keys import nothing of the package: the operators and ``replay_dag`` both import them."""
    assert _module_graph()[f"{ROOT_NAME}.ids"] == set()


def test_operators_and_replay_dag_are_in_no_subpackage_cycle() -> None:
    """No chain of imports, lazy ones included, leads from ``operators`` (or ``lifecycle``, ``sensors``, ``links``,
    ``triggers``) back to itself; ``replay_dag`` imports the operators and no operator imports ``replay_dag``."""
    graph = _module_graph()
    subpackages = _subpackage_graph(graph)
    assert "replay_dag" not in subpackages["operators"]
    assert "operators" in subpackages["replay_dag"], "the stage builders use the operators: the test reads imports"
    bad = [c for c in _cycles(subpackages) if c & set(ACYCLIC_SUBPACKAGES)]
    assert bad == [], "\n".join(f"{sorted(c)}: {_edges_within(graph, c, _subpackage)}" for c in bad)


def test_no_new_cycle_between_subpackages() -> None:
    graph = _module_graph()
    new = _cycles(_subpackage_graph(graph)) - KNOWN_SUBPACKAGE_CYCLES
    assert new == set(), "\n".join(f"{sorted(c)}: {_edges_within(graph, c, _subpackage)}" for c in new)


def test_no_module_imports_itself_at_import_time() -> None:
    """No cycle among the imports that run when a module is imported (module level, ``if TYPE_CHECKING:`` aside)."""
    graph = _module_graph(import_time=True)
    cycles = _cycles(graph)
    assert cycles == set(), "\n".join(f"{sorted(c)}: {_edges_within(graph, c)}" for c in cycles)


def test_no_new_module_cycle_through_lazy_imports() -> None:
    """Imports inside functions may close a cycle without breaking an import; the ones there are today are listed
    (:data:`KNOWN_LAZY_MODULE_CYCLES`), any other fails."""
    graph = _module_graph()
    new = _cycles(graph) - KNOWN_LAZY_MODULE_CYCLES
    assert new == set(), "\n".join(f"{sorted(c)}: {_edges_within(graph, c)}" for c in new)


def test_the_cycle_finder_sees_cycles_and_import_time_imports() -> None:
    """Guards the cycle tests against passing vacuously: a cycle through three nodes and a self-contained
    chain; an import inside a function or under ``TYPE_CHECKING`` does not run at import time."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert _cycles(graph) == {frozenset({"a", "b", "c"})}
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    import y\nimport z\n"
    assert _imports_in(source, ROOT_NAME, import_time=True) == {"typing", "typing.TYPE_CHECKING", "z"}
    assert {"x", "y", "z"} <= _imports_in(source, ROOT_NAME)
    assert _cycles(_module_graph()), "the package has lazy cycles today (KNOWN_LAZY_MODULE_CYCLES): they are seen"

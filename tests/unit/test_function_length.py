"""Functions in the package stay under ~80 lines; a longer one is listed here and says why in its docstring.

Read from the source (AST): every function and method in ``airflow_flink_replay`` (nested ones too, named
``outer.<locals>.inner``), counted from its ``def`` line to its last line. A function longer than
``MAX_LINES`` fails the test unless it is in ``ALLOWED`` *and* its docstring says why it is long, in a
sentence containing "long because". An entry that is no longer long fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_flink_replay

PACKAGE = Path(airflow_flink_replay.__file__).resolve().parent
MAX_LINES = 80
REASON_MARKER = "long because"

#: ``"<path under the package>::<qualified name>"`` -> why it is allowed (a summary of its docstring's reason).
ALLOWED: dict[str, str] = {}


def _functions(path: Path) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """``(qualified name, node)`` for every function defined in ``path``."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((prefix + child.name, child))
                visit(child, f"{prefix}{child.name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), filename=str(path)), "")
    return found


def _lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


def long_functions() -> dict[str, tuple[int, str]]:
    """``{"<path>::<name>": (lines, docstring)}`` for every function longer than ``MAX_LINES``."""
    out: dict[str, tuple[int, str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, node in _functions(path):
            if _lines(node) > MAX_LINES:
                out[f"{path.relative_to(PACKAGE).as_posix()}::{name}"] = (_lines(node), ast.get_docstring(node) or "")
    return out


def test_the_walker_sees_the_package() -> None:
    """Guards against passing vacuously: the package's functions are found, nested and methods included."""
    names = {name for path in PACKAGE.rglob("*.py") for name, _ in _functions(path)}
    assert len(names) > 200
    assert any("." in n and "<locals>" not in n for n in names)  # methods
    assert any("<locals>" in n for n in names)  # nested functions


def test_no_function_is_longer_than_80_lines_unless_it_says_why() -> None:
    long = long_functions()
    unlisted = {f"{k} ({n} lines)" for k, (n, _) in long.items() if k not in ALLOWED}
    assert not unlisted, (
        f"functions longer than {MAX_LINES} lines: {sorted(unlisted)}. Split them into named steps, or add them "
        f"to ALLOWED in {Path(__file__).name} with a docstring sentence saying why ('... is {REASON_MARKER} ...')"
    )
    unexplained = sorted(k for k, (_, doc) in long.items() if REASON_MARKER not in doc.lower())
    assert not unexplained, (
        f"allowed long functions whose docstring does not say why ('{REASON_MARKER}'): {unexplained}"
    )


def test_the_allow_list_only_names_long_functions() -> None:
    stale = sorted(set(ALLOWED) - set(long_functions()))
    assert not stale, f"no longer longer than {MAX_LINES} lines (or gone): remove from ALLOWED: {stale}"

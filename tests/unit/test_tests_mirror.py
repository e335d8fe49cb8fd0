"""The unit tests mirror the package: every module with logic (a function or a class) has a test module of its own
at ``tests/unit/<same folder>/test_<module>.py`` (or ``test_<module>_<topic>.py``), so a new maintainer finds a
module's tests where the module is. A module that adds logic without tests of its own fails here; one that is
really only data (constants) needs none. ``__init__.py`` files hold no logic (the layering test keeps them light).
"""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_flink_replay

PACKAGE = Path(airflow_flink_replay.__file__).resolve().parent
UNIT = Path(__file__).resolve().parent


def _has_logic(path: Path) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) for n in ast.walk(tree))


def _own_tests(module: Path) -> list[Path]:
    folder = UNIT / module.parent.relative_to(PACKAGE)
    return sorted(folder.glob(f"test_{module.stem}.py")) + sorted(folder.glob(f"test_{module.stem}_*.py"))


def test_every_module_with_logic_has_a_test_module_of_its_own() -> None:
    modules = [p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__init__.py" and _has_logic(p)]
    assert len(modules) > 100, "the package's modules were found"
    missing = [str(p.relative_to(PACKAGE)) for p in modules if not _own_tests(p)]
    assert not missing, f"modules without a test module of their own under tests/unit/: {missing}"

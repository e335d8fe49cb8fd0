"""The reference docs list what the package has: every Airflow class and ``flink-replay`` command in
docs/operators.md, every module file in docs/index.md, a page per registered connection type.

What is checked, and against what:

- **Classes.** Every module of the package is imported (found on disk as ``tests/unit/test_layering.py`` finds
  them; a ``flink/`` or ``local/`` module whose import fails here — PyFlink or flink_agents are not in the Airflow
  side's environment — is skipped, any other import failure fails the test). From each module every public class
  *defined there* (``cls.__module__`` is the module, the name has no leading ``_``) that subclasses Airflow's
  ``BaseOperator``, ``BaseSensorOperator``, ``BaseTrigger``, ``BaseHook`` or ``BaseOperatorLink`` is collected.
  docs/operators.md must name each one in backticks *and* give its import path
  (```airflow_flink_replay.<module>.<Class>```, the "Every class at a glance" tables).
- **Commands.** Every sub-command of the CLI's argparse parser (``cli.build_parser()``), with its own
  sub-commands (``manifest validate``) or the choices of its first positional argument (``stack up``,
  ``run-dag gate``), must appear as ```flink-replay <words>``` in the section "The ``flink-replay`` command" of
  docs/operators.md, the one place the commands are listed; docs/index.md must point there.
- **Modules.** Every ``.py`` file of the package must be named by its path relative to the package
  (```core/compare/engine.py```, ```hooks/__init__.py```) in the "Where things live" section of docs/index.md.
- **Connections.** Every connection type ``provider_info.py`` registers has ``docs/connections/<type>.md``, which
  names the hook class that reads it, and docs/index.md links the page.

Why it fails when a class is added without docs: nothing here lists the package's classes by name. The
collection walks the files on disk, so a new ``class FooOperator(BaseOperator)`` — in a new module or an
existing one — is imported and collected the next time the test runs; ```FooOperator``` and
```airflow_flink_replay.<module>.FooOperator``` are then looked for in docs/operators.md and, absent, the
assertion fails naming both. Moving a class to another module changes its import path and fails the same way
until the doc follows. A new module file fails the index check, a new sub-command or stack action the command
check, a new connection type the connection-page check. The only escape is a leading underscore (a private
class, e.g. ``_ReplayJobOperator``, the shared base of two documented operators).

Cost: importing the package once (a few seconds when Airflow is not imported yet); no service is contacted.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
from functools import cache
from pathlib import Path
from types import ModuleType

import airflow_flink_replay
from airflow_flink_replay.cli import build_parser
from airflow_flink_replay.provider_info import get_provider_info

PACKAGE = Path(airflow_flink_replay.__file__).resolve().parent
ROOT = PACKAGE.parent
DOCS = ROOT / "docs"
REFERENCE = DOCS / "operators.md"
INDEX = DOCS / "index.md"
COMMANDS_HEADING = "## The `flink-replay` command"
INDEX_HEADING = "## Where things live"
# Modules that may fail to import on the Airflow side: the job side needs PyFlink / flink_agents, the local
# stack's modules may need what only the stack installs. Any other module must import.
MAY_NOT_IMPORT = ("flink", "local")


def _section(text: str, heading: str) -> str:
    """The text from ``heading`` to the next heading of the same level (``## ``)."""
    assert heading in text, f"heading {heading!r} is missing"
    start = text.index(heading) + len(heading)
    end = text.find("\n## ", start)
    return text[start : end if end != -1 else len(text)]


def _module_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> tuple[list[ModuleType], dict[str, str]]:
    """Every importable module of the package, and the skipped ones with the reason."""
    modules: list[ModuleType] = []
    skipped: dict[str, str] = {}
    for path in _module_files():
        name = _module_name(path)
        try:
            modules.append(importlib.import_module(name))
        except ImportError as exc:
            if path.relative_to(PACKAGE).parts[0] not in MAY_NOT_IMPORT:
                raise AssertionError(f"{name} does not import ({exc}): every provider module must") from exc
            skipped[name] = f"{type(exc).__name__}: {exc}"
    return modules, skipped


def _airflow_bases() -> tuple[type, ...]:
    from airflow.sdk import BaseOperator, BaseOperatorLink, BaseSensorOperator
    from airflow.sdk.bases.hook import BaseHook
    from airflow.triggers.base import BaseTrigger

    return BaseOperator, BaseSensorOperator, BaseTrigger, BaseHook, BaseOperatorLink


def _airflow_classes() -> dict[str, str]:
    """``{import path: class name}`` of every public Airflow class defined in the package."""
    bases = _airflow_bases()
    found: dict[str, str] = {}
    for module in _modules()[0]:
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and obj.__module__ == module.__name__
                and not name.startswith("_")
                and issubclass(obj, bases)
            ):
                found[f"{module.__name__}.{name}"] = name
    return found


def _command_words(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[str]:
    """Every command as the words after ``flink-replay``, down to its leaves: a command with sub-commands
    (``manifest``) is its sub-commands (``manifest validate``), one whose first positional argument has choices
    (``stack``, ``run-dag``) is one command per choice (``stack up``), any other is itself (``compare``)."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if subparsers:
        return [
            w
            for action in subparsers
            for name, sub in action.choices.items()
            for w in _command_words(sub, (*prefix, name))
        ]
    positionals = [a for a in parser._actions if not a.option_strings]
    if positionals and positionals[0].choices:
        return [" ".join((*prefix, str(choice))) for choice in positionals[0].choices]
    return [" ".join(prefix)]


def test_the_package_is_imported_and_has_airflow_classes() -> None:
    """Guards the other checks: a collection that found nothing would let every doc pass."""
    modules, skipped = _modules()
    assert len(modules) + len(skipped) == len(_module_files())
    assert len(modules) > 100, skipped
    assert all(name.split(".")[1] in MAY_NOT_IMPORT for name in skipped), skipped
    classes = set(_airflow_classes().values())
    # one of each kind, so a changed Airflow base import cannot silently empty the collection
    assert {"ResumeJobOperator", "FlinkJobSensor", "CaptureWindowTrigger", "FlinkRestHook", "FlinkJobLink"} <= classes


def test_every_airflow_class_is_in_the_reference() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    missing = []
    for path, name in sorted(_airflow_classes().items()):
        gaps = [what for what, written in (("import path", f"`{path}`"), ("name", f"`{name}`")) if written not in text]
        if gaps:
            missing.append(f"{path} ({' and '.join(gaps)} missing)")
    assert not missing, (
        "docs/operators.md does not list these classes of the package: "
        + "; ".join(missing)
        + ". Fix: add each to the tables of 'Every class at a glance' with its import path (and a section if it "
        "has parameters a user sets)"
    )


def test_every_command_is_in_the_commands_section() -> None:
    section = _section(REFERENCE.read_text(encoding="utf-8"), COMMANDS_HEADING)
    words = _command_words(build_parser())
    assert "stack up" in words and "manifest validate" in words and "run-dag gate" in words, words
    missing = [w for w in words if f"`flink-replay {w}`" not in section]
    assert not missing, (
        f"docs/operators.md's '{COMMANDS_HEADING[3:]}' does not list: "
        + ", ".join(f"flink-replay {w}" for w in missing)
        + ". Fix: add a row for each"
    )
    assert "operators.md#the-flink-replay-command" in INDEX.read_text(encoding="utf-8"), (
        "docs/index.md must say where the commands are listed (a link to operators.md#the-flink-replay-command)"
    )


def test_every_module_is_named_in_the_index() -> None:
    section = _section(INDEX.read_text(encoding="utf-8"), INDEX_HEADING)
    missing = [rel for rel in (p.relative_to(PACKAGE).as_posix() for p in _module_files()) if f"`{rel}`" not in section]
    assert not missing, (
        f"docs/index.md's '{INDEX_HEADING[3:]}' does not name: {', '.join(missing)}. Fix: add a row per module "
        "(its path relative to airflow_flink_replay/, in backticks) with one line on what it holds"
    )


def test_every_connection_type_has_its_page() -> None:
    index = INDEX.read_text(encoding="utf-8")
    problems = []
    for conn in get_provider_info()["connection-types"]:
        conn_type, hook = conn["connection-type"], conn["hook-class-name"].rsplit(".", 1)[1]
        page = DOCS / "connections" / f"{conn_type}.md"
        if not page.is_file():
            problems.append(f"{conn_type}: docs/connections/{conn_type}.md is missing")
            continue
        if f"`{hook}`" not in page.read_text(encoding="utf-8"):
            problems.append(f"{conn_type}: its page does not name the hook `{hook}`")
        if f"(connections/{conn_type}.md)" not in index:
            problems.append(f"{conn_type}: docs/index.md does not link connections/{conn_type}.md")
    assert not problems, "; ".join(problems)

"""Errors live in one place: every public exception class of the package is defined in
``airflow_flink_replay/exceptions.py`` and derives from ``FlinkReplayError``; the old import paths still work.

Read from the source (no imports), so modules that need PyFlink or a service are checked too.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path

import airflow_flink_replay
from airflow_flink_replay import exceptions
from airflow_flink_replay.exceptions import FlinkReplayError

PACKAGE = Path(airflow_flink_replay.__file__).parent
BUILTIN_EXCEPTIONS = {
    name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, BaseException)
}


def _exception_classes(tree: ast.Module) -> list[str]:
    """Public classes whose bases name an exception (a built-in one or one of ``exceptions.py``)."""
    known = BUILTIN_EXCEPTIONS | set(exceptions.__all__)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
            if bases & known or node.name.endswith(("Error", "Exception")):
                out.append(node.name)
    return out


def test_every_public_exception_is_defined_in_exceptions_py() -> None:
    elsewhere = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "exceptions.py" and path.parent == PACKAGE:
            continue
        found = _exception_classes(ast.parse(path.read_text(), str(path)))
        if found:
            elsewhere[str(path.relative_to(PACKAGE))] = found
    assert elsewhere == {}, "define these in airflow_flink_replay/exceptions.py under FlinkReplayError"


def test_every_class_of_exceptions_py_derives_from_the_base_and_is_exported() -> None:
    classes = {n: c for n, c in vars(exceptions).items() if inspect.isclass(c) and c.__module__ == exceptions.__name__}
    assert len(classes) >= 20
    assert sorted(classes) == sorted(exceptions.__all__)
    assert all(issubclass(c, FlinkReplayError) for c in classes.values())
    assert all(c.__doc__ for c in classes.values())


def test_old_import_paths_name_the_same_classes() -> None:
    from airflow_flink_replay.core.compare import CompareInputError
    from airflow_flink_replay.core.manifest import ManifestError, ManifestTamperedError
    from airflow_flink_replay.core.replay_spec import SpecError
    from airflow_flink_replay.hooks.flink_rest import FlinkOutcomeUnknownError, FlinkRestError
    from airflow_flink_replay.hooks.flink_submit import FlinkSubmissionError
    from airflow_flink_replay.hooks.kafka_offsets import KafkaTopicError
    from airflow_flink_replay.hooks.mem0 import ForkConflictError, NotAForkError
    from airflow_flink_replay.local.components import StackSetupError

    assert (CompareInputError, ManifestError, ManifestTamperedError, SpecError) == (
        exceptions.CompareInputError,
        exceptions.ManifestError,
        exceptions.ManifestTamperedError,
        exceptions.SpecError,
    )
    assert (FlinkRestError, FlinkOutcomeUnknownError, FlinkSubmissionError, KafkaTopicError) == (
        exceptions.FlinkRestError,
        exceptions.FlinkOutcomeUnknownError,
        exceptions.FlinkSubmissionError,
        exceptions.KafkaTopicError,
    )
    assert (ForkConflictError, NotAForkError, StackSetupError) == (
        exceptions.ForkConflictError,
        exceptions.NotAForkError,
        exceptions.StackSetupError,
    )


def test_built_in_bases_are_kept_so_existing_handlers_still_catch() -> None:
    assert issubclass(exceptions.ManifestError, ValueError) and issubclass(exceptions.SpecError, ValueError)
    assert issubclass(exceptions.FlinkSubmissionError, RuntimeError)
    assert issubclass(exceptions.FlinkOutcomeUnknownError, exceptions.FlinkRestError)
    err = exceptions.ManifestError(["capture.topic: missing. Fix: name the capture topic"])
    assert str(err) == "invalid replay manifest:\n  - capture.topic: missing. Fix: name the capture topic"


def test_exceptions_module_is_pure() -> None:
    tree = ast.parse(Path(exceptions.__file__).read_text())
    imported = {
        (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert not {m for m in imported if m.split(".")[0] in {"airflow", "pyflink", "flink_agents"}}

"""The worker-side code of a job definition, imported as Flink's Python worker imports it: unpickled in a fresh
Python where PyFlink refuses to start a Java gateway (``PYFLINK_GATEWAY_DISABLED``), the error as text.

PyFlink itself is not needed: a module that raises when that variable is set stands for one that starts the
gateway (tests/integration/test_agent_check.py and test_deploy_health.py use the real one,
tests/jobs/agent_check/gateway_import.py)."""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.flink.worker_import import worker_environment, worker_import_failure

GATEWAY_MODULE = '''"""Stands for a module that imports flink_agents.api.core_options at its top."""
import os

if os.environ.get("PYFLINK_GATEWAY_DISABLED"):
    raise Exception("It's launching the PythonGatewayServer during Python UDF execution which is unexpected.")


def customer_key(review):
    return review["customer"]
'''


@dataclass
class _Job:
    key_selector: Any
    deserializer: Any = json.loads
    output_serializer: Any = dict


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str) -> Any:
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return __import__(name)


def test_a_module_that_would_start_the_gateway_fails_where_the_worker_imports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _module(tmp_path, monkeypatch, "afr_gateway_at_import", GATEWAY_MODULE)
    failure = worker_import_failure(_Job(key_selector=module.customer_key))  # imports fine here: a client
    assert failure is not None and failure.type == "Exception"
    assert "PythonGatewayServer during Python UDF execution" in failure.message
    assert f'File "{tmp_path / "afr_gateway_at_import.py"}", line 5, in <module>' in failure.traceback
    assert "child_main" not in failure.traceback  # the check's own frame is left out


def test_code_the_worker_can_import_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module(tmp_path, monkeypatch, "afr_plain_keys", "def customer_key(review):\n    return review['c']\n")
    assert worker_import_failure(_Job(key_selector=module.customer_key)) is None


class _Holder:
    """A key selector holding a lock: PyFlink could not ship it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, review: Any) -> Any:
        return review


def test_a_callable_that_cannot_be_pickled_is_reported() -> None:
    failure = worker_import_failure(_Job(key_selector=_Holder()))
    assert failure is not None and "lock" in failure.message


def test_the_worker_environment_has_no_gateway_and_this_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYFLINK_GATEWAY_PORT", "25333")
    env = worker_environment()
    assert "PYFLINK_GATEWAY_PORT" not in env and env["PYFLINK_GATEWAY_DISABLED"] == "true"
    assert env["PYTHONPATH"].split(os.pathsep) == [p for p in sys.path if p]

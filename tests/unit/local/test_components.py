"""Clear errors from the stack's components before anything starts: a missing Java names JAVA_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_flink_replay.local.components import StackSetupError, find_java_home


def test_missing_java_is_a_clear_error(tmp_path: Path) -> None:
    # an environment of its own, not this process's: the test stack may be starting in the background
    with pytest.raises(StackSetupError, match=r"No Java found.*JAVA_HOME"):
        find_java_home({"PATH": str(tmp_path)})

"""The agent jobs' environment: ``python.pythonpath`` is the job program's site-packages (where pemja, flink_agents
and this package are), behind any given one, and the rest of ``conf`` reaches Flink as text.

``job_environment`` runs in the Flink-side Python (PyFlink's local gateway: no cluster, nothing submitted).
"""

from __future__ import annotations

import sysconfig
import textwrap
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.flink.environment import site_packages
from tests.flink_python import flink_side_facts


def test_site_packages_are_the_running_interpreter_s_library_folders() -> None:
    entries = site_packages().split(":")
    paths = sysconfig.get_paths()
    assert set(entries) == {paths["purelib"], paths["platlib"]}
    assert entries == sorted(set(entries)), "each folder once, in a stable order"
    assert any(Path(pytest.__file__).is_relative_to(e) for e in entries), "where installed packages are"


SCRIPT = textwrap.dedent(
    """
    import json
    import pyflink
    from pyflink.java_gateway import get_gateway
    from airflow_flink_replay.flink.environment import job_environment, site_packages

    def config(env):
        jvm = get_gateway().jvm
        conf = jvm.org.apache.flink.python.util.PythonConfigUtil.getEnvironmentConfig(
            env._j_stream_execution_environment)
        return dict(conf.toMap())

    given = {"python.pythonpath": "/opt/user-libs", "parallelism.default": 3, "pipeline.name": "reviews"}
    configured, plain = job_environment(given), job_environment()  # plain after: nothing carries over
    print(json.dumps({
        "site_packages": site_packages(), "pyflink": pyflink.__file__,
        "plain": config(plain), "configured": config(configured), "parallelism": configured.get_parallelism(),
        "given_after": given,
    }))
    """
)


@pytest.fixture(scope="module")
def environments() -> dict[str, Any]:
    return flink_side_facts(SCRIPT)


def test_the_task_manager_s_python_sees_the_job_program_s_packages(environments: dict[str, Any]) -> None:
    assert environments["plain"]["python.pythonpath"] == environments["site_packages"]
    entries = environments["site_packages"].split(":")
    assert any(Path(environments["pyflink"]).is_relative_to(e) for e in entries), "pemja's and pyflink's venv"


def test_a_given_python_path_comes_first(environments: dict[str, Any]) -> None:
    expected = f"/opt/user-libs:{environments['site_packages']}"
    assert environments["configured"]["python.pythonpath"] == expected


def test_the_rest_of_conf_reaches_flink_and_the_caller_s_dict_is_left_alone(environments: dict[str, Any]) -> None:
    assert environments["configured"]["pipeline.name"] == "reviews"
    assert environments["configured"]["parallelism.default"] == "3" and environments["parallelism"] == 3
    assert "pipeline.name" not in environments["plain"], "one environment's conf does not leak into the next"
    assert environments["given_after"] == {"python.pythonpath": "/opt/user-libs", "parallelism.default": 3,
                                           "pipeline.name": "reviews"}  # fmt: skip

"""The flink-agents jar is not shipped at all when the cluster loads Flink Agents from its lib/ (parent-first, as
the local stack does), named in place (``pipeline.classpaths``) instead of shipped (``pipeline.jars``) when the
program building the job runs the cluster's ``python.executable``, and shipped otherwise (Flink-side venv, no job).

``AgentsExecutionEnvironment`` adds its ~115 MB jar to every job's ``pipeline.jars``; ``agents_jar_by_path``
moves it when the TaskManagers' Python is the builder's own (their flink_agents installation is then at the
same path), and leaves it shipped otherwise. The Kafka connector jar added before stays first among the jars.
Every agent job of the integration suite runs with the moved jar on the local stack.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.java_gateway import get_gateway
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment
    from airflow_flink_replay.flink.kafka import add_connector_jars
    from airflow_flink_replay.flink.pipeline import agents_jar_by_path

    connector_jars = [j for j in sys.argv[1].split(",") if j]
    out = {}
    cases = (("same", sys.executable, ""), ("other", "/opt/elsewhere/bin/python", ""),
             ("lib", "/opt/elsewhere/bin/python", "pemja.;org.apache.kafka.;org.apache.flink.agents."),
             ("lib_prefix_only", sys.executable, "org.apache.flink."))
    for case, workers_python, parent_first in cases:
        config = Configuration()
        config.set_string("python.executable", workers_python)
        if parent_first:
            config.set_string("classloader.parent-first-patterns.additional", parent_first)
        env = StreamExecutionEnvironment.get_execution_environment(config)
        add_connector_jars(env, connector_jars)
        AgentsExecutionEnvironment.get_execution_environment(env)
        moved = agents_jar_by_path(env)
        jvm = get_gateway().jvm
        conf = jvm.org.apache.flink.python.util.PythonConfigUtil.getEnvironmentConfig(
            env._j_stream_execution_environment)
        options = jvm.org.apache.flink.configuration.PipelineOptions
        empty = jvm.java.util.ArrayList()
        out[case] = {
            "moved": moved,
            "jars": list(conf.getOptional(options.JARS).orElse(empty)),
            "classpaths": list(conf.getOptional(options.CLASSPATHS).orElse(empty)),
        }
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def result(stack) -> dict:
    proc = subprocess.run(
        [stack.flink_python, "-c", SCRIPT, ",".join(stack.connector_jars)],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _agents(paths: list[str]) -> list[str]:
    return [p for p in paths if "/flink_agents/lib/" in p and p.endswith(".jar")]


def test_the_workers_own_python_reads_the_jar_in_place(result) -> None:
    same = result["same"]
    assert len(same["moved"]) == 1 and _agents(same["moved"]) == same["moved"]
    assert _agents(same["jars"]) == []
    assert same["classpaths"] == same["moved"]
    assert same["jars"] and all("flink_agents" not in j for j in same["jars"])  # the connector jars stay shipped


def test_another_python_ships_the_jar(result) -> None:
    other = result["other"]
    assert other["moved"] == [] and other["classpaths"] == []
    assert len(_agents(other["jars"])) == 1
    assert other["jars"].index(_agents(other["jars"])[0]) == len(other["jars"]) - 1  # after the connector's


def test_a_cluster_loading_flink_agents_from_lib_gets_no_copy(result) -> None:
    lib = result["lib"]
    assert len(lib["moved"]) == 1 and _agents(lib["moved"]) == lib["moved"]
    assert _agents(lib["jars"]) == [] and lib["classpaths"] == []
    assert lib["jars"] and all("flink_agents" not in j for j in lib["jars"])  # the connector jars stay shipped


def test_only_the_agents_package_itself_counts_as_loaded_from_lib(result) -> None:
    """A broader parent-first prefix is no sign that the jar is in lib/: the job keeps its copy (in place)."""
    assert result["lib_prefix_only"]["classpaths"] == result["lib_prefix_only"]["moved"] != []

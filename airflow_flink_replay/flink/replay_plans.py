"""Job side: the job graph of every replay variant, built in one PythonDriver run and sent back unsubmitted.

Called with ``POST /jars/{id}/plan`` (``-pym airflow_flink_replay.flink.replay_plans --spec-json <variant spec>
...``) on the cluster that will run the replays, before any is submitted. For each spec it builds the replay job
exactly as :mod:`~airflow_flink_replay.flink.replay_job` does and asks Flink for the job graph that job would
submit (the same JSON as ``/plan`` of the replay program: vertex ids, chains, inputs). The graphs come back the
way the agent check's facts do: in the name of the only operator of the job graph this program hands to Flink
(:mod:`~airflow_flink_replay.core.carrier`); nothing runs. A spec whose build fails comes back with its Python
traceback instead of a graph.

One program for every variant instead of one ``/plan`` per variant: a PythonDriver run costs a Python start
with PyFlink's imports on the JobManager, which runs one at a time.

Never imports Airflow.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.core.replay_plans import VariantPlan, encode_plans
from airflow_flink_replay.flink.agent_check import carry_in_job_graph, python_error

MODULE = "airflow_flink_replay.flink.replay_plans"


def job_graph_json(env: Any, job_name: str) -> dict[str, Any]:
    """The job graph of what ``env`` holds, as Flink's REST API shows a plan; clears ``env``'s transformations."""
    return stream_graph_plan(env._generate_stream_graph(clear_transformations=True, job_name=job_name))


def stream_graph_plan(stream_graph: Any) -> dict[str, Any]:
    """The job graph of a (Java) stream graph, as Flink's REST API shows a plan; the stream graph can still be
    submitted afterwards (``executeAsync``), and gives that very graph."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    plan = jvm.org.apache.flink.runtime.jobgraph.jsonplan.JsonPlanGenerator.generatePlan(stream_graph.getJobGraph())
    text = jvm.org.apache.flink.runtime.rest.util.RestMapperUtils.getStrictObjectMapper().writeValueAsString(plan)
    return dict(json.loads(text))


def plan_variant(spec: ReplayJobSpec) -> VariantPlan:
    """Build ``spec``'s replay job in a fresh environment and return its job graph (or the Python error)."""
    from airflow_flink_replay.flink.environment import job_environment
    from airflow_flink_replay.flink.replay_job import build_replay

    try:
        env = job_environment()
        build_replay(env, spec)
        return VariantPlan(variant=spec.variant, plan=job_graph_json(env, spec.job_name or spec.variant))
    except Exception as exc:  # the user's code: reported, never raised
        return VariantPlan(variant=spec.variant, error=python_error(exc).traceback)


def emit(plans: list[VariantPlan]) -> None:
    """Hand Flink a one-operator job graph whose operator name carries ``plans`` (``/plan`` returns it)."""
    carry_in_job_graph(encode_plans(plans), "afr-replay-plans")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: ``--spec-json`` once per variant."""
    p = argparse.ArgumentParser(prog=MODULE, description="the replay variants' job graphs, unsubmitted")
    p.add_argument("--spec-json", action="append", required=True, help="one variant's ReplayJobSpec as JSON")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    emit([plan_variant(ReplayJobSpec.model_validate_json(text)) for text in args.spec_json])


if __name__ == "__main__":
    main()

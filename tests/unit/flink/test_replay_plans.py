"""The job-side planning program: every variant's replay job graph, built exactly as the replay job builds it and
never submitted, carried back in the name of its one operator; a variant that cannot be built comes back as its
traceback.

Runs in the Flink-side Python (PyFlink's local gateway, the stack's connector jars). The ``/plan`` call's
PythonDriver, which takes the program's job graph instead of running it, is played by ``fake_execute`` (no
cluster here). (The carried payload itself: tests/unit/core/test_replay_plans.py; the program over REST:
tests/integration/test_flink_side.py.)
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from airflow_flink_replay.flink.agent_pin import uid_to_vertex_id
from airflow_flink_replay.flink.replay_plans import main
from tests.flink_python import CONNECTOR_JARS, flink_side_facts


def test_the_program_needs_a_spec_per_variant() -> None:
    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2


def test_a_spec_that_is_not_a_replay_job_spec_stops_the_program_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"variant\n  Field required"):
        main(["--spec-json", '{"agent_job": "pkg.jobs:job"}'])


SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pyflink.datastream import StreamExecutionEnvironment
    from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
    from airflow_flink_replay.core.replay_plans import decode_plans
    from airflow_flink_replay.flink import replay_plans
    from airflow_flink_replay.flink.environment import job_environment
    from airflow_flink_replay.flink.replay_job import build_replay

    tmp, jars = sys.argv[1], sys.argv[2:]

    def spec(variant, **changes):
        base = dict(variant=variant, agent_job="tests.jobs.counter_agent.job:production",
                    job_identifier=f"replay-{variant}", action_state_topic=f"as-{variant}",
                    output_dir=f"{tmp}/{variant}/out", audit_dir=f"{tmp}/{variant}/audit", kafka_bootstrap="kafka:9092",
                    capture_topic="cap", start_offsets={0: 3}, end_offsets={0: 9}, connector_jars=jars,
                    agent_uid="afr-agent", max_parallelism=128)
        return ReplayJobSpec(**{**base, **changes})

    def summary(variant_plan):
        plan = variant_plan.plan
        return {"variant": variant_plan.variant, "error": variant_plan.error,
                "name": plan and plan["name"], "jid": plan and plan["jid"],
                "nodes": plan and {n["id"]: n["description"].split("<br/>")[0] for n in plan["nodes"]}}

    out = {}
    out["baseline"] = summary(replay_plans.plan_variant(spec("baseline")))
    out["named"] = summary(replay_plans.plan_variant(spec("candidate", job_name="afr-replay-gate-r1-candidate")))
    out["broken"] = summary(replay_plans.plan_variant(spec("broken", agent_job="no_such_pkg.jobs:job")))
    on_production = {"action_state_topic": "prod-as", "production_action_state_topic": "prod-as"}
    clash = spec("clash").model_copy(update=on_production)  # past the spec's validation
    out["clash"] = summary(replay_plans.plan_variant(clash))

    env = job_environment()
    build_replay(env, spec("twice"))
    graph = env._generate_stream_graph(clear_transformations=False, job_name="twice")
    first, second = replay_plans.stream_graph_plan(graph), replay_plans.stream_graph_plan(graph)
    out["same_plan_twice"] = first == second
    out["transformations_before"] = env._j_stream_execution_environment.getTransformations().size()
    replay_plans.job_graph_json(env, "cleared")
    out["cleared_left"] = env._j_stream_execution_environment.getTransformations().size()

    carried = []
    def fake_execute(env, name):  # a fake of the /plan call's PythonDriver: takes the job graph, runs nothing
        carried.append({"name": name, "text": json.dumps(replay_plans.job_graph_json(env, name))})
    StreamExecutionEnvironment.execute = fake_execute
    replay_plans.main(["--spec-json", spec("baseline").model_dump_json(),
                       "--spec-json", spec("candidate", agent_job="no_such_pkg.jobs:job").model_dump_json()])
    [program] = carried
    out["carrier_name"] = program["name"]
    out["carried"] = [summary(p) for p in decode_plans(program["text"])]
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return flink_side_facts(SCRIPT, str(tmp_path_factory.mktemp("plans")), *CONNECTOR_JARS, jars=True)


def test_a_variant_s_plan_is_its_replay_job_s_graph_with_the_pins(planned: dict[str, Any]) -> None:
    baseline = planned["baseline"]
    assert baseline["error"] is None and baseline["name"] == "baseline", "named after the variant"
    assert baseline["nodes"][uid_to_vertex_id("afr-agent")] == "action-execute-operator", "the pinned agent"
    assert any(d.startswith("Source: replay-capture-source") for d in baseline["nodes"].values())


def test_a_variant_s_job_name_names_its_plan(planned: dict[str, Any]) -> None:
    assert planned["named"]["name"] == "afr-replay-gate-r1-candidate"


def test_a_variant_that_cannot_be_built_comes_back_as_its_traceback(planned: dict[str, Any]) -> None:
    broken = planned["broken"]
    assert broken["nodes"] is None
    assert broken["error"].startswith("Traceback (most recent call last):")
    assert broken["error"].rstrip().splitlines()[-1] == "ValueError: package 'no_such_pkg' is not importable here"


def test_a_variant_on_production_s_state_comes_back_refused(planned: dict[str, Any]) -> None:
    clash = planned["clash"]
    assert clash["nodes"] is None
    assert "FlinkReplayError: replay job refuses to start: action_state_topic 'prod-as'" in clash["error"]


def test_planning_leaves_the_stream_graph_submittable_and_the_environment_empty(planned: dict[str, Any]) -> None:
    assert planned["same_plan_twice"], "the job id and vertex ids a submission of that graph gets"
    assert planned["transformations_before"] > 0 and planned["cleared_left"] == 0


def test_the_program_carries_every_variant_s_plan_in_its_one_operator(planned: dict[str, Any]) -> None:
    assert planned["carrier_name"] == "afr-replay-plans"
    baseline, candidate = planned["carried"]
    assert baseline == {**planned["baseline"], "jid": baseline["jid"]}, "the same graph as planned on its own"
    assert candidate["variant"] == "candidate" and candidate["nodes"] is None
    assert "ValueError: package 'no_such_pkg' is not importable here" in candidate["error"]

"""Pipeline definitions (``AgentPipeline``): what a definition may hold, the uids its stateful stages get, and
the job graph ``apply_agent_job`` builds from one.

The definitions' validation needs no Flink (the module imports neither PyFlink nor Flink Agents at import
time): tested here with plain callables. The job graph is built in the Flink-side Python (PyFlink's local
gateway, never submitted) from ``tests/jobs/pipeline_job`` — the quickstart's multi-agent workflow. (The
pipeline running for real, a window restored from a savepoint: tests/integration/test_pipeline_window_state.py.)
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from airflow_flink_replay.flink.agent_job import AgentJob, EnvResource
from airflow_flink_replay.flink.agent_pipeline import AgentPipeline, AgentStage, MapStep, WindowStage, as_pipeline
from tests.flink_python import flink_side_facts


def _key(value: Any) -> Any:
    return value["id"]


def _job(**changes: Any) -> AgentJob:
    return AgentJob(agent=object(), key_selector=_key, **changes)


def _window(name: str = "per-product", **changes: Any) -> WindowStage:
    return WindowStage(name, **{"key_selector": _key, "assigner": object(), "function": object(), **changes})


def _three(**changes: Any) -> AgentPipeline:
    stages = [AgentStage("analysis", _job()), _window(), AgentStage("suggestion", _job())]
    return AgentPipeline(stages=stages, **changes)


def test_an_agent_job_is_the_one_agent_pipeline() -> None:
    res = EnvResource("conn", "chat_model_connection", object())
    job = _job(env_resources=[res], config={"num-async-threads": 2}, bad_records="fail")
    pipeline = as_pipeline(job)
    assert [s.name for s in pipeline.stages] == ["agent"]
    assert pipeline.input_key_selector is _key and pipeline.bad_records == "fail"
    assert pipeline.shared_resources() == [res] and pipeline.shared_config() == {"num-async-threads": 2}
    assert pipeline.stage_job(pipeline.agent_stages()[0]).env_resources == (res,)
    assert as_pipeline(pipeline) is pipeline


def test_the_first_agent_takes_the_pin_every_other_stateful_stage_its_own_uid() -> None:
    pipeline = AgentPipeline(stages=[MapStep("clean", str.strip), *_three().stages], key_selector=_key)
    uids = [(s.name, uid) for s, uid in pipeline.stage_uids("afr-agent")]
    assert uids == [("clean", "afr-step-clean"), ("analysis", "afr-agent"), ("per-product", "afr-window-per-product"),
                    ("suggestion", "afr-agent-suggestion")]  # fmt: skip
    # pinned by hash or not at all: no uid for the first agent
    assert dict((s.name, u) for s, u in _three().stage_uids(None))["analysis"] is None
    assert _three().output_serializer is _three().stages[-1].output_serializer
    assert _three().memory is None


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: AgentPipeline(stages=[]), r"at least one AgentStage"),
        (lambda: AgentPipeline(stages=[_window()]), r"at least one AgentStage"),
        (lambda: AgentPipeline(stages=[AgentStage("a", _job()), "map"]), r"holds \['str'\]"),
        (lambda: AgentStage("Analysis", _job()), r"name 'Analysis' must be 1-48 characters"),
        (lambda: AgentStage("a", object()), r"not an AgentJob. Fix: AgentStage\(name, AgentJob"),
        (lambda: AgentPipeline(stages=[AgentStage("a", _job()), AgentStage("a", _job())]), r"stage name \['a'\] given"),
        (lambda: AgentPipeline(stages=[AgentStage("a", _job()), _window("w", uid="u"), _window("x", uid="u")]),
         r"operator uid \['u'\] given twice"),
        (lambda: AgentPipeline(stages=[MapStep("m", str), AgentStage("a", _job()), AgentStage("b", _job(), uid="x"),
                                       _window("x", uid="x")], key_selector=_key), r"operator uid \['x'\] given twice"),
        (lambda: AgentPipeline(stages=[MapStep("m", str), AgentStage("a", _job())]), r"key_selector= the key"),
        (lambda: _three(compare_stages=["suggestion"]), r"compare_stages names \['suggestion'\], not intermediate"),
        (lambda: MapStep("m", str, kind="reduce"), r"kind 'reduce' must be 'map', 'filter' or 'flat_map'"),
        (lambda: AgentPipeline(stages=[AgentStage("a", _job(), uid="mine")]), r"pinned by the agent pin.*Fix: leave"),
        (lambda: _window(key_selector="id"), r"key_selector must be a callable"),
        (lambda: _three(bad_records="skip"), r"bad_records 'skip' must be"),
    ],
)
def test_a_definition_that_cannot_run_is_refused_with_the_fix(build: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_resources_and_config_are_the_jobs_one_environment() -> None:
    """One agents environment serves every agent of a job: a resource or an option given twice must agree."""
    res = EnvResource("conn", "chat_model_connection", "descriptor")
    stages = [AgentStage("a", _job(env_resources=[res], config={"k": 1})), AgentStage("b", _job(config={"k": 1}))]
    pipeline = AgentPipeline(stages=stages, env_resources=[EnvResource("conn", "chat_model_connection", "descriptor")])
    assert [r.name for r in pipeline.shared_resources()] == ["conn"] and pipeline.shared_config() == {"k": 1}
    other = EnvResource("conn", "chat_model_connection", "another")
    with pytest.raises(ValueError, match=r"two different env-level resources are named 'conn'"):
        AgentPipeline(stages=[AgentStage("a", _job(env_resources=[other]))], env_resources=[res])
    with pytest.raises(ValueError, match=r"config option 'k' is 1 and 2 \(stage 'b'\)"):
        AgentPipeline(stages=[AgentStage("a", _job(config={"k": 1})), AgentStage("b", _job(config={"k": 2}))])


SCRIPT = textwrap.dedent(
    """
    import json
    from pyflink.common import Types
    from airflow_flink_replay.flink import pipeline
    from airflow_flink_replay.flink.agent_pin import AgentPin
    from airflow_flink_replay.flink.environment import job_environment
    from tests.jobs.pipeline_job import job as definitions

    def graph(env):
        nodes = []
        for node in env._generate_stream_graph(clear_transformations=True, job_name="g").getStreamNodes().toArray():
            nodes.append({"name": node.getOperatorName(), "uid": node.getTransformationUID(),
                          "max_parallelism": node.getMaxParallelism()})
        return nodes

    out = {}
    for name, stage_outputs in (("production", False), ("replay", True)):
        env = job_environment()
        source = env.from_collection(['{"id": "p1", "review": "fine", "ts": 1}'], type_info=Types.STRING())
        hooked = []
        stream = pipeline.apply_agent_job(
            env, source, definitions.production, runtime=pipeline.AgentRuntimeConfig("kafka:9092", "as-1", "ns-1"),
            pin=AgentPin(uid="afr-agent", max_parallelism=64), output_timing_key="_replay",
            output_extra={"_replay": {"variant": "baseline"}}, stage_outputs=stage_outputs,
            plan_hook=lambda plan, stage: hooked.append([stage.name, sorted(plan.actions)]))
        out[name] = {"graph": graph(env), "hooked": hooked, "type": str(stream.get_type())}
    try:
        pipeline.apply_agent_job(job_environment(), None, definitions.production,
                                 runtime=pipeline.AgentRuntimeConfig("kafka:9092", "as-1"),
                                 pin=AgentPin(uid_hash="0" * 32))
    except ValueError as exc:
        out["by_hash"] = str(exc)
    except Exception as exc:
        out["by_hash"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out, default=str))
    """
)


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    return flink_side_facts(SCRIPT)


def test_every_stateful_stage_is_pinned_in_the_job_graph(built: dict[str, Any]) -> None:
    nodes = built["production"]["graph"]
    agents = [n for n in nodes if "action-execute-operator" in n["name"]]
    assert sorted(n["uid"] for n in agents) == ["afr-agent", "afr-agent-suggestion"], nodes
    [window] = [n for n in nodes if n["uid"] == "afr-window-per-product"]
    assert window["name"] == "per-product"
    assert {n["max_parallelism"] for n in [*agents, window]} == {64}, nodes


def test_each_agent_plan_goes_through_the_hook_with_its_stage(built: dict[str, Any]) -> None:
    hooked = built["production"]["hooked"]
    assert [name for name, _ in hooked] == ["analysis", "suggestion"]
    assert all("process_input" in actions for _, actions in hooked), hooked


def test_the_replay_writes_the_compared_stage_outputs_too(built: dict[str, Any]) -> None:
    production = {n["uid"] for n in built["production"]["graph"]}
    replay = {n["uid"] for n in built["replay"]["graph"]}
    assert replay - production == {"afr-agent-output-analysis"}, replay - production
    assert "afr-agent-output-per-product" not in replay  # not in compare_stages
    assert built["replay"]["type"] == built["production"]["type"]


def test_a_pipeline_is_not_pinned_by_hash(built: dict[str, Any]) -> None:
    assert "cannot be replayed by uid hash" in built["by_hash"], built["by_hash"]
    assert "Fix: deploy production with uids" in built["by_hash"]

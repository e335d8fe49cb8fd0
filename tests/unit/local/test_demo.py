"""The demo's production program and spec, and the same writers for a job deployed by `flink-replay deploy`."""

from __future__ import annotations

from pathlib import Path

import yaml

from airflow_flink_replay.core.replay_spec import ReplaySpec
from airflow_flink_replay.local.demo import V1, V2, AgentRef, DemoTopics, production_program, write_spec
from tests.unit.local.test_airflow_runner import _stack


def _arg(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_the_demo_program_runs_the_v1_job_definition_on_its_topics(tmp_path: Path) -> None:
    program = production_program(_stack(tmp_path), DemoTopics.named("demo"), "job", "ident")
    args = program["program_args"]
    assert _arg(args, "--agent-job") == V1 and "--agent-factory" not in args and "--key-field" not in args
    assert (_arg(args, "--source-topic"), _arg(args, "--capture-topic")) == ("demo-reviews", "demo-capture")
    assert program["job_name"] == "job" and _arg(args, "--job-identifier") == "ident"
    # a module of the job side's Python, not a file path the JobManager would have to share with Airflow
    assert program["module"] == "airflow_flink_replay.flink.production_job" and "entry_point" not in program


def test_a_job_definition_is_passed_as_agent_job(tmp_path: Path) -> None:
    agent = AgentRef(reference="my_agents.job:job", kind="agent_job")
    args = production_program(_stack(tmp_path), DemoTopics.named("mine"), "mine", "mine", agent)["program_args"]
    assert _arg(args, "--agent-job") == "my_agents.job:job" and "--agent-factory" not in args
    factory = AgentRef(reference="my_agents.agent:build", kind="agent_factory", key_field="id")
    args = production_program(_stack(tmp_path), DemoTopics.named("mine"), "mine", "mine", factory)["program_args"]
    assert (_arg(args, "--agent-factory"), _arg(args, "--key-field")) == ("my_agents.agent:build", "id")


def test_the_demo_spec_loads(tmp_path: Path) -> None:
    spec = ReplaySpec.from_yaml(write_spec(_stack(tmp_path), DemoTopics.named("demo"), tmp_path / "s.yaml",
                                           window_records=12, runs_dir=tmp_path / "runs"))
    assert (spec.production.agent_job, spec.candidate_agent_job) == (V1, V2)
    assert spec.window.records == 12 and spec.compare.min_aligned == 12
    assert spec.runs_uri == f"file://{tmp_path / 'runs'}" and spec.production.key_field == "customer"


def test_a_deployed_jobs_spec_names_its_agent_and_candidate(tmp_path: Path) -> None:
    factory = AgentRef(reference="my_agents.agent:build", kind="agent_factory", key_field="id")
    path = write_spec(_stack(tmp_path), DemoTopics.named("mine"), tmp_path / "s.yaml", name="mine", agent=factory,
                      candidate="my_agents.agent:build_v2")
    spec = ReplaySpec.from_yaml(path)
    assert (spec.production.agent_factory, spec.candidate_agent_factory) == ("my_agents.agent:build",
                                                                             "my_agents.agent:build_v2")
    assert spec.production.key_field == "id" and spec.production.input_topic == "mine-reviews"
    job = AgentRef(reference="my_agents.job:job", kind="agent_job")
    raw = yaml.safe_load(write_spec(_stack(tmp_path), DemoTopics.named("mine"), tmp_path / "j.yaml", agent=job,
                                    candidate="my_agents.job:job_v2").read_text())
    assert raw["production"]["agent_job"] == "my_agents.job:job"
    assert raw["candidate_agent_job"] == "my_agents.job:job_v2"
    assert "key_field" not in raw["production"] and "agent_factory" not in raw["production"]

"""AgentCheckOperator: the program it runs (names and references only), the identity it reports, and its
outcome — the report logged and returned, or the task failed (no retry) with the report or the program's own
traceback. The job side is stubbed here by its facts; tests/integration/test_agent_check.py runs it for real."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay.core.agent_check import ActionFact, CheckFacts, DefinitionFacts, ResourceFact
from airflow_flink_replay.core.policy import ReplayPolicy
from airflow_flink_replay.core.replay_spec import ReplaySpec
from airflow_flink_replay.exceptions import FlinkSubmissionError
from airflow_flink_replay.ids import XCOM_AGENT_CHECK_KEY, XCOM_CHANGED_RESOURCES_KEY
from airflow_flink_replay.operators import agent_check
from airflow_flink_replay.operators.agent_check import (
    AgentCheckOperator,
    check_program,
    job_definitions,
    production_identity,
)
from tests.unit.core.test_replay_spec import _spec
from tests.unit.operators.stubs import job


def _definition(role: str, actions: bool = True, tool_code: str = "c0de") -> DefinitionFacts:
    return DefinitionFacts(
        role=role,  # type: ignore[arg-type]
        ref=f"pkg.{role}:job",
        stage="done",
        actions=[ActionFact(name="process_input", listens=["x.InputEvent"])] if actions else [],
        resources=[ResourceFact(name="notify_support", type="tool", mediated=True, fingerprint=tool_code)],
    )


class _Submitter:
    kind = "rest"

    def __init__(self, answer: CheckFacts | Exception) -> None:
        self.answer = answer
        self.programs: list[Any] = []

    def run_check(self, program: Any) -> CheckFacts:
        self.programs.append(program)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class _TI:
    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def _run(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, answer: CheckFacts | Exception) -> tuple[Any, _TI, Any]:
    submitter = _Submitter(answer)
    monkeypatch.setattr(agent_check, "get_submitter", lambda kind, hook: submitter)
    op = AgentCheckOperator(task_id="agent_check", spec=ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}")))
    op.__dict__["hook"] = object()
    ti = _TI()
    try:
        return op.execute({"ti": ti}), ti, submitter
    except AirflowFailException as err:
        return err, ti, submitter


def test_both_definitions_of_either_form_are_named_and_no_record_travels_in_the_arguments(tmp_path: Any) -> None:
    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}", mem0_config={"vector_store": {"x": 1}}))
    assert job_definitions(spec) == [
        ("production", "examples.review_agent.v1.agent:build_agent", "factory"),
        ("candidate", "examples.review_agent.v2.agent:build_agent", "factory"),
    ]
    program = check_program(spec, emit="plan")
    assert program.module == "airflow_flink_replay.flink.agent_check"
    args = program.program_args
    assert args[args.index("--candidate") + 1] == "examples.review_agent.v2.agent:build_agent"
    assert args[args.index("--capture-topic") + 1] == "reviews-capture" and args[-4:-2] == ["--emit", "plan"]
    assert args[args.index("--mem0-config") + 1] == '{"vector_store": {"x": 1}}'
    assert ReplayPolicy.model_validate_json(args[args.index("--policy") + 1]) == spec.policy  # the sample run's
    assert args[args.index("--sample-runs") + 1] == "1"
    assert check_program(spec, emit="plan", sample_runs=0).program_args[args.index("--sample-runs") + 1] == "0"
    assert not any("{" in a and "customer" in a for a in args)  # names and references only
    without = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}", candidate_agent_factory=None))
    assert [role for role, _, _ in job_definitions(without)] == ["production"]


def test_identity_is_production_s_uid_or_its_running_agent_vertex(tmp_path: Any) -> None:
    details = job("a" * 32, "review-triage-production").model_dump(mode="json", by_alias=True)
    details["plan"] = {"jid": "a" * 32, "name": "p", "nodes": [
        {"id": "src", "parallelism": 1, "description": "Source: reviews"},
        {"id": "agent", "parallelism": 1, "description": "action-execute-operator"},
    ]}  # fmt: skip
    with_uid = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}"))
    assert production_identity(with_uid, details).uid == "afr-agent"
    data = _spec(runs_uri=f"file://{tmp_path}")
    data["production"].pop("agent_uid")
    no_uid = production_identity(ReplaySpec.model_validate(data), details)
    assert (no_uid.uid, no_uid.uid_hash, no_uid.max_parallelism) == (None, "agent", 128)
    assert production_identity(ReplaySpec.model_validate(data), None).describe().startswith("no pin known")


def test_a_passing_check_returns_its_report(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    facts = CheckFacts(definitions=[_definition("production"), _definition("candidate")])
    result, ti, submitter = _run(monkeypatch, tmp_path, facts)
    assert result["refused"] is False and "agent check (job side): OK" in result["report"]
    assert result["checked"]["facts"] == facts.model_dump(mode="json") and result["changed"] == {}
    assert ti.pushed == {XCOM_CHANGED_RESOURCES_KEY: {}}  # nothing changed: every resource may be replayed
    assert submitter.programs[0].program_args[-2:] == ["--emit", "plan"]  # a REST submitter: the plan carrier


def test_the_candidate_s_changed_resources_are_returned_and_pushed_for_the_replays(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    facts = CheckFacts(definitions=[_definition("production"), _definition("candidate", tool_code="0the4")])
    result, ti, _ = _run(monkeypatch, tmp_path, facts)
    assert result["changed"] == {"notify_support": "changed"}
    assert ti.pushed == {XCOM_CHANGED_RESOURCES_KEY: {"notify_support": "changed"}}
    assert "notify_support  agent   record (changed: not replayed)" in result["report"]


def test_a_refusal_fails_the_task_with_the_report_and_keeps_it_for_the_run_record(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    facts = CheckFacts(definitions=[_definition("production"), _definition("candidate", actions=False)])
    err, ti, _ = _run(monkeypatch, tmp_path, facts)
    assert isinstance(err, AirflowFailException)
    assert "REFUSED" in str(err) and "candidate's agent pkg.candidate:job has an empty plan" in str(err)
    assert ti.pushed[XCOM_AGENT_CHECK_KEY]["refused"] is True
    assert ti.pushed[XCOM_AGENT_CHECK_KEY]["report"] == str(err)


def test_a_program_that_died_before_reporting_fails_the_task_with_its_own_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    died = FlinkSubmissionError(
        "Planning airflow_flink_replay.flink.agent_check over REST failed: ModuleNotFoundError: No module named "
        "'airflow_flink_replay'\n--- Python output (JobManager log) ---\nTraceback (most recent call last):"
    )
    err, _, _ = _run(monkeypatch, tmp_path, died)
    assert isinstance(err, AirflowFailException)
    assert str(err).startswith("the agent check could not run on the job side: Planning")
    assert "No module named 'airflow_flink_replay'" in str(err) and "Traceback" in str(err)

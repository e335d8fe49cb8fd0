"""The agent check's sample run, in the parts that need no Flink Agents: when it runs at all, the policy it runs
with, how a failure is classed, the unmediated-call guard on its thread and its time bound. (The run itself,
on real agents in the Flink-side venv: tests/unit/flink/test_agent_check.py and the agent check's integration
test.)"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from pydantic import BaseModel

from airflow_flink_replay.core.agent_check import DefinitionFacts, ResourceFact
from airflow_flink_replay.core.policy import Decision, ReplayPolicy
from airflow_flink_replay.flink import sample_run
from airflow_flink_replay.flink.sample_run import rejected_by_flink_agents, run_sample, sample_policy, skip_reason

CHAT = ResourceFact(name="review_model", type="chat_model", mediated=True)
TOOL = ResourceFact(name="notify_support", type="tool", mediated=True)


def _facts(*resources: ResourceFact) -> DefinitionFacts:
    return DefinitionFacts(role="candidate", ref="pkg.job:job", stage="done", resources=list(resources))


def test_it_runs_only_where_it_can_be_made_safe() -> None:
    assert skip_reason(_facts(CHAT, TOOL)) is None
    memory = ResourceFact(name="review_memory", type="vector_store", level="memory", mediated=True)
    assert "review_memory (vector store or long-term memory)" in (skip_reason(_facts(CHAT, memory)) or "")
    assert "MCP server(s) docs" in (skip_reason(_facts(ResourceFact(name="docs", type="mcp_server"))) or "")
    java_tool = ResourceFact(name="java_search", type="tool", mediated=False)
    assert skip_reason(_facts(CHAT, java_tool)) == "tool java_search cannot be mediated by the replay policy"


def test_no_tool_runs_for_real_but_pure_ones_and_unmediated_calls_are_blocked() -> None:
    lookup = ResourceFact(name="lookup", type="tool", mediated=True)
    policy = ReplayPolicy(by_type={"tool": "allow"}, by_name={"notify_support.call": "allow"}, pure_tools=["lookup"])
    sampled = sample_policy(policy, _facts(CHAT, TOOL, lookup))
    assert sampled.decide("tool", "notify_support", "call") == Decision.RECORD
    assert sampled.decide("tool", "lookup", "call") == Decision.ALLOW
    assert sampled.decide("chat_model", "review_model", "chat") == Decision.ALLOW  # as in every replay
    assert sampled.unmediated == Decision.BLOCK


class _Job:
    pass


def _run(monkeypatch: pytest.MonkeyPatch, outputs: Any, timeout: float = 30.0) -> Any:
    monkeypatch.setattr(sample_run, "agent_outputs", outputs)
    return run_sample(_Job(), b"{}", "capture/0@4", _facts(CHAT, TOOL), ReplayPolicy(), timeout=timeout)


def test_outputs_or_the_error_come_back_never_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _run(monkeypatch, lambda *args: ["a", "b"])
    assert (ran.record, ran.outputs, ran.error, ran.skipped) == ("capture/0@4", 2, None, None)

    def fails(*args: Any) -> list[Any]:
        raise ValueError("no verdict in the answer")

    failed = _run(monkeypatch, fails)
    assert failed.error is not None and failed.error.headline() == "ValueError: no verdict in the answer"
    assert not failed.rejected_by_flink_agents


class _Event(BaseModel):
    request_id: int


FLINK_AGENTS_CODE = "def build(value):\n    return Event(request_id=value)\n"


def test_a_validation_error_raised_in_flink_agents_is_flink_agents_refusing_the_event() -> None:
    scope: dict[str, Any] = {"Event": _Event}
    exec(compile(FLINK_AGENTS_CODE, "/venv/site-packages/flink_agents/plan/actions/tool_call_action.py", "exec"), scope)
    with pytest.raises(Exception) as inside:
        scope["build"]("call_0")
    assert rejected_by_flink_agents(inside.value)
    with pytest.raises(Exception) as outside:
        _Event(request_id="call_0")  # type: ignore[arg-type]  # the user's own model: not Flink Agents'
    assert not rejected_by_flink_agents(outside.value)
    assert not rejected_by_flink_agents(ValueError("x"))


def test_a_call_outside_every_resource_is_blocked_and_audited(monkeypatch: pytest.MonkeyPatch) -> None:
    def calls_out(*args: Any) -> list[Any]:
        with socket.socket() as s:
            s.connect(("127.0.0.1", 9))
        return []

    blocked = _run(monkeypatch, calls_out)
    assert blocked.error is not None and blocked.error.type == "ReplayPolicyBlocked"
    assert blocked.substituted and blocked.calls == ["unmediated socket.socket.connect: block (blocked)"]


def test_a_sample_that_does_not_finish_is_left_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = _run(monkeypatch, lambda *args: time.sleep(5), timeout=0.2)
    assert slow.timed_out and slow.error is None

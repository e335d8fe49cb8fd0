"""The agent check's sample run: one captured record through the agent, before anything is stopped.

Some errors only show when the agent runs: Flink Agents validates the events it builds from what the agent's
resources return, e.g. a chat model (or a stand-in, or a recorded chat answer) whose tool calls carry ids that
are not UUIDs makes ``ToolResponseEvent`` fail ("Input should be a valid UUID") — in every replay, on the first
record that calls a tool. The check runs the agent on one captured record in Flink Agents' local runner (the
plan is the one the job compiles, with the env-level resources merged in) and reports what happened.

It must have no side effect, so it runs only when it can be made safe, and says why when it does not:

- every resource of the plan sits behind the replay policy's proxies
  (:func:`~airflow_flink_replay.flink.proxies.rewrite_plan_resources`), with the run's own policy made stricter
  (:func:`sample_policy`): a tool call the replays would make for real (``allow``, other than ``pure_tools``) is
  recorded instead; chat and embedding models get the policy's decision, as in every replay (a chat model the
  policy allows is called, once per definition);
- calls an action makes outside every resource (sockets, processes, file writes) are blocked by the
  unmediated-call guard, armed on the sample's thread;
- an agent with a vector store or long-term memory is not run: outside the replay's memory fork a sample could
  read or write production's memory (and Flink Agents' local runner has no long-term memory); nor is one with
  an MCP server (its tools reach the server directly) or a resource the proxies cannot wrap.

The run is bounded (:data:`SAMPLE_TIMEOUT_S`, on a daemon thread). Its result is a
:class:`~airflow_flink_replay.core.agent_check.SampleRun`: the outputs, every call with its decision, and the
error; ``rejected_by_flink_agents`` marks a pydantic ``ValidationError`` raised inside Flink Agents (a contract
the agent's resources broke, which the judge refuses), any other error is a warning. Never imports Airflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import threading
import traceback
from collections.abc import Mapping
from typing import Any

from airflow_flink_replay.core.agent_check import DefinitionFacts, SampleRun
from airflow_flink_replay.core.policy import Decision, ReplayPolicy

#: How long the sample may run (a chat model the policy allows is called for real).
SAMPLE_TIMEOUT_S = 30.0
#: The variant name the sample's audit records carry.
VARIANT = "agent-check-sample"
#: Flink Agents' local runner logs every event (the record's content) at INFO: kept quiet during the sample.
_RUNNER_LOGGER = "flink_agents.runtime.local_runner"


def skip_reason(facts: DefinitionFacts) -> str | None:
    """Why the sample cannot be made safe for this plan (None: it can)."""
    memory = sorted(r.name for r in facts.resources if r.type == "vector_store" or r.level == "memory")
    if memory:
        return (f"the agent uses {', '.join(memory)} (vector store or long-term memory): outside the replay's "
                "memory fork a sample could read or write production's memory")  # fmt: skip
    mcp = sorted(r.name for r in facts.resources if r.type == "mcp_server")
    if mcp:
        return f"MCP server(s) {', '.join(mcp)}: their tools reach the server directly"
    unmediated = sorted(f"{r.type} {r.name}" for r in facts.resources if r.mediated is False)
    if unmediated:
        return f"{', '.join(unmediated)} cannot be mediated by the replay policy"
    return None


def sample_policy(policy: ReplayPolicy, facts: DefinitionFacts) -> ReplayPolicy:
    """``policy`` as the sample applies it: tools that would run for real recorded, unmediated calls blocked."""
    tools = [r.name for r in facts.resources if r.type == "tool"]
    real = {
        f"{name}.call": Decision.RECORD
        for name in tools
        if name not in policy.pure_tools and policy.decide("tool", name, "call") == Decision.ALLOW
    }
    return policy.model_copy(update={"by_name": {**policy.by_name, **real}, "unmediated": Decision.BLOCK})


def run_sample(
    job: Any,
    raw: bytes,
    where: str,
    facts: DefinitionFacts,
    policy: ReplayPolicy,
    mem0_config: Mapping[str, Any] | None = None,
    timeout: float = SAMPLE_TIMEOUT_S,
) -> SampleRun:
    """Run ``job``'s agent on the captured record ``raw`` (at ``where``) as the module docstring says; never
    raises for the user's code."""
    skipped = skip_reason(facts)
    if skipped:
        return SampleRun(record=where, skipped=skipped)
    audit_dir = tempfile.mkdtemp(prefix="afr-sample-")
    box: dict[str, Any] = {}
    thread = threading.Thread(
        target=_run_guarded, args=(job, raw, sample_policy(policy, facts), mem0_config, audit_dir, box),
        name="afr-agent-check-sample", daemon=True,
    )  # fmt: skip
    runner_log = logging.getLogger(_RUNNER_LOGGER)
    level = runner_log.level
    runner_log.setLevel(logging.ERROR)
    try:
        thread.start()
        thread.join(timeout)
    finally:
        runner_log.setLevel(level)
    calls, substituted = audited_calls(audit_dir)
    if thread.is_alive():  # left running (daemon): its audit folder stays, the check goes on
        return SampleRun(record=where, timed_out=True, calls=calls, substituted=substituted)
    shutil.rmtree(audit_dir, ignore_errors=True)
    error = box.get("error")
    if error is None:
        return SampleRun(record=where, outputs=len(box.get("outputs", [])), calls=calls, substituted=substituted)
    from airflow_flink_replay.flink.agent_check import python_error

    return SampleRun(record=where, calls=calls, substituted=substituted, error=python_error(error),
                     rejected_by_flink_agents=rejected_by_flink_agents(error))  # fmt: skip


def _run_guarded(
    job: Any, raw: bytes, policy: ReplayPolicy, mem0_config: Mapping[str, Any] | None, audit_dir: str, box: dict
) -> None:
    """The sample's thread: the agent's outputs, or the error, into ``box``."""
    from airflow_flink_replay.flink import unmediated

    try:
        with unmediated.armed(unmediated.Guard(VARIANT, audit_dir, Decision.BLOCK.value)):
            box["outputs"] = agent_outputs(job, raw, policy, mem0_config, audit_dir)
    except BaseException as exc:  # the user's code: reported, never raised
        box["error"] = exc


def agent_outputs(
    job: Any, raw: bytes, policy: ReplayPolicy, mem0_config: Mapping[str, Any] | None, audit_dir: str
) -> list[Any]:
    """The outputs of ``job``'s agent for the record ``raw``: its plan with every resource behind ``policy``,
    run event by event as Flink Agents' local runner runs it (``LocalRunner.run``), on a plan of ours."""
    from flink_agents.api.events.event import InputEvent, OutputEvent
    from flink_agents.runtime.local_runner import LocalRunnerContext

    from airflow_flink_replay.flink.proxies import rewrite_plan_resources

    value = job.deserializer(raw)
    plan = job.build_plan(mem0_config)
    rewrite_plan_resources(plan, policy, VARIANT, audit_dir)
    context = LocalRunnerContext(plan, job.key_selector(value), plan.config)
    context.send_event(InputEvent(input=value))
    outputs: list[Any] = []
    try:
        while context.events:
            event = context.events.popleft()
            if isinstance(event, OutputEvent):
                outputs.append(event.output)
                continue
            for action in plan.get_actions(f"{type(event).__module__}.{type(event).__name__}"):
                context.action_name = action.name
                _drive(action.exec(event, context))
    finally:
        with contextlib.suppress(Exception):
            plan.close()
    return outputs


def _drive(result: Any) -> None:
    """Run an async action to its end, as the local runner does (its awaits complete at once there)."""
    if asyncio.iscoroutine(result):
        with contextlib.suppress(StopIteration):
            while True:
                result.send(None)


def audited_calls(audit_dir: str) -> tuple[list[str], bool]:
    """Each distinct call of the sample as ``type name.method: decision (outcome)``, and whether one was
    recorded or blocked instead of made."""
    from airflow_flink_replay.core.audit import read_audit

    calls: list[str] = []
    substituted = False
    with contextlib.suppress(Exception):  # a partial line of a thread still writing: what was read is kept
        for rec in read_audit(audit_dir):
            substituted = substituted or rec.outcome in ("recorded", "blocked")
            text = f"{rec.resource_type} {rec.resource_name}.{rec.method}: {rec.decision} ({rec.outcome})"
            if text not in calls:
                calls.append(text)
    return calls, substituted


def rejected_by_flink_agents(exc: BaseException) -> bool:
    """Whether ``exc`` is a pydantic ``ValidationError`` raised where Flink Agents' code built a model (an event
    from what the agent's resources returned)."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return False
    frames = [f.filename.replace("\\", "/") for f in traceback.extract_tb(exc.__traceback__)]
    outside = [f for f in frames if "/pydantic/" not in f and "pydantic_core" not in f]
    return bool(outside) and "/flink_agents/" in outside[-1]

"""Policy proxies exercised in the Flink-side venv exactly as the TaskManager loads them (no Flink job).

The script below builds the real review agent's plan, rewrites it with :func:`rewrite_plan_resources`,
serialises it to JSON and loads it back (what ``create_flink_runner_context`` does in the TaskManager), then
asks the loaded plan for its resources and calls them: ``block`` raises an error naming the tool, ``record``
returns the stand-in without the side effect, ``allow`` executes, and each attempt is audited with the key
text the runtime's context switch announced. Runs in a subprocess with ``.stack/flink-venv`` (flink-agents
0.2.0, pydantic 2.11); the Flink jobs themselves are covered by ``test_flink_side.py``.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    audit_dir, inbox, run = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ["REVIEW_AGENT_SUPPORT_INBOX"] = inbox
    from flink_agents.api.chat_message import ChatMessage, MessageRole
    from flink_agents.api.resource import ResourceType
    from flink_agents.plan.agent_plan import AgentPlan
    from flink_agents.plan.configuration import AgentConfiguration
    from flink_agents.runtime import flink_runner_context as frc
    from airflow_flink_replay.core.policy import ReplayPolicy
    from airflow_flink_replay.flink import audit_context
    from airflow_flink_replay.flink.proxies import ReplayPolicyBlocked, rewrite_plan_resources
    from examples.review_agent.v2.agent import build_agent

    def loaded(policy, variant):
        plan = AgentPlan.from_agent(build_agent(), AgentConfiguration())
        report = rewrite_plan_resources(plan, ReplayPolicy.model_validate(policy), variant, audit_dir, "customer")
        return report, AgentPlan.model_validate_json(plan.model_dump_json(serialize_as_any=True))

    class Ctx:
        long_term_memory = None

    out = {}
    key = f"cust-{run}"
    audit_context.learn_key(key)
    frc.flink_runner_context_switch_action_context(Ctx(), audit_context.java_string_hash(key) + 62)
    out["current_key"] = audit_context.current_key()

    report, plan = loaded({"by_name": {"notify_support": "block"}}, "blocked")
    out["report"] = report
    tool = plan.get_resource("notify_support", ResourceType.TOOL)
    try:
        tool.call(review_id=f"b-{run}", customer=key, reason="late")
        out["block"] = None
    except ReplayPolicyBlocked as exc:
        out["block"] = str(exc)

    _, plan = loaded({"by_type": {"chat_model": "record"},
                      "stand_ins": {"notify_support": "no-ticket", "review_model": {"label": "neutral"}}},
                     "recorded")
    out["record"] = plan.get_resource("notify_support", ResourceType.TOOL).call(
        review_id=f"r-{run}", customer=key, reason="late")
    chat = plan.get_resource("review_model", ResourceType.CHAT_MODEL).chat(
        [ChatMessage(role=MessageRole.USER, content="{}")])
    out["chat_record"] = [chat.role.value, chat.content]

    _, plan = loaded({"by_name": {"notify_support": "allow"}}, "allowed")
    out["allow"] = plan.get_resource("notify_support", ResourceType.TOOL).call(
        review_id=f"a-{run}", customer=key, reason="late")
    out["tickets"] = sorted(p.name for p in Path(inbox).glob("*.json"))
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def result(stack, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("proxies")
    run = uuid.uuid4().hex[:6]
    proc = subprocess.run(
        [stack.flink_python, "-c", SCRIPT, str(tmp / "audit"), str(tmp / "inbox"), run],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    data["run"] = run
    data["audit"] = [json.loads(line) for f in sorted((tmp / "audit").glob("*.jsonl"))
                     for line in f.read_text().splitlines()]
    return data


def test_every_governed_resource_is_wrapped(result) -> None:
    assert sorted(result["report"]["wrapped"]) == ["chat_model:review_model", "tool:notify_support",
                                                   "vector_store:review_memory"]
    assert result["report"]["unmediated"] == []


def test_block_raises_naming_the_tool_and_is_audited(result) -> None:
    assert result["block"] and "notify_support" in result["block"]
    blocked = [r for r in result["audit"] if r["variant"] == "blocked"]
    assert len(blocked) == 1 and blocked[0]["outcome"] == "blocked" and "notify_support" in blocked[0]["error"]


def test_record_returns_stand_in_without_side_effect(result) -> None:
    run = result["run"]
    assert result["record"] == "no-ticket"
    assert result["chat_record"] == ["assistant", json.dumps({"label": "neutral"})]
    assert f"r-{run}.json" not in result["tickets"] and f"b-{run}.json" not in result["tickets"]
    rec = [r for r in result["audit"] if r["variant"] == "recorded"]
    assert {(r["resource_type"], r["decision"], r["outcome"]) for r in rec} == {
        ("tool", "record", "recorded"), ("chat_model", "record", "recorded")}
    tool = next(r for r in rec if r["resource_type"] == "tool")
    assert f'"review_id": "r-{run}"' in tool["args_preview"] and len(tool["args_digest"]) == 64


def test_allow_executes_the_tool(result) -> None:
    run = result["run"]
    assert result["allow"] == f"T-a-{run}"
    assert f"a-{run}.json" in result["tickets"]
    allowed = [r for r in result["audit"] if r["variant"] == "allowed"]
    assert [(r["decision"], r["outcome"]) for r in allowed] == [("allow", "ok")]


def test_audit_names_the_key_text_not_its_hash(result) -> None:
    key = f"cust-{result['run']}"
    assert result["current_key"] == key
    assert {r["key"] for r in result["audit"]} == {key}

"""The candidate (``"examples.order_agent.v2:job"``): asks the order service for the full status.

Same tool, other arguments (``detail="full"``): production's recorded answers do not match its calls.
"""

from __future__ import annotations

from typing import Any

from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceType
from flink_agents.api.runner_context import RunnerContext

from airflow_flink_replay.flink.agent_job import AgentJob, FieldKey, json_object

from .agent import OrderAgent, answer, question


class FullStatusOrderAgent(OrderAgent):
    """v1 asking with ``detail="full"`` (Flink Agents builds the plan from the class's own ``__dict__``: the
    tool is declared again)."""

    order_status = OrderAgent.__dict__["order_status"]

    @action(InputEvent)
    @staticmethod
    def ask(event: InputEvent, ctx: RunnerContext) -> None:
        """Ask the tool for the full status, answer with its result."""
        q: dict[str, Any] = question(event)
        status_tool = ctx.get_resource("order_status", ResourceType.TOOL)
        status = status_tool.call(order=q["order"], service_url=q["status_url"], detail="full")
        ctx.send_event(OutputEvent(output=answer(q, status)))


job = AgentJob(
    agent=FullStatusOrderAgent, key_selector=FieldKey("customer"), key_type="string", deserializer=json_object
)

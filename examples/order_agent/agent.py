"""The order agent (Flink Agents 0.2.0 API): one tool call per question, the answer built from its result.

Relative imports only inside the package: the replay job loads a copy of it under another module name.
"""

from __future__ import annotations

import json
from typing import Any

import requests
from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action, tool
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceType
from flink_agents.api.runner_context import RunnerContext


def question(event: InputEvent) -> dict[str, Any]:
    """The input as a mapping."""
    raw = event.input
    return json.loads(raw) if isinstance(raw, str | bytes) else dict(raw)


def answer(q: dict[str, Any], status: Any) -> dict[str, Any]:
    """The agent's output: the order's status as the tool gave it, and the reply built from it."""
    text = status.get("status") if isinstance(status, dict) else str(status)
    return {"id": q["id"], "customer": q["customer"], "order": q["order"], "status": status,
            "reply": f"Order {q['order']} is {text}."}


class OrderAgent(Agent):
    """Answers order questions with the order service's status (see the package docstring)."""

    @tool
    @staticmethod
    def order_status(order: str, service_url: str, detail: str = "short") -> dict:
        """Ask the order service for an order's status.

        Parameters
        ----------
        order : str
            The order id.
        service_url : str
            The order service's status endpoint.
        detail : str
            "short" or "full".
        """
        reply = requests.get(service_url, params={"order": order, "detail": detail}, timeout=10)
        reply.raise_for_status()
        return reply.json()

    @action(InputEvent)
    @staticmethod
    def ask(event: InputEvent, ctx: RunnerContext) -> None:
        """Ask the tool, answer with its result."""
        q = question(event)
        status_tool = ctx.get_resource("order_status", ResourceType.TOOL)
        status = status_tool.call(order=q["order"], service_url=q["status_url"])
        ctx.send_event(OutputEvent(output=answer(q, status)))

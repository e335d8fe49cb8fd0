"""Review triage agent (Flink Agents 0.2.0 API).

Input: one review as a JSON string ``{"id", "customer", "product", "rating", "text", "ts"}``, keyed by
``customer``. What the agent does is :mod:`examples.review_agent.common.triage` (shared by every version);
this module declares the agent with v1's prompt (:mod:`.prompts`).

This module must be imported by name (not ``__main__``): the TaskManager imports actions and resources by
module + qualname. It uses relative imports inside its package so that the replay job can load a copy of the
package under a unique module name.
"""

from __future__ import annotations

from typing import Any

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action, chat_model_connection, chat_model_setup, tool
from flink_agents.api.events.chat_event import ChatResponseEvent
from flink_agents.api.events.event import InputEvent
from flink_agents.api.resource import ResourceDescriptor
from flink_agents.api.runner_context import RunnerContext

from examples.review_agent.common import tools as support_tools
from examples.review_agent.common import triage
from examples.review_agent.common.triage import DEFAULT_NAMESPACE, EXTRA_RULES_KEY

from .prompts import SYSTEM_PROMPT

__all__ = ["DEFAULT_NAMESPACE", "EXTRA_RULES_KEY", "ReviewAgent", "build_agent"]


class ReviewAgent(Agent):
    """Triage product reviews (see :mod:`examples.review_agent.common.triage`)."""

    @chat_model_connection
    @staticmethod
    def review_llm() -> ResourceDescriptor:
        """The model connection: a local stand-in (see common/chat_model.py); swap in Ollama/OpenAI here."""
        return triage.review_llm()

    @chat_model_setup
    @staticmethod
    def review_model() -> ResourceDescriptor:
        """The chat model setup with the tools it may call."""
        return triage.review_model()

    @tool
    @staticmethod
    def notify_support(review_id: str, customer: str, reason: str) -> str:
        """Open a support ticket for a bad review.

        Parameters
        ----------
        review_id : str
            Id of the review.
        customer : str
            The customer who wrote it.
        reason : str
            Why support should look at it.
        """
        return support_tools.notify_support(review_id=review_id, customer=customer, reason=reason)

    @action(InputEvent)
    @staticmethod
    def process_input(event: InputEvent, ctx: RunnerContext) -> None:
        """Count, recall the customer's history and ask the chat model."""
        triage.process_input(event, ctx, SYSTEM_PROMPT)

    @action(ChatResponseEvent)
    @staticmethod
    def process_response(event: ChatResponseEvent, ctx: RunnerContext) -> None:
        """Remember the verdict in Mem0 and emit the output."""
        triage.process_response(event, ctx)


def build_agent(mem0_config: dict[str, Any] | None = None, **_options: Any) -> ReviewAgent:
    """Agent factory (``"examples.review_agent.v1.agent:build_agent"``): the agent with its Mem0 memory."""
    return triage.with_memory(ReviewAgent(), mem0_config)

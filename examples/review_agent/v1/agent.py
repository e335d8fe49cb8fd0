"""Review triage agent (Flink Agents 0.2.0 API).

Input: one review as a JSON string ``{"id", "customer", "product", "rating", "text", "ts"}``, keyed by
``customer``. Per review the agent

1. counts the reviews of this customer in short-term memory (``count``, keyed Flink state);
2. recalls the customer's earlier reviews from Mem0 (``user_id`` = ``job-identifier``, ``agent_id`` =
   customer) and counts the earlier complaints;
3. asks the chat model ``review_model`` (through the framework's chat-model action) to classify the review;
   the model may call the ``notify_support`` tool for bad reviews;
4. stores a memory of this review in Mem0 and emits
   ``{"id", "customer", "label", "score", "severity", "summary", "tools", "count", "prior_complaints"}``.

This module must be imported by name (not ``__main__``): the TaskManager imports actions and resources by
module + qualname. It uses relative imports inside its package so that the replay job can load a copy of the
package under a unique module name.
"""

from __future__ import annotations

import json
from typing import Any

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.decorators import action, chat_model_connection, chat_model_setup, tool
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.runner_context import RunnerContext

from examples.review_agent.common import tools as support_tools
from examples.review_agent.common.memory import DEFAULT_MEM0_CONFIG

from .prompts import SYSTEM_PROMPT

#: Namespace used when the job sets no ``job-identifier``.
DEFAULT_NAMESPACE = "review-agent"


#: Agent config key with extra prompt rules (lines like "Reviews mentioning 'x' are negative."), appended to
#: the system prompt. Lets a job change the prompt without changing code (used to show the action-state hazard).
EXTRA_RULES_KEY = "review-agent.extra-rules"


def _namespace(ctx: RunnerContext) -> str:
    return ctx.config.get_str("job-identifier") or DEFAULT_NAMESPACE


def _system_prompt(ctx: RunnerContext) -> str:
    extra = ctx.config.get_str(EXTRA_RULES_KEY) or ""
    return SYSTEM_PROMPT + ("\n" + extra if extra else "")


class ReviewAgent(Agent):
    """Triage product reviews (see the module docstring)."""

    @chat_model_connection
    @staticmethod
    def review_llm() -> ResourceDescriptor:
        """The model connection: deterministic and local; swap in Ollama/OpenAI here."""
        return ResourceDescriptor(clazz="examples.review_agent.common.chat_model.DeterministicReviewModel")

    @chat_model_setup
    @staticmethod
    def review_model() -> ResourceDescriptor:
        """The chat model setup with the tools it may call."""
        return ResourceDescriptor(
            clazz="examples.review_agent.common.chat_model.ReviewChatModelSetup",
            connection="review_llm",
            tools=["notify_support"],
        )

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
        raw = event.input
        review: dict[str, Any] = json.loads(raw) if isinstance(raw, str | bytes) else dict(raw)
        stm = ctx.short_term_memory
        count = int(stm.get("count") or 0) + 1
        stm.set("count", count)
        memory = ctx.get_resource("review_memory", ResourceType.VECTOR_STORE)
        history = memory.recall(user_id=_namespace(ctx), agent_id=str(review["customer"]))
        prior = sum(1 for h in history if h.get("label") == "negative")
        stm.set("review", json.dumps(review))
        stm.set("prior_complaints", prior)
        question = dict(review, prior_complaints=prior)
        ctx.send_event(
            ChatRequestEvent(
                model="review_model",
                messages=[
                    ChatMessage(role=MessageRole.SYSTEM, content=_system_prompt(ctx)),
                    ChatMessage(role=MessageRole.USER, content=json.dumps(question, sort_keys=True)),
                ],
            )
        )

    @action(ChatResponseEvent)
    @staticmethod
    def process_response(event: ChatResponseEvent, ctx: RunnerContext) -> None:
        """Remember the verdict in Mem0 and emit the output."""
        stm = ctx.short_term_memory
        review = json.loads(stm.get("review"))
        verdict = json.loads(event.response.content)
        memory = ctx.get_resource("review_memory", ResourceType.VECTOR_STORE)
        memory.remember(
            text=f"review {review['id']} rated {review.get('rating')}: {review.get('text', '')}",
            user_id=_namespace(ctx),
            agent_id=str(review["customer"]),
            metadata={"label": verdict["label"], "review_id": str(review["id"])},
        )
        ctx.send_event(
            OutputEvent(
                output={
                    "id": review["id"],
                    "customer": review["customer"],
                    "label": verdict["label"],
                    "score": verdict["score"],
                    "severity": verdict["severity"],
                    "summary": verdict["summary"],
                    "tools": verdict.get("tools", []),
                    "count": int(stm.get("count") or 0),
                    "prior_complaints": int(stm.get("prior_complaints") or 0),
                }
            )
        )


def build_agent(mem0_config: dict[str, Any] | None = None, **_options: Any) -> ReviewAgent:
    """Agent factory (``"examples.review_agent.v1.agent:build_agent"``): the agent with its Mem0 memory."""
    agent = ReviewAgent()
    agent.add_resource(
        "review_memory",
        ResourceType.VECTOR_STORE,
        ResourceDescriptor(
            clazz="examples.review_agent.common.memory.ReviewMemory",
            mem0_config=mem0_config or DEFAULT_MEM0_CONFIG,
        ),
    )
    return agent

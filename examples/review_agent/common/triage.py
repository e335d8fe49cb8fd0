"""What every version of the review triage agent does; a version's ``agent.py`` only declares the agent.

Flink Agents builds the plan from the agent class's own ``__dict__`` (``type(agent).__dict__``): a subclass
of another version's agent would declare no actions or resources, and the TaskManager imports each action
by its module + qualname. So every version declares its own ``ReviewAgent`` class in its own module, and
its actions and resources call the functions here with what the version changes (its system prompt).

Per review the agent

1. counts the reviews of this customer in short-term memory (``count``, keyed Flink state);
2. recalls the customer's earlier reviews from Mem0 (``user_id`` = ``job-identifier``, ``agent_id`` =
   customer) and counts the earlier complaints;
3. asks the chat model ``review_model`` (through the framework's chat-model action) to classify the review;
   the model may call the ``notify_support`` tool for bad reviews;
4. stores a memory of this review in Mem0 and emits
   ``{"id", "customer", "label", "score", "severity", "summary", "tools", "count", "prior_complaints"}``.

Imported absolutely by both versions: when a replay isolates a version's package under a content-hashed
name, this module stays shared, which is right because it is the same code for both.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.runner_context import RunnerContext

from examples.review_agent.common.memory import DEFAULT_MEM0_CONFIG

#: Namespace used when the job sets no ``job-identifier``.
DEFAULT_NAMESPACE = "review-agent"

#: Agent config key with extra prompt rules (lines like "Reviews mentioning 'x' are negative."), appended to
#: the system prompt. Lets a job change the prompt without changing code (used to show the action-state hazard).
EXTRA_RULES_KEY = "review-agent.extra-rules"

A = TypeVar("A", bound=Agent)


def namespace(ctx: RunnerContext) -> str:
    """The Mem0 ``user_id``: the job's ``job-identifier`` (the fork namespace in a replay)."""
    return ctx.config.get_str("job-identifier") or DEFAULT_NAMESPACE


def system_prompt(ctx: RunnerContext, base: str) -> str:
    """The version's prompt plus the job's extra rules (:data:`EXTRA_RULES_KEY`)."""
    extra = ctx.config.get_str(EXTRA_RULES_KEY) or ""
    return base + ("\n" + extra if extra else "")


def review_llm() -> ResourceDescriptor:
    """The model connection: a local stand-in (deterministic unless the job sets a temperature); swap in
    Ollama/OpenAI here."""
    return ResourceDescriptor(clazz="examples.review_agent.common.chat_model.StandInReviewModel")


def review_model() -> ResourceDescriptor:
    """The chat model setup with the tools it may call."""
    return ResourceDescriptor(
        clazz="examples.review_agent.common.chat_model.ReviewChatModelSetup",
        connection="review_llm",
        tools=["notify_support"],
    )


def process_input(event: InputEvent, ctx: RunnerContext, base_prompt: str) -> None:
    """Count, recall the customer's history and ask the chat model (with ``base_prompt`` + extra rules)."""
    raw = event.input
    review: dict[str, Any] = json.loads(raw) if isinstance(raw, str | bytes) else dict(raw)
    stm = ctx.short_term_memory
    count = int(stm.get("count") or 0) + 1
    stm.set("count", count)
    memory = ctx.get_resource("review_memory", ResourceType.VECTOR_STORE)
    history = memory.recall(user_id=namespace(ctx), agent_id=str(review["customer"]))
    prior = sum(1 for h in history if h.get("label") == "negative")
    stm.set("review", json.dumps(review))
    stm.set("prior_complaints", prior)
    question = dict(review, prior_complaints=prior)
    ctx.send_event(
        ChatRequestEvent(
            model="review_model",
            messages=[
                ChatMessage(role=MessageRole.SYSTEM, content=system_prompt(ctx, base_prompt)),
                ChatMessage(
                    role=MessageRole.USER,
                    content=json.dumps(question, sort_keys=True),
                    extra_args={"session": namespace(ctx)},
                ),
            ],
        )
    )


def process_response(event: ChatResponseEvent, ctx: RunnerContext) -> None:
    """Remember the verdict in Mem0 and emit the output."""
    stm = ctx.short_term_memory
    review = json.loads(stm.get("review"))
    verdict = json.loads(event.response.content)
    memory = ctx.get_resource("review_memory", ResourceType.VECTOR_STORE)
    memory.remember(
        text=f"review {review['id']} rated {review.get('rating')}: {review.get('text', '')}",
        user_id=namespace(ctx),
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


def with_memory(agent: A, mem0_config: dict[str, Any] | None = None) -> A:
    """``agent`` with its Mem0-backed ``review_memory`` resource (the agent factories' common part)."""
    agent.add_resource(
        "review_memory",
        ResourceType.VECTOR_STORE,
        ResourceDescriptor(
            clazz="examples.review_agent.common.memory.ReviewMemory",
            mem0_config=mem0_config or DEFAULT_MEM0_CONFIG,
        ),
    )
    return agent

"""Job definitions whose chat model calls a tool (issue 48): ``recorded_ids`` plays back chat answers recorded
from another provider, whose tool-call ids are that provider's own (``call_0``); ``uuid_ids`` gives its tool
calls UUIDs, as Flink Agents requires.

Flink Agents keys tool calls and their responses by UUID (``ToolResponseEvent``: "Input should be a valid
UUID"), so ``recorded_ids`` fails on the first record that calls a tool, in production and in every replay. The
agent check's sample run (one captured record through the agent, the tool recorded, not executed) must refuse
it and let ``uuid_ids`` pass.

The agent is the Flink Agents quickstart's ``ReviewAnalysisAgent`` (no memory: the sample runs); the input is
the review agent's records (``{"id", "customer", "text", ...}``), which the agent check's test captures.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.examples.quickstart.agents.custom_types_and_resources import ProductReview
from flink_agents.examples.quickstart.agents.review_analysis_agent import ReviewAnalysisAgent

from airflow_flink_replay.flink.agent_job import AgentJob, EnvResource
from tests.jobs.quickstart_job.stand_in import StandInChatModelConnection

#: The id a recorded answer of another provider gives its tool call.
RECORDED_ID = "call_0"


class RecordedAnswers(StandInChatModelConnection):
    """First a tool call with the recorded id :data:`RECORDED_ID`, then the quickstart stand-in's answer."""

    def chat(self, messages: Sequence[ChatMessage], tools: list[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        """A call of ``notify_shipping_manager`` before any tool answered, then the answer."""
        if tools and not any(m.role == MessageRole.TOOL for m in messages):
            call = {"id": self.call_id(messages), "type": "function",
                    "function": {"name": "notify_shipping_manager", "arguments": {"id": "r", "review": "late"}}}
            return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])
        return super().chat(messages, tools, **kwargs)

    def call_id(self, messages: Sequence[ChatMessage]) -> str:
        """The recorded id."""
        return RECORDED_ID


class UuidAnswers(RecordedAnswers):
    """The same answers with UUID tool-call ids (deterministic: a uuid5 of the user message)."""

    def call_id(self, messages: Sequence[ChatMessage]) -> str:
        """A UUID of the conversation's user message."""
        user = next((m.content for m in messages if m.role == MessageRole.USER), "")
        return str(uuid.uuid5(uuid.NAMESPACE_URL, user))


def review_of(raw: bytes) -> ProductReview:
    """A captured review-agent record as the quickstart's input."""
    record = json.loads(raw)
    return ProductReview(id=str(record["id"]), review=str(record.get("text", "")))


def review_id(review: ProductReview) -> str:
    """The agent's key."""
    return review.id


def _job(connection: type) -> AgentJob:
    descriptor = ResourceDescriptor(clazz=f"{__name__}.{connection.__qualname__}")
    return AgentJob(agent=ReviewAnalysisAgent, key_selector=review_id, deserializer=review_of,
                    env_resources=[EnvResource("ollama_server", ResourceType.CHAT_MODEL_CONNECTION, descriptor)])


recorded_ids = _job(RecordedAnswers)
uuid_ids = _job(UuidAnswers)

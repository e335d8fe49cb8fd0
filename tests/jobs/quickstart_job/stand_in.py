"""A stand-in for the quickstart's Ollama server, which is not reachable here: same connection interface,
deterministic answers.

It plays the part of the LLM the quickstart's prompt talks to. It reads the scale the system messages ask
for ("a satisfaction score (1-5)"), finds the positive and negative words of the review in the user
message, and answers ``{"id", "score", "reasons"}`` as the prompt's example format says. A review that
complains about shipping first gets a call of the ``notify_shipping_manager`` tool (the prompt asks for
that), then the answer. The score is a function of the review AND of the prompt's scale, so a prompt that
asks for another scale changes the scores, and nothing else does.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.resource import ResourceDescriptor
from flink_agents.api.tools.tool import Tool

POSITIVE = ("love", "great", "comfortable", "comfy", "perfect", "excellent", "good", "nice", "happy", "fit")
NEGATIVE = ("broke", "broken", "damaged", "poor", "wet", "late", "return", "refund", "disappoint", "bad",
            "worst", "cheap", "small", "ripped", "never")
SHIPPING = ("damaged", "wet", "crushed", "arrived", "shipping", "package", "box")
_SCALE = re.compile(r"score \((\d+)\s*-\s*(\d+)\)")
_ID = re.compile(r'"id":\s*"?([^",\s]+)')
_REVIEW = re.compile(r'"review":\s*(.*)', re.DOTALL)


class StandInChatModelConnection(BaseChatModelConnection):
    """Deterministic chat model connection standing in for ``OllamaChatModelConnection``."""

    def chat(self, messages: Sequence[ChatMessage], tools: list[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        """The prompt's answer for the review in the messages (a tool call first for a shipping complaint)."""
        system = "\n".join(m.content for m in messages if m.role == MessageRole.SYSTEM)  # ReActAgent sends two
        user = next((m.content for m in messages if m.role == MessageRole.USER), "")
        match, text = _ID.search(user), _REVIEW.search(user)
        review_id = match.group(1) if match else ""
        review = (text.group(1) if text else user).strip()
        called = any(m.role == MessageRole.TOOL for m in messages)
        tool_names = {t.metadata.name for t in tools or ()}
        if not called and "notify_shipping_manager" in tool_names and any(w in review.lower() for w in SHIPPING):
            call = {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, user)), "type": "function",
                    "function": {"name": "notify_shipping_manager",
                                 "arguments": {"id": review_id, "review": review}}}
            return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])
        return ChatMessage(role=MessageRole.ASSISTANT, content=json.dumps(answer(system, review_id, review.lower())))


def answer(system_prompt: str, review_id: str, review: str) -> dict[str, Any]:
    """``{"id", "score", "reasons"}``: the share of positive words mapped onto the prompt's scale."""
    low, high = (int(g) for g in _SCALE.search(system_prompt).groups()) if _SCALE.search(system_prompt) else (1, 5)
    positive = sum(review.count(w) for w in POSITIVE)
    negatives = [w for w in NEGATIVE if w in review]
    share = (positive + 1) / (positive + len(negatives) + 2)
    return {"id": review_id, "score": low + round(share * (high - low)), "reasons": negatives}


def stand_in_descriptor() -> ResourceDescriptor:
    """The descriptor to register under the quickstart's connection name, ``"ollama_server"``.

    The class is named by this module's own ``__name__``: the replay job imports a job definition's package
    from a content-hashed copy, and the descriptor then names the copy's class."""
    return ResourceDescriptor(clazz=f"{__name__}.{StandInChatModelConnection.__qualname__}")

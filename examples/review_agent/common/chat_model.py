"""A deterministic, local chat model for the review agent (no LLM is reachable on these machines).

:class:`DeterministicReviewModel` is a real ``BaseChatModelConnection``: the framework's chat-model action
calls it with the prompt messages and the bound tools, it may answer with a tool call, and it answers with
JSON after the tool results come back — exactly the protocol of an LLM connection. Any real connection
(``ResourceName.ChatModel.OLLAMA_CONNECTION``, ``OPENAI_CONNECTION``, …) drops in by changing the
``review_llm`` descriptor in ``vN/agent.py``.

How it "thinks" (documented so that outputs are predictable):

- the user message is the review as JSON (``id``, ``customer``, ``rating``, ``text``, ``prior_complaints``);
- label from the rating: 1-2 ``negative``, 3 ``neutral``, 4-5 ``positive``;
- then every line of the system prompt of the form ``Reviews mentioning '<phrase>' are <label>.`` is a rule:
  the first rule whose phrase occurs in the text (case-insensitive) sets the label;
- ``score`` = (rating - 1) / 4 - 0.1 x min(prior_complaints, 3), clipped to [0, 1], 2 decimals;
- ``severity`` = ``high`` for a negative review by a customer with >= 2 earlier complaints, else ``normal``;
- a ``negative`` review with ``notify_support`` among the tools gets one tool call
  ``notify_support(review_id, customer, reason)`` first; the final answer lists the tools called.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.tools.tool import ToolType

_RULE = re.compile(r"Reviews mentioning '([^']+)' are (negative|neutral|positive)\.", re.IGNORECASE)
_TOOL_NS = uuid.UUID("6f0c2f1e-4d1c-4f5e-9a55-1f1ad0c0ffee")


def classify(review: dict[str, Any], system_prompt: str) -> dict[str, Any]:
    """The model's decision for one review under ``system_prompt`` (pure; used by the connection)."""
    rating = int(review.get("rating", 3))
    text = str(review.get("text", ""))
    prior = int(review.get("prior_complaints", 0))
    label = "negative" if rating <= 2 else "neutral" if rating == 3 else "positive"
    rule_hit = None
    for phrase, rule_label in _RULE.findall(system_prompt):
        if phrase.lower() in text.lower():
            label, rule_hit = rule_label.lower(), phrase
            break
    score = round(min(1.0, max(0.0, (rating - 1) / 4 - 0.1 * min(prior, 3))), 2)
    severity = "high" if label == "negative" and prior >= 2 else "normal"
    words = " ".join(text.split()[:8])
    summary = f"{label} ({rating}/5): {words}" + (f" [rule: {rule_hit}]" if rule_hit else "")
    return {"label": label, "score": score, "severity": severity, "summary": summary}


class DeterministicReviewModel(BaseChatModelConnection):
    """Deterministic stand-in for an LLM connection (see the module docstring)."""

    def chat(self, messages: Sequence[ChatMessage], tools: list | None = None, **kwargs: Any) -> ChatMessage:
        """Answer like an LLM would: first a tool call for bad reviews, then the JSON verdict."""
        system = "\n".join(m.content for m in messages if m.role == MessageRole.SYSTEM)
        user = next(m for m in messages if m.role == MessageRole.USER and m.content.strip().startswith("{"))
        review = json.loads(user.content)
        verdict = classify(review, system)
        called = [
            call["function"]["name"]
            for m in messages
            if m.role == MessageRole.ASSISTANT
            for call in (m.tool_calls or [])
        ]
        tool_names = [t.metadata.name for t in (tools or [])]
        if verdict["label"] == "negative" and "notify_support" in tool_names and not called:
            return ChatMessage(
                role=MessageRole.ASSISTANT,
                content="",
                tool_calls=[
                    {
                        "id": str(uuid.uuid5(_TOOL_NS, f"{review['id']}:notify_support")),
                        "type": ToolType.FUNCTION,
                        "function": {
                            "name": "notify_support",
                            "arguments": {
                                "review_id": str(review["id"]),
                                "customer": str(review.get("customer", "")),
                                "reason": verdict["summary"],
                            },
                        },
                    }
                ],
            )
        verdict["tools"] = called
        return ChatMessage(role=MessageRole.ASSISTANT, content=json.dumps(verdict))


class ReviewChatModelSetup(BaseChatModelSetup):
    """Chat model setup without extra model settings (prompt messages are built by the agent's action)."""

    @property
    def model_kwargs(self) -> dict[str, Any]:
        """No generation parameters for the deterministic model."""
        return {}

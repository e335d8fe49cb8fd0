"""A local stand-in for an LLM chat model connection (no LLM is reachable on these machines).

:class:`StandInReviewModel` is a real ``BaseChatModelConnection``: the framework's chat-model action calls it
with the prompt messages and the bound tools, it may answer with a tool call, and it answers with JSON after
the tool results come back — exactly the protocol of an LLM connection. Any real connection
(``ResourceName.ChatModel.OLLAMA_CONNECTION``, ``OPENAI_CONNECTION``, …) drops in by changing the
``review_llm`` descriptor in ``common/triage.py``.

How it "thinks" at ``temperature`` 0 (the default: deterministic, so that outputs are predictable):

- the user message is the review as JSON (``id``, ``customer``, ``rating``, ``text``, ``prior_complaints``);
- label from the rating: 1-2 ``negative``, 3 ``neutral``, 4-5 ``positive``;
- then every line of the system prompt of the form ``Reviews mentioning '<phrase>' are <label>.`` is a rule:
  the first rule whose phrase occurs in the text (case-insensitive) sets the label;
- ``score`` = (rating - 1) / 4 - 0.1 x min(prior_complaints, 3), clipped to [0, 1], 2 decimals;
- ``severity`` = ``high`` for a negative review by a customer with >= 2 earlier complaints, else ``normal``;
- a ``negative`` review with ``notify_support`` among the tools gets one tool call
  ``notify_support(review_id, customer, reason)`` first; the final answer lists the tools called.

At a ``temperature`` above 0 it samples like an LLM (:func:`~examples.review_agent.common.decision.sample`):
a borderline review (3 stars, no rule applies) is sometimes read as positive, the score jitters, the summary is
paraphrased. The draws are seeded by
``seed``, the session (the user message's ``extra_args["session"]``, like the ``user`` of LLM APIs; the agent
passes its memory namespace, so two runs of one agent differ like two runs of an LLM, yet a run can be
reproduced) and the review id; the tool call and the final answer of one review use the same draws. Set both
through the agent config (``StandInReviewModel.temperature``, ``StandInReviewModel.seed``): Flink Agents passes
agent config keys prefixed with a resource's class name to that resource.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Sequence
from typing import Any

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.tools.tool import ToolType

from examples.review_agent.common.decision import classify

_TOOL_NS = uuid.UUID("6f0c2f1e-4d1c-4f5e-9a55-1f1ad0c0ffee")


class StandInReviewModel(BaseChatModelConnection):
    """Local stand-in for an LLM connection (see the module docstring): deterministic at temperature 0."""

    temperature: float = 0.0
    seed: int = 0

    def chat(self, messages: Sequence[ChatMessage], tools: list | None = None, **kwargs: Any) -> ChatMessage:
        """Answer like an LLM would: first a tool call for bad reviews, then the JSON verdict."""
        system = "\n".join(m.content for m in messages if m.role == MessageRole.SYSTEM)
        user = next(m for m in messages if m.role == MessageRole.USER and m.content.strip().startswith("{"))
        review = json.loads(user.content)
        session = str((user.extra_args or {}).get("session", ""))
        rng = random.Random(f"{self.seed}|{session}|{review.get('id')}")
        verdict = classify(review, system, temperature=self.temperature, rng=rng)
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
        """No generation parameters: the connection's own ``temperature`` and ``seed`` apply."""
        return {}

"""A stand-in for the quickstart's Ollama server that answers both agents of its multi-agent workflow:
deterministic, same connection interface.

It is the single-agent quickstart's stand-in (:mod:`tests.jobs.quickstart_job.stand_in`, reused: review
analysis answers come from it unchanged) plus an answer to the ``ProductSuggestionAgent``'s prompt. That agent's
chat model setup formats the prompt (``Prompt.from_text``) with the agent's ``input`` (a summary written as
``"id": ..., "score_histogram": [...], "unsatisfied_reasons": [...]``, the lists as Python reprs) into ONE
system message, and its own user message (empty content, the summary in ``extra_args``) is left out: the
connection's ``chat()`` receives that system message alone.

The answer is ``{"suggestion_list": [...]}`` with as many suggestions as the prompt asks for ("generate three
actionable suggestions" → 3, "two" → 2): "Address '<reason>' complaints" for the summary's most frequent
unsatisfied reasons, padded with generic suggestions. It is a function of the summary AND of the prompt's
wording only, so a prompt asking for another number of suggestions changes the lists, and nothing else does.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.resource import ResourceDescriptor
from flink_agents.api.tools.tool import Tool

from tests.jobs.quickstart_job.stand_in import StandInChatModelConnection

#: How the quickstart's suggestion prompt asks for its suggestions ("generate three actionable suggestions").
_ASKS_FOR = re.compile(r"generate\s+(\w+)\s+actionable\s+suggestions", re.IGNORECASE)
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_REASONS = re.compile(r'"unsatisfied_reasons":\s*(\[[^\n]*\])')
#: What pads the list when the summary has fewer distinct reasons than the prompt asks for suggestions.
GENERIC = (
    "Survey recent buyers for further feedback",
    "Highlight the most praised features in the product description",
    "Monitor new reviews for emerging issues",
    "Review the product's quality control checklist",
    "Compare the product with its best-rated alternatives",
    "Follow up with customers who left a low score",
)


class SuggestingStandInChatModelConnection(StandInChatModelConnection):
    """The quickstart's stand-in connection, also answering the product suggestion prompt."""

    def chat(self, messages: Sequence[ChatMessage], tools: list[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        """Suggestions for the suggestion prompt; anything else is the quickstart stand-in's (review analysis)."""
        text = "\n".join(m.content for m in messages if m.role in (MessageRole.SYSTEM, MessageRole.USER))
        if "suggestion_list" not in text:
            return super().chat(messages, tools, **kwargs)
        return ChatMessage(role=MessageRole.ASSISTANT, content=json.dumps(suggest(text)))


def suggestion_count(prompt_text: str) -> int:
    """How many suggestions the prompt asks for: its "generate <n> actionable suggestions" (3 if it does not
    say)."""
    match = _ASKS_FOR.search(prompt_text)
    if not match:
        return 3
    word = match.group(1).lower()
    return int(word) if word.isdigit() else _NUMBERS.get(word, 3)


def unsatisfied_reasons(prompt_text: str) -> list[str]:
    """The summary's unsatisfied reasons: the last ``"unsatisfied_reasons": [...]`` of the text (the first is
    the prompt's example input format)."""
    found = _REASONS.findall(prompt_text)
    if not found:
        return []
    try:
        reasons = ast.literal_eval(found[-1])
    except (ValueError, SyntaxError):
        return []
    return [str(r) for r in reasons] if isinstance(reasons, list) else []


def suggest(prompt_text: str) -> dict[str, list[str]]:
    """``{"suggestion_list": [...]}``: one suggestion per most frequent reason (ties in order of first mention),
    as many as the prompt asks for, padded with :data:`GENERIC`."""
    wanted = suggestion_count(prompt_text)
    frequent = [reason for reason, _ in Counter(unsatisfied_reasons(prompt_text)).most_common()]
    suggestions = [f"Address '{reason}' complaints" for reason in frequent[:wanted]]
    suggestions += GENERIC[: wanted - len(suggestions)]
    return {"suggestion_list": suggestions}


def stand_in_descriptor() -> ResourceDescriptor:
    """The descriptor to register under the quickstart's connection name, ``"ollama_server"``.

    The class is named by this module's own ``__name__``: the replay job imports a job definition's package
    from a content-hashed copy, and the descriptor then names the copy's class."""
    return ResourceDescriptor(clazz=f"{__name__}.{SuggestingStandInChatModelConnection.__qualname__}")

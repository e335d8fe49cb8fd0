"""An agent shaped like Flink Agents' own end-to-end integration agent, as a user would bring it.

Labelled before it is run, as the tests and ``benchmarks/aa_stability.py`` rely on it:

- input: JSON ``{"id", "review", "review_score"}``, keyed by ``id`` (a handful of ids, so a replay window holds
  several records per key); the spec's ``compare_key`` is ``$.id``, which is NOT unique per output;
- ``first_action`` counts the key's reviews in short-term memory (``status.total_reviews``: a replay continues
  production's count from the savepoint), then takes a random 0-1 s ``durable_execute`` step (production and
  the replays finish records at different moments);
- ``second_action`` calls the tool ``annotate`` through ``ctx.get_resource`` and emits
  ``{"id", "review", "review_score", "memory_info": {"total_reviews"}}``: every output depends on the tool's
  result and the count, nothing on time or chance;
- production's output topic has two partitions (``deploy``'s default).

Definitions: ``production``; ``changed_tool`` (only the tool's body differs: it returns another text, so every
output's ``$.review`` changes); ``plain_subclass`` (the subclassing trap: the agent check refuses it).
"""

from __future__ import annotations

import copy
import json
import random
import time
from typing import Any

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action, tool
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.resource import ResourceType
from flink_agents.api.runner_context import RunnerContext
from pydantic import BaseModel

from airflow_flink_replay.flink.agent_job import AgentJob


class Review(BaseModel):
    """One review, the agent's input and (with ``memory_info``) its output."""

    id: str
    review: str
    review_score: float
    memory_info: dict[str, Any] | None = None


class Counted(Event):
    """The review after it was counted (first action -> second action)."""

    value: dict[str, Any]


def _pause(seconds: float) -> bool:
    time.sleep(seconds)
    return True


def count_and_pause(event: InputEvent, ctx: RunnerContext) -> None:
    """Count the key's reviews in short-term memory, pause 0-1 s in a durable step, pass the review on."""
    review: Review = event.input
    stm = ctx.short_term_memory
    total = (stm.get("status.total_reviews") or 0) + 1
    stm.set("status.total_reviews", total)
    ctx.durable_execute(_pause, random.random())
    content = copy.deepcopy(review)
    content.memory_info = {"total_reviews": total}
    ctx.send_event(Counted(value=content.model_dump()))


def annotate_and_emit(event: Counted, ctx: RunnerContext) -> None:
    """Annotate the review with the tool, emit it."""
    content = Review.model_validate(event.value)
    annotate = ctx.get_resource("annotate", ResourceType.TOOL)
    content.review = annotate.call(text=content.review)
    ctx.send_event(OutputEvent(output=content))


class CounterAgent(Agent):
    """Counts each key's reviews and annotates every review with a tool."""

    @tool
    @staticmethod
    def annotate(text: str) -> str:
        """Annotate a review.

        Parameters
        ----------
        text : str
            The review's text.
        """
        return text + " [checked]"

    @action(InputEvent)
    @staticmethod
    def first_action(event: InputEvent, ctx: RunnerContext) -> None:
        """Count, pause, pass on."""
        count_and_pause(event, ctx)

    @action(Counted)
    @staticmethod
    def second_action(event: Counted, ctx: RunnerContext) -> None:
        """Annotate and emit."""
        annotate_and_emit(event, ctx)


class ChangedToolAgent(Agent):
    """:class:`CounterAgent` with another tool body: the only change."""

    @tool
    @staticmethod
    def annotate(text: str) -> str:
        """Annotate a review.

        Parameters
        ----------
        text : str
            The review's text.
        """
        return text + " [reviewed by the new annotator]"

    first_action = CounterAgent.__dict__["first_action"]
    second_action = CounterAgent.__dict__["second_action"]


class PlainSubclass(CounterAgent):
    """The subclassing trap: inherits everything, so its plan is empty."""


def review_id(review: Review) -> str:
    """The agent's key: the review's id (several reviews share one)."""
    return review.id


def parse_review(raw: bytes) -> Review:
    """The captured record as the agent's input."""
    return Review.model_validate(json.loads(raw))


def review_json(review: Review) -> dict[str, Any]:
    """The output as a JSON object."""
    return review.model_dump()


production = AgentJob(agent=CounterAgent, key_selector=review_id, deserializer=parse_review,
                      output_serializer=review_json)
changed_tool = AgentJob(agent=ChangedToolAgent, key_selector=review_id, deserializer=parse_review,
                        output_serializer=review_json)
plain_subclass = AgentJob(agent=PlainSubclass, key_selector=review_id, deserializer=parse_review,
                          output_serializer=review_json)


"""An agent shaped like Flink Agents' own end-to-end integration agent, as a user would bring it.

Labelled before it is run, as the tests and ``benchmarks/aa_stability.py`` rely on it:

- input: JSON ``{"id", "review", "review_score"}``, keyed by ``id`` (a handful of ids, so a replay window holds
  several records per key); the spec's ``compare_key`` is ``$.id``, which is NOT unique per output;
- ``first_action`` counts the key's reviews in short-term memory (``status.total_reviews``: a replay continues
  production's count from the savepoint), then takes a random 0-1 s ``durable_execute`` step (production and
  the replays finish records at different moments);
- ``second_action`` calls the tool ``annotate`` (pure: the spec's policy lists it in ``pure_tools``) and the
  tool ``open_ticket`` (a side effect: replayed from production's cassette, else recorded) through
  ``ctx.get_resource`` and emits ``{"id", "review", "review_score", "ticket", "memory_info": {"total_reviews"}}``:
  every output depends on the tools' results and the count, nothing on time or chance;
- production's output topic has two partitions (``deploy``'s default).

Definitions: ``production``; ``changed_tool`` (only the two tools' bodies differ: each returns another text, so
every output's ``$.review`` and ``$.ticket`` change); ``plain_subclass`` (the subclassing trap: the agent check
refuses it).
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
    ticket: str | None = None
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
    """Annotate the review and open its ticket with the tools, emit it."""
    content = Review.model_validate(event.value)
    annotate = ctx.get_resource("annotate", ResourceType.TOOL)
    content.review = annotate.call(text=content.review)
    total = int((content.memory_info or {}).get("total_reviews", 0))
    content.ticket = ctx.get_resource("open_ticket", ResourceType.TOOL).call(review_id=content.id, total=total)
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

    @tool
    @staticmethod
    def open_ticket(review_id: str, total: int) -> str:
        """Open a ticket for the review (a side effect in a real system).

        Parameters
        ----------
        review_id : str
            The review's id.
        total : int
            How many reviews the id has had.
        """
        return f"ticket-{review_id}-{total}"

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
    """:class:`CounterAgent` with other tool bodies: the only change."""

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

    @tool
    @staticmethod
    def open_ticket(review_id: str, total: int) -> str:
        """Open a ticket for the review (a side effect in a real system).

        Parameters
        ----------
        review_id : str
            The review's id.
        total : int
            How many reviews the id has had.
        """
        return f"case-{review_id}-{total}"

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


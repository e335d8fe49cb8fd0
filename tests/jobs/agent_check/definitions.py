"""Job definitions for the agent check's tests.

``plain_subclass``: the subclassing trap — ``class PlainSubclass(ReviewAgent): pass`` has an empty plan, since
Flink Agents builds it from the class's own ``__dict__``. ``redeclared_subclass``: the fix, the inherited
declarations re-declared in the subclass body. ``lost_tool``: a candidate that declares its actions but not
production's tool. ``changed_tool``: only the tool's body differs (the check finds it changed);
``commented_tool``: the tool's code with comments and another docstring (unchanged). ``build_fails``: a
factory that raises while the agent is built. ``healthy``: the review agent v1 as an AgentJob, with its model
connection registered at environment level (as the Flink Agents quickstart does), its Mem0 memory bound as the
review job binds it, and a JSON deserializer that needs ``customer``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from flink_agents.api.decorators import tool
from flink_agents.api.resource import ResourceType

from airflow_flink_replay.flink.agent_job import AgentJob, EnvResource
from examples.review_agent.common import tools as support_tools
from examples.review_agent.common import triage
from examples.review_agent.common.job import REVIEW_MEMORY
from examples.review_agent.v1.agent import ReviewAgent

#: The line ``agent_factory_that_raises`` raises on (the tests look for it in the task's failure).
BUILD_ERROR = "the agent's settings are incomplete: REVIEW_THRESHOLD is not set"


class PlainSubclass(ReviewAgent):
    """A plain subclass: inherits every action and resource, none of which reach the plan."""


class RedeclaredSubclass(ReviewAgent):
    """The fix: each inherited declaration re-declared in the subclass body."""

    review_llm = ReviewAgent.__dict__["review_llm"]
    review_model = ReviewAgent.__dict__["review_model"]
    notify_support = ReviewAgent.__dict__["notify_support"]
    process_input = ReviewAgent.__dict__["process_input"]
    process_response = ReviewAgent.__dict__["process_response"]


class WithoutTool(ReviewAgent):
    """Declares the actions and the model, but not production's ``notify_support`` tool."""

    review_llm = ReviewAgent.__dict__["review_llm"]
    review_model = ReviewAgent.__dict__["review_model"]
    process_input = ReviewAgent.__dict__["process_input"]
    process_response = ReviewAgent.__dict__["process_response"]


class ChangedTool(ReviewAgent):
    """A candidate whose only change is its tool's body: another answer (the agent check finds it changed)."""

    review_llm = ReviewAgent.__dict__["review_llm"]
    review_model = ReviewAgent.__dict__["review_model"]
    process_input = ReviewAgent.__dict__["process_input"]
    process_response = ReviewAgent.__dict__["process_response"]

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
        return f"ticket for {customer}: {reason} ({review_id})"


class CommentedTool(ReviewAgent):
    """A candidate whose tool is production's code with comments and another docstring: not a change."""

    review_llm = ReviewAgent.__dict__["review_llm"]
    review_model = ReviewAgent.__dict__["review_model"]
    process_input = ReviewAgent.__dict__["process_input"]
    process_response = ReviewAgent.__dict__["process_response"]

    @tool
    @staticmethod
    def notify_support(review_id: str, customer: str, reason: str) -> str:
        """Open a support ticket when a review is bad (reworded: the model reads this, the tool's code is the same).

        Parameters
        ----------
        review_id : str
            Id of the review.
        customer : str
            The customer who wrote it.
        reason : str
            Why support should look at it.
        """
        # the support service answers with the ticket id

        return support_tools.notify_support(review_id=review_id, customer=customer, reason=reason)


def customer_of(review: dict[str, Any]) -> str:
    """The review's customer (a KeyError for a record without one)."""
    return str(review["customer"])


def review_of(raw: bytes) -> dict[str, Any]:
    """The captured record as the agent's input: a JSON object."""
    return dict(json.loads(raw))


def agent_factory_that_raises() -> ReviewAgent:
    """Raises while building the agent, as a misconfigured factory does."""
    raise RuntimeError(BUILD_ERROR)


def _job(agent: Any) -> AgentJob:
    return AgentJob(
        agent=agent,
        key_selector=customer_of,
        deserializer=review_of,
        env_resources=[EnvResource("env_review_llm", ResourceType.CHAT_MODEL_CONNECTION, triage.review_llm())],
        memory=REVIEW_MEMORY,  # the actions ask for it (the agent check's sample run is skipped for it)
    )


healthy = _job(ReviewAgent)
plain_subclass = _job(PlainSubclass)
redeclared_subclass = _job(RedeclaredSubclass)
lost_tool = _job(WithoutTool)
changed_tool = _job(ChangedTool)
commented_tool = _job(CommentedTool)
build_fails = _job(agent_factory_that_raises)


def review_number(raw: bytes) -> int:
    """A deserializer for another input: a number (the review agent's captured records are JSON objects)."""
    return int(raw)


#: Production's definition but for its deserializer, which cannot read the captured records.
wrong_input = dataclasses.replace(healthy, deserializer=review_number)

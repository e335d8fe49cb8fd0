"""A candidate whose agent crashes on every review: the replay job FAILS inside Flink.

Used by the failure drills to show that a failing candidate fails the gate with Flink's own cause while
production is still resumed and the replay's topics and memory forks are cleaned up.
"""

from __future__ import annotations

from typing import Any

from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.runner_context import RunnerContext

from examples.review_agent.common.memory import DEFAULT_MEM0_CONFIG
from examples.review_agent.drills import CRASH_MESSAGE
from examples.review_agent.v1.agent import ReviewAgent


class CrashingReviewAgent(ReviewAgent):
    """v1 with an input action that raises.

    Flink Agents builds the plan from the class's own ``__dict__``: what the drill keeps of v1 is re-declared,
    so its plan has v1's resources and the agent check lets it through to crash inside Flink.
    """

    review_llm = ReviewAgent.__dict__["review_llm"]
    review_model = ReviewAgent.__dict__["review_model"]
    notify_support = ReviewAgent.__dict__["notify_support"]
    process_response = ReviewAgent.__dict__["process_response"]

    @action(InputEvent)
    @staticmethod
    def process_input(event: InputEvent, ctx: RunnerContext) -> None:
        """Fail the run."""
        raise RuntimeError(CRASH_MESSAGE)


def build_agent(mem0_config: dict[str, Any] | None = None, **_options: Any) -> CrashingReviewAgent:
    """Agent factory (``"examples.review_agent.drills.agent:build_agent"``)."""
    agent = CrashingReviewAgent()
    agent.add_resource(
        "review_memory",
        ResourceType.VECTOR_STORE,
        ResourceDescriptor(
            clazz="examples.review_agent.common.memory.ReviewMemory",
            mem0_config=mem0_config or DEFAULT_MEM0_CONFIG,
        ),
    )
    return agent

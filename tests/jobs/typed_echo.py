"""A Flink Agents 0.2.0 agent that reports what it receives: the contract test's agent (job definitions).

Input: a review as JSON bytes, deserialised to :class:`EchoInput` (a pydantic model with an ``int`` id), keyed
by that ``int`` id (``key_type`` left at the default: pickled, as Flink Agents keys). Per record the agent

- counts the records of its key in short-term memory (keyed Flink state: restored in a replay);
- looks the review up in ``echo_store``, a resource registered on the *environment* (``env_resources``), not
  on the agent — in a replay the policy proxy mediates and audits it like an agent-level resource;
- emits :class:`EchoOutput`: the input's type name, the type name of the key field as the agent sees it, the
  count and the store's answer.

Run as ``--agent-job tests.jobs.typed_echo:job`` of ``airflow_flink_replay/flink/production_job.py``.
Resources are named by this module's own ``__name__`` so the content-hashed copy the jobs import also serves
them.
"""

from __future__ import annotations

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import Resource, ResourceDescriptor, ResourceType
from flink_agents.api.runner_context import RunnerContext
from pydantic import BaseModel

from airflow_flink_replay.flink.agent_job import AgentJob, EnvResource


class EchoInput(BaseModel):
    """The agent's input type."""

    id: int
    review: str


class EchoOutput(BaseModel):
    """What the agent saw."""

    id: int
    input_type: str
    key_type: str
    count: int
    store: str


class EchoStore(Resource):
    """An environment-level resource (declared a vector store: ``query`` is a read for the replay policy)."""

    @classmethod
    def resource_type(cls) -> ResourceType:
        """A vector store."""
        return ResourceType.VECTOR_STORE

    def query(self, text: str) -> str:
        """A deterministic answer."""
        return f"seen {len(text)} chars"


class TypedEchoAgent(Agent):
    """Echo the input's type, count per key, ask the environment-level store."""

    @action(InputEvent)
    @staticmethod
    def echo(event: InputEvent, ctx: RunnerContext) -> None:
        """One output per input."""
        value = event.input
        stm = ctx.short_term_memory
        count = int(stm.get("count") or 0) + 1
        stm.set("count", count)
        store = ctx.get_resource("echo_store", ResourceType.VECTOR_STORE)
        ctx.send_event(
            OutputEvent(
                output=EchoOutput(
                    id=value.id,
                    input_type=type(value).__name__,
                    key_type=type(value.id).__name__,
                    count=count,
                    store=store.query(text=value.review),
                )
            )
        )


def review_id(review: EchoInput) -> int:
    """The key selector: the review's ``int`` id."""
    return review.id


job = AgentJob(
    agent=TypedEchoAgent,
    key_selector=review_id,
    deserializer=EchoInput.model_validate_json,
    env_resources=(
        EnvResource("echo_store", ResourceType.VECTOR_STORE, ResourceDescriptor(clazz=f"{__name__}.EchoStore")),
    ),
)

"""A Flink Agents 0.2.0 agent whose runs stay in flight: every event waits on a gated chat model.

Input: ``{"id", "customer", "gate"?}`` (keyed by ``customer`` in the production pipeline). Per event the
``ask`` action sends a ``ChatRequestEvent``; Flink Agents' built-in chat action calls the model with
``durable_execute_async`` (``chat.async`` is on by default), so the call runs in the agent's async thread
pool while the operator's mailbox stays free; the ``answer`` action turns the reply into the output
``{"id", "customer", "started_at_ms", "answered_at_ms", "gate_open"}``. While a run is in flight, later events
of the same key wait in the operator's pending-input state.

The model call does not answer before the file ``gate`` exists (the TaskManager runs on the test's host), at
most :data:`GATE_TIMEOUT_S`; ``gate_open`` says whether it did (False: it gave up waiting). A test thereby
keeps runs in flight for as long as it needs, whatever the time Airflow takes to start a task.

Used by the drain test: stopped with ``--drain`` while runs are in flight, every event must still get its
output before the job finishes (``ActionExecutionOperator.endInput`` waits until no key is in progress).
Run as ``--agent-factory tests.jobs.gated_agent:build_agent`` of ``airflow_flink_replay/flink/production_job.py``.
Resources are referenced by this module's own ``__name__`` so the content-hashed copy the production job
imports (see ``airflow_flink_replay.flink.agent_build``) also serves the chat model: a changed file never
meets a stale copy in the TaskManager's shared interpreter.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.decorators import action, chat_model_connection, chat_model_setup
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceDescriptor
from flink_agents.api.runner_context import RunnerContext

#: The longest a model call waits for its gate file.
GATE_TIMEOUT_S = 180


class GatedChatModel(BaseChatModelConnection):
    """A chat model connection that answers once the event's ``gate`` file exists."""

    def chat(self, messages: Sequence[ChatMessage], tools: list | None = None, **kwargs: Any) -> ChatMessage:
        """Wait for the gate (if any), then answer with the call's start and end (epoch ms)."""
        item = json.loads(messages[-1].content)
        gate = item.get("gate")
        started = time.time()
        while gate and not os.path.exists(gate) and time.time() - started < GATE_TIMEOUT_S:
            time.sleep(0.05)
        reply = {
            "started_at_ms": int(started * 1000),
            "answered_at_ms": int(time.time() * 1000),
            "gate_open": not gate or os.path.exists(gate),
        }
        return ChatMessage(role=MessageRole.ASSISTANT, content=json.dumps(reply))


class GatedChatModelSetup(BaseChatModelSetup):
    """The setup of :class:`GatedChatModel` (no generation parameters)."""

    @property
    def model_kwargs(self) -> dict[str, Any]:
        """No generation parameters."""
        return {}


class GatedAgent(Agent):
    """Asks the gated model once per event and emits its timing (see the module docstring)."""

    @chat_model_connection
    @staticmethod
    def gated_llm() -> ResourceDescriptor:
        """The gated model connection."""
        return ResourceDescriptor(clazz=f"{__name__}.GatedChatModel")

    @chat_model_setup
    @staticmethod
    def gated_model() -> ResourceDescriptor:
        """The chat model setup on :meth:`gated_llm`."""
        return ResourceDescriptor(clazz=f"{__name__}.GatedChatModelSetup", connection="gated_llm")

    @action(InputEvent)
    @staticmethod
    def ask(event: InputEvent, ctx: RunnerContext) -> None:
        """Remember the event and ask the model (the built-in chat action awaits it asynchronously)."""
        raw = event.input
        item = json.loads(raw) if isinstance(raw, str | bytes) else dict(raw)
        ctx.short_term_memory.set("item", json.dumps(item))
        ctx.send_event(
            ChatRequestEvent(
                model="gated_model", messages=[ChatMessage(role=MessageRole.USER, content=json.dumps(item))]
            )
        )

    @action(ChatResponseEvent)
    @staticmethod
    def answer(event: ChatResponseEvent, ctx: RunnerContext) -> None:
        """Emit the event's id with the model call's timing."""
        item = json.loads(ctx.short_term_memory.get("item"))
        reply = json.loads(event.response.content)
        ctx.send_event(OutputEvent(output={"id": item["id"], "customer": item["customer"], **reply}))


def build_agent(**_options: Any) -> GatedAgent:
    """Agent factory (``"tests.jobs.gated_agent:build_agent"``); ignores ``mem0_config`` and other options."""
    return GatedAgent()

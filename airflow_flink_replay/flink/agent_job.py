"""The job definition: one typed object that production and every replay apply to their source.

A user writes an :class:`AgentJob` once, in their own package, and names it ``"package.module:attr"`` in the
``ReplaySpec``. Production's own ``main()`` applies it to *its* source stream (the capture tee and the
identity pin are added, nothing the agent sees changes); the replay job applies the very same definition to
the bounded replay source. What the definition carries:

- ``agent``: a Flink Agents ``Agent`` instance or a zero-argument callable returning one;
- ``key_selector``: input object → the agent's key (typed: any hashable, not stringified);
- ``deserializer``: the raw input bytes of a record → the agent's input (e.g. a pydantic model); the capture
  topic holds those bytes unchanged, so a replay deserialises exactly what production did;
- ``output_serializer``: the agent's output → a JSON object (what the comparison reads);
- ``env_resources``: resources registered on the ``AgentsExecutionEnvironment`` (the Flink Agents quickstart
  registers its chat model connection there), mediated by the replay policy like the agent's own;
- ``config``: Flink Agents configuration options of the agent operator;
- ``event_time`` / ``watermark`` / ``idleness_ms``: production's event time and watermark strategy;
- ``memory``: optional long-term memory (Mem0) resource the job adds with the store config of the run.

This module imports neither Airflow nor (at import time) PyFlink or Flink Agents: the Airflow side may
read it. Loading a definition (:func:`load_agent_job`) imports the user's module, which needs Flink Agents.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_flink_replay.core.manifest import EventTime

__all__ = ["AgentJob", "EnvResource", "MemoryBinding", "json_object", "load_agent_job", "to_json_object"]


def json_object(raw: bytes) -> Any:
    """Default deserializer: the record's value parsed as JSON (UTF-8)."""
    return json.loads(raw)


def to_json_object(output: Any) -> Mapping[str, Any]:
    """Default output serializer: a pydantic model's JSON dump, a mapping as is, anything else under ``output``."""
    if hasattr(output, "model_dump"):
        output = output.model_dump(mode="json")
    if isinstance(output, Mapping):
        return dict(output)
    return {"output": output}


@dataclass(frozen=True)
class EnvResource:
    """A resource registered on the agents environment rather than on the agent.

    ``type`` is a ``flink_agents.api.resource.ResourceType`` and ``descriptor`` a ``ResourceDescriptor``
    (typed ``Any`` here so that this module imports without Flink Agents).
    """

    name: str
    type: Any
    descriptor: Any


@dataclass(frozen=True)
class MemoryBinding:
    """Long-term memory as a resource of the agent, added with the run's Mem0 store configuration.

    The job adds ``ResourceDescriptor(clazz=clazz, mem0_config=<the run's store config>)`` under
    ``resource_name``: production's store config in production, the replay's in a replay (the namespace
    comes from the job identifier, i.e. the fork).
    """

    resource_name: str
    clazz: str
    resource_type: str = "vector_store"


@dataclass(frozen=True)
class AgentJob:
    """Everything production and a replay need to run one Flink Agents agent over a stream of records."""

    agent: Any
    key_selector: Callable[[Any], Hashable]
    deserializer: Callable[[bytes], Any] = json_object
    output_serializer: Callable[[Any], Mapping[str, Any]] = to_json_object
    env_resources: Sequence[EnvResource] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    event_time: EventTime = field(default_factory=EventTime)
    watermark: str = "monotonous"
    idleness_ms: int | None = None
    memory: MemoryBinding | None = None

    def build_agent(self) -> Any:
        """The agent: ``agent`` itself, or what the zero-argument callable returns."""
        agent = self.agent
        if isinstance(agent, type) or not _is_agent(agent):
            agent = agent()
        return agent


def _is_agent(obj: Any) -> bool:
    try:
        from flink_agents.api.agents.agent import Agent
    except ImportError:  # pragma: no cover - the Airflow side has no Flink Agents
        return not callable(obj)
    return isinstance(obj, Agent)


def load_agent_job(ref: str) -> AgentJob:
    """Resolve ``"package.module:attr"`` to an :class:`AgentJob` (the attribute, or what its zero-argument
    call returns). Raises ``ValueError`` naming the reference and the fix."""
    if ":" not in ref:
        raise ValueError(f'job definition {ref!r} must look like "package.module:attribute"')
    module_name, attr = ref.split(":", 1)
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"job definition {ref!r}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, AgentJob) and callable(obj):
        obj = obj()
    if not isinstance(obj, AgentJob):
        raise ValueError(
            f"job definition {ref!r} is a {type(obj).__name__}, not an AgentJob: define "
            "`job = AgentJob(agent=..., key_selector=...)` (airflow_flink_replay.flink.agent_job) and name it"
        )
    return obj

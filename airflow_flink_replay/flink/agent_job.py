"""The job definition: one typed object that production and every replay apply to their source.

A user writes an :class:`AgentJob` once, in their own package, and names it ``"package.module:attr"`` in the
``ReplaySpec`` (``production.agent_job``, ``candidate_agent_job``). Production's own ``main()`` applies it to
*its* source stream with :func:`airflow_flink_replay.flink.pipeline.apply_agent_job` (the capture tee and the
identity pin are added, nothing the agent sees changes); the replay job applies the very same definition to
the bounded replay source. What the definition carries:

- ``agent``: a Flink Agents ``Agent`` instance or a zero-argument callable returning one (a class is such a
  callable: ``agent=ReviewAnalysisAgent``);
- ``key_selector``: input object → the agent's key (typed: any hashable, never stringified);
- ``key_type``: how Flink serialises that key. ``None`` (the default) is what Flink Agents itself does for
  ``agents_env.from_datastream(input, key_selector=...)``: PyFlink's ``key_by`` without a key type, i.e. the
  key pickled (``Types.PICKLED_BYTE_ARRAY()``), so an ``int`` key stays an ``int``. ``"string"``, ``"long"``,
  ``"int"`` or a PyFlink ``TypeInformation`` key with that Flink type instead — it must match what production
  was keyed with, since the key serializer is part of the agent's savepoint state;
- ``deserializer``: the raw input bytes of a record → the agent's input (e.g. a pydantic model); the capture
  topic holds those bytes unchanged, so a replay deserialises exactly what production did;
- ``output_serializer``: the agent's output → a JSON object (what the comparison reads);
- ``env_resources``: resources registered on the ``AgentsExecutionEnvironment`` (the Flink Agents quickstart
  registers its chat model connection there). Flink Agents 0.2.0 merges them into the agent's resources in
  ``RemoteAgentBuilder.apply`` (``agent.resources[type] = env | agent``), so they become resource providers
  of the ``AgentPlan`` like the agent's own and the replay policy mediates them the same way;
- ``config``: Flink Agents configuration options of the agent operator (keys as text or ``ConfigOption``);
- ``event_time`` / ``watermark`` / ``idleness_ms``: production's event time and watermark strategy;
- ``memory``: optional long-term memory (Mem0) resource the job adds with the store config of the run;
- ``bad_records``: ``"drop"`` (logged) or ``"fail"`` for a record the deserializer or key selector rejects.

The older factory form (``factory(mem0_config=..., **agent_options)`` + a JSON ``key_field``) is adapted by
:meth:`AgentJob.from_factory`.

This module imports neither Airflow nor (at import time) PyFlink or Flink Agents: the Airflow side may
read it. Loading a definition (:func:`load_agent_job`) imports the user's module, which needs Flink Agents.
The callables of a definition (``deserializer``, ``key_selector``, ``output_serializer``) run inside Flink's
Python workers: they must be picklable (module-level functions, or instances of module-level classes).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_flink_replay.core.manifest import EventTime

__all__ = [
    "AgentJob",
    "EnvResource",
    "FieldKey",
    "MemoryBinding",
    "json_object",
    "load_agent_job",
    "to_json_object",
    "utf8_text",
]

_log = logging.getLogger("airflow_flink_replay")


def json_object(raw: bytes) -> Any:
    """Default deserializer: the record's value parsed as JSON (UTF-8)."""
    return json.loads(raw)


def utf8_text(raw: bytes) -> str:
    """Deserializer giving the agent the record's value as text (UTF-8), as received."""
    return raw.decode("utf-8")


def to_json_object(output: Any) -> Mapping[str, Any]:
    """Default output serializer: a pydantic model's JSON dump, a mapping as is, anything else under ``output``.

    A JSON string that holds an object is parsed (an agent emitting ``json.dumps({...})``).
    """
    if hasattr(output, "model_dump"):
        output = output.model_dump(mode="json")
    if isinstance(output, str | bytes):
        try:
            parsed = json.loads(output)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    if isinstance(output, Mapping):
        return dict(output)
    return {"output": output}


class FieldKey:
    """Key selector: one field of a mapping (``input[name]``) or attribute of an object (``input.name``).

    ``as_text`` turns the key into its text (the older factory form keyed by the text of a JSON field).
    """

    def __init__(self, name: str, *, as_text: bool = False) -> None:
        self.name = name
        self.as_text = as_text

    def __call__(self, value: Any) -> Hashable:
        key = value[self.name] if isinstance(value, Mapping) else getattr(value, self.name)
        return str(key) if self.as_text else key

    def __repr__(self) -> str:
        return f"FieldKey({self.name!r}{', as_text=True' if self.as_text else ''})"


@dataclass(frozen=True)
class EnvResource:
    """A resource registered on the agents environment rather than on the agent.

    ``type`` is a ``flink_agents.api.resource.ResourceType`` (or its value, e.g. ``"chat_model_connection"``)
    and ``descriptor`` a ``ResourceDescriptor`` or a serializable resource (typed ``Any`` here so that this
    module imports without Flink Agents).
    """

    name: str
    type: Any
    descriptor: Any

    def resource_type(self) -> Any:
        """``type`` as a Flink Agents ``ResourceType``."""
        from flink_agents.api.resource import ResourceType

        return self.type if isinstance(self.type, ResourceType) else ResourceType(str(self.type))


@dataclass(frozen=True)
class MemoryBinding:
    """Long-term memory as a resource of the agent, added with the run's Mem0 store configuration.

    The job adds ``ResourceDescriptor(clazz=clazz, mem0_config=<the run's store config>, **arguments)`` under
    ``resource_name``: production's store config in production (``--mem0-config``), the replay's
    (``spec.mem0_config``) in a replay; the namespace comes from the job identifier, i.e. the fork.
    """

    resource_name: str
    clazz: str
    resource_type: str = "vector_store"
    arguments: Mapping[str, Any] = field(default_factory=dict)


KeyTypeName = Literal["string", "long", "int"]


@dataclass(frozen=True)
class AgentJob:
    """Everything production and a replay need to run one Flink Agents agent over a stream of records."""

    agent: Any
    key_selector: Callable[[Any], Hashable]
    deserializer: Callable[[bytes], Any] = json_object
    output_serializer: Callable[[Any], Mapping[str, Any]] = to_json_object
    env_resources: Sequence[EnvResource] = ()
    config: Mapping[Any, Any] = field(default_factory=dict)
    event_time: EventTime = field(default_factory=EventTime)
    watermark: str = "monotonous"
    idleness_ms: int | None = None
    memory: MemoryBinding | None = None
    key_type: KeyTypeName | Any | None = None
    bad_records: Literal["drop", "fail"] = "drop"

    def __post_init__(self) -> None:
        if not callable(self.key_selector):
            raise ValueError("AgentJob.key_selector must be a callable: input object -> key (e.g. lambda r: r.id)")
        if not callable(self.deserializer) or not callable(self.output_serializer):
            raise ValueError("AgentJob.deserializer and AgentJob.output_serializer must be callables")
        if self.bad_records not in ("drop", "fail"):
            raise ValueError(f"AgentJob.bad_records {self.bad_records!r} must be 'drop' or 'fail'")
        if isinstance(self.key_type, str) and self.key_type not in ("string", "long", "int"):
            raise ValueError(
                f"AgentJob.key_type {self.key_type!r} must be None (pickled, as Flink Agents keys), 'string', "
                "'long', 'int' or a PyFlink TypeInformation"
            )
        names = [r.name for r in self.env_resources]
        if len(names) != len(set(names)):
            raise ValueError(f"AgentJob.env_resources has a name twice: {names}")

    def build_agent(self) -> Any:
        """A fresh agent per call: a copy of ``agent`` when it is an instance, else what the zero-argument
        callable (or class) returns.

        Fresh because building a plan changes the agent (the memory resource is added, the env-level resources
        merged in): the job-side check builds production's and the candidate's plans in one process, and an
        A/A run names one definition for both.
        """
        agent = self.agent
        if isinstance(agent, type) or not _is_agent(agent):
            agent = agent()
        else:
            try:
                agent = copy.deepcopy(agent)
            except Exception:  # an agent holding something uncopyable: use it as is (one build per process)
                _log.warning("AgentJob: cannot copy the agent %r; building from the instance itself", agent)
        if not _is_agent(agent):
            raise TypeError(
                f"AgentJob.agent gave a {type(agent).__name__}, not a Flink Agents Agent. Fix: agent= an Agent "
                "instance, an Agent class, or a zero-argument function returning one"
            )
        return agent

    def agent_with_memory(self, mem0_config: Mapping[str, Any] | None = None) -> Any:
        """:meth:`build_agent` plus the :attr:`memory` resource built with ``mem0_config`` (the run's store)."""
        agent = self.build_agent()
        if self.memory is not None:
            from flink_agents.api.resource import ResourceDescriptor, ResourceType

            agent.add_resource(
                self.memory.resource_name,
                ResourceType(self.memory.resource_type),
                ResourceDescriptor(
                    clazz=self.memory.clazz,
                    mem0_config=dict(mem0_config) if mem0_config else None,
                    **dict(self.memory.arguments),
                ),
            )
        return agent

    def register_env_resources(self, agents_env: Any) -> None:
        """``agents_env.add_resource`` each of :attr:`env_resources`."""
        for res in self.env_resources:
            agents_env.add_resource(res.name, res.resource_type(), res.descriptor)

    def apply_config(self, agent_config: Any) -> None:
        """Set :attr:`config` on a Flink Agents configuration (``agents_env.get_config()``)."""
        set_config(agent_config, self.config)

    def build_plan(self, mem0_config: Mapping[str, Any] | None = None, config: Mapping[Any, Any] | None = None) -> Any:
        """The ``AgentPlan`` Flink Agents compiles for this job, without a Flink environment.

        Built as :func:`~airflow_flink_replay.flink.pipeline.apply_agent_job` builds it: the agent with its
        memory, the env resources merged in exactly as ``RemoteAgentBuilder.apply`` merges them (the agent's
        own win on a name clash), :attr:`config` and then ``config`` (the runtime's entries) applied.
        """
        from flink_agents.plan.agent_plan import AgentPlan
        from flink_agents.plan.configuration import AgentConfiguration

        agent = self.agent_with_memory(mem0_config)
        conf = AgentConfiguration()
        set_config(conf, self.config)
        set_config(conf, config or {})
        env_by_type: dict[Any, dict[str, Any]] = {}
        for res in self.env_resources:
            env_by_type.setdefault(res.resource_type(), {})[res.name] = res.descriptor
        for rtype, named in env_by_type.items():
            agent.resources[rtype] = named | agent.resources[rtype]
        return AgentPlan.from_agent(agent, conf)

    def flink_key_type(self) -> Any:
        """The PyFlink ``TypeInformation`` of the key (see :attr:`key_type`)."""
        return flink_key_type_of(self.key_type)

    @classmethod
    def from_factory(
        cls,
        factory: Callable[..., Any],
        *,
        key_field: str,
        mem0_config: Mapping[str, Any] | None = None,
        agent_options: Mapping[str, Any] | None = None,
        ref: str = "",
        field_name: str = "agent_factory",
    ) -> AgentJob:
        """The older factory form as a job definition.

        The agent is ``factory(mem0_config=mem0_config, **agent_options)``; the input is the record's JSON
        text as received (UTF-8, unchanged), keyed by the text of its ``key_field`` (a Flink ``STRING`` key,
        as before). Raises ``ValueError`` naming ``field_name`` when ``factory`` cannot be called that way
        (e.g. a plain Agent class, which takes no ``mem0_config``).
        """
        check_factory(factory, ref=ref, field_name=field_name)
        call = _FactoryCall(factory, dict(mem0_config) if mem0_config else None, dict(agent_options or {}))
        return cls(
            agent=call,
            key_selector=_JsonFieldText(key_field),
            deserializer=utf8_text,
            output_serializer=to_json_object,
            key_type="string",
        )


def flink_key_type_of(key_type: KeyTypeName | Any | None) -> Any:
    """A key type as PyFlink ``TypeInformation``: None pickled (as Flink Agents keys), a name its Flink type,
    a ``TypeInformation`` itself."""
    from pyflink.common import Types

    if key_type is None:
        return Types.PICKLED_BYTE_ARRAY()
    if isinstance(key_type, str):
        return {"string": Types.STRING, "long": Types.LONG, "int": Types.INT}[key_type]()
    return key_type


class _FactoryCall:
    """Zero-argument call of an agent factory with the run's ``mem0_config`` and the agent options."""

    def __init__(self, factory: Callable[..., Any], mem0_config: dict[str, Any] | None, options: dict[str, Any]):
        self.factory = factory
        self.mem0_config = mem0_config
        self.options = options

    def __call__(self) -> Any:
        return self.factory(mem0_config=self.mem0_config, **self.options)


class _JsonFieldText:
    """Key of the factory form: the text of a field of the JSON text the agent receives."""

    def __init__(self, key_field: str) -> None:
        self.key_field = key_field

    def __call__(self, value: Any) -> str:
        doc = json.loads(value) if isinstance(value, str | bytes) else value
        return str(doc[self.key_field])


def audit_key_source(job: AgentJob, key_field: str = "") -> tuple[str, Callable[[Any], Hashable] | None]:
    """How the audit key hook (:mod:`~airflow_flink_replay.flink.audit_context`) learns each input's key text,
    as ``(key_field, key_selector)``: a field of the input when the key selector is one (``FieldKey``, the
    factory form's JSON field: no code of this package needs shipping), else the job's key selector itself
    (pickled into the plan, as Flink pickles it for the job anyway); ``key_field`` is the fallback field."""
    selector = job.key_selector
    if isinstance(selector, FieldKey):
        return selector.name, None
    if isinstance(selector, _JsonFieldText):
        return selector.key_field, None
    return key_field, selector


def check_factory(factory: Any, *, ref: str = "", field_name: str = "agent_factory") -> None:
    """Refuse, with the field and the fix, an agent factory that cannot take ``mem0_config=``."""
    where = f"{field_name} {ref!r}" if ref else field_name
    if isinstance(factory, type) and _is_agent_class(factory):
        raise ValueError(
            f"{where} names the Agent class {factory.__name__}, not an agent factory: the factory form calls "
            "factory(mem0_config=..., **agent_options), which an Agent class does not accept. Fix: write a job "
            f"definition `job = AgentJob(agent={factory.__name__}, key_selector=...)` "
            "(airflow_flink_replay.flink.agent_job) and name it in production.agent_job / candidate_agent_job "
            "instead of agent_factory, or name a function `def build_agent(mem0_config=None, **options)` "
            "returning the agent"
        )
    if not callable(factory):
        raise ValueError(
            f"{where} is a {type(factory).__name__}, not callable. Fix: name a function returning the agent"
        )
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # builtins and C callables: let the call decide
        return
    if not any(p.kind is p.VAR_KEYWORD or p.name == "mem0_config" for p in params):
        raise ValueError(
            f"{where} ({getattr(factory, '__qualname__', factory)!r}) takes no mem0_config argument: the factory "
            "form calls factory(mem0_config=..., **agent_options). Fix: give it a `mem0_config=None` parameter, "
            "or write a job definition (AgentJob) and name it in production.agent_job / candidate_agent_job"
        )


def set_config(agent_config: Any, entries: Mapping[Any, Any]) -> None:
    """Set ``entries`` (keys as text or Flink Agents ``ConfigOption``) on a Flink Agents configuration."""
    for key, value in entries.items():
        if hasattr(key, "get_key"):  # a ConfigOption
            agent_config.set(key, value)
        elif isinstance(value, bool):
            agent_config.set_bool(key, value)
        elif isinstance(value, int):
            agent_config.set_int(key, value)
        elif isinstance(value, float):
            agent_config.set_float(key, value)
        else:
            agent_config.set_str(key, str(value))


def _agent_base() -> type | None:
    try:
        from flink_agents.api.agents.agent import Agent
    except ImportError:  # the Airflow side has no Flink Agents
        return None
    return Agent


def _is_agent(obj: Any) -> bool:
    """An Agent instance (without Flink Agents installed: anything not callable, i.e. not a factory)."""
    base = _agent_base()
    return not callable(obj) if base is None else isinstance(obj, base)


def _is_agent_class(cls: type) -> bool:
    base = _agent_base()
    if base is None:
        return any(b.__name__ == "Agent" for b in cls.__mro__)
    return issubclass(cls, base)


def is_job_definition(obj: Any) -> bool:
    """An :class:`AgentJob`, or an ``AgentPipeline`` (which says so: this module does not import it)."""
    return isinstance(obj, AgentJob) or getattr(type(obj), "is_pipeline", False) is True


def as_agent_job(obj: Any, ref: str) -> Any:
    """``obj`` (an attribute named by ``ref``) as a job definition — an :class:`AgentJob` or an
    :class:`~airflow_flink_replay.flink.agent_pipeline.AgentPipeline`: itself, or what its zero-argument call
    returns. Raises ``ValueError`` naming the reference and the fix."""
    if not is_job_definition(obj) and callable(obj) and not isinstance(obj, type):
        try:
            obj = obj()
        except TypeError as err:
            raise ValueError(
                f"job definition {ref!r} is a function that cannot be called without arguments ({err}). Fix: "
                "name the AgentJob (or AgentPipeline) itself, or a zero-argument function returning it"
            ) from None
    if not is_job_definition(obj):
        if isinstance(obj, type) and _is_agent_class(obj):
            hint = f" (an Agent class: wrap it, `job = AgentJob(agent={obj.__name__}, key_selector=...)`)"
        elif _agent_base() is not None and _is_agent(obj):
            hint = (
                " (it returned an agent: this looks like an agent factory; name it as agent_factory / "
                "candidate_agent_factory, or wrap the agent in an AgentJob)"
            )
        else:
            hint = ""
        raise ValueError(
            f"job definition {ref!r} is a {type(obj).__name__}, not an AgentJob or AgentPipeline{hint}. Fix: define "
            "`job = AgentJob(agent=..., key_selector=...)` (airflow_flink_replay.flink.agent_job) and name it"
        )
    return obj


def resolve_attr(module: Any, attr: str, ref: str) -> Any:
    """``module.attr`` (dotted) or ``ValueError`` naming ``ref``."""
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{ref!r}: {module.__name__} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def load_agent_job(ref: str) -> Any:
    """Resolve ``"package.module:attr"`` to a job definition, an :class:`AgentJob` or an ``AgentPipeline`` (the
    attribute, or what its zero-argument call returns), importing the module by its own name. Raises
    ``ValueError`` naming the reference and the fix.
    (The replay job imports it from a content-hashed copy instead:
    :func:`airflow_flink_replay.flink.agent_build.load_job_definition`.)"""
    if ":" not in ref:
        raise ValueError(f'job definition {ref!r} must look like "package.module:attribute"')
    module_name, attr = ref.split(":", 1)
    module = importlib.import_module(module_name)
    return as_agent_job(resolve_attr(module, attr, f"job definition {ref}"), ref)

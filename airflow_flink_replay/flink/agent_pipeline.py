"""Pipelines: several agents, and plain Flink steps between them, in one job definition.

A Flink Agents job is often more than one agent between a source and a sink: enrichment or filtering before an
agent, a keyed window aggregating its results, a second agent on each aggregate (Flink Agents' own quickstart
``workflow_multiple_agent_example``). An :class:`AgentPipeline` names the stages of such a job in order; it is
a job definition like :class:`~airflow_flink_replay.flink.agent_job.AgentJob` (which is the one-agent case of
it) — named in ``production.agent_job`` / ``candidate_agent_job`` and applied by production's ``main()`` and
by every replay with :func:`~airflow_flink_replay.flink.pipeline.apply_agent_job`::

    pipeline = AgentPipeline(
        stages=[
            AgentStage("analysis", AgentJob(agent=ReviewAnalysisAgent, key_selector=product_id)),
            WindowStage("per-product", key_selector=product_id_of_result,
                        assigner=TumblingEventTimeWindows.of(Time.hours(6)), function=Aggregate(),
                        uid="afr-window-per-product"),
            AgentStage("suggestion", AgentJob(agent=ProductSuggestionAgent, key_selector=product_id_of_summary),
                       uid="afr-agent-suggestion"),
        ],
        deserializer=ProductReview.model_validate_json,
        env_resources=[EnvResource("ollama_server", ResourceType.CHAT_MODEL_CONNECTION, descriptor)],
        event_time=EventTime(source="field", field="$.ts", unit="s"),
        compare_stages=["analysis"],
    )

The stages:

- :class:`AgentStage`: an agent with its own key selector, key type, memory binding and output serializer (an
  ``AgentJob``; its ``deserializer``, event time and ``bad_records`` are the pipeline's, not its own);
- :class:`WindowStage`: a keyed window with the user's window function (a ``ProcessWindowFunction``);
- :class:`MapStep`: a stateless ``map`` / ``filter`` / ``flat_map`` with the user's function.

**Every stateful operator is pinned** so production's savepoint restores into the replay: the first agent
stage takes the agent pin (production's ``--agent-uid`` / the spec's ``production.agent_uid``, as the one agent
of an ``AgentJob`` does), every other agent and every window its stage's ``uid`` (default
``afr-<kind>-<name>``), and all of them the job's max parallelism. Change a stage's name and you change its
default uid: give it an explicit ``uid`` first. The identity preflight refuses a replay whose plan lacks a
stateful operator production has; the agent check names stages a candidate drops or re-keys.

**Time is replayable** only in event time: a processing-time window groups records by when they arrive, which
differs in every replay (and a bounded replay may end before it fires). The agent check warns about
processing-time windows. An event-time window open at the savepoint carries its partial contents in the
state; the replay restores it and fires it when its bounded input ends (Flink's final watermark). Quiesce such
a production with ``quiesce_mode: stop``: ``drain`` fires every open window before the savepoint.

The outputs of the last stage are what production's sink receives and what the comparison compares. Name
intermediate stages in ``compare_stages`` and the replays write their outputs too (marked with their stage),
compared as a field group of their own: a changed first agent is seen even where a window hides it.

Like :mod:`~airflow_flink_replay.flink.agent_job`, this module imports neither Airflow nor (at import time)
PyFlink or Flink Agents. The callables and window functions run in Flink's Python workers: they must be
picklable (module-level functions, or instances of module-level classes).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_flink_replay.core.manifest import EventTime
from airflow_flink_replay.flink.agent_job import (
    AgentJob,
    EnvResource,
    KeyTypeName,
    flink_key_type_of,
    json_object,
    to_json_object,
)

__all__ = [
    "AgentPipeline",
    "AgentStage",
    "JobDefinition",
    "MapStep",
    "Stage",
    "WindowStage",
    "as_pipeline",
]

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,47}\Z")


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"{kind} name {name!r} must be 1-48 characters of a-z, 0-9, '-' or '_', starting with a letter (it "
            "names the stage in reports and gives its default uid). Fix: e.g. name='analysis'"
        )


@dataclass(frozen=True)
class AgentStage:
    """An agent of a pipeline: ``job`` carries its agent, key selector and type, memory, config, env-level
    resources and output serializer; ``uid`` pins its operator (see the module doc for the first agent)."""

    name: str
    job: AgentJob
    uid: str | None = None

    kind = "agent"
    stateful = True

    def __post_init__(self) -> None:
        _check_name("AgentStage", self.name)
        if not isinstance(self.job, AgentJob):
            raise ValueError(
                f"AgentStage {self.name!r}: job is a {type(self.job).__name__}, not an AgentJob. Fix: "
                "AgentStage(name, AgentJob(agent=..., key_selector=...))"
            )

    def operator_uid(self) -> str:
        """The uid of this agent's operator when the agent pin does not give it."""
        return self.uid or f"afr-agent-{self.name}"

    @property
    def output_serializer(self) -> Callable[[Any], Mapping[str, Any]]:
        """How this stage's outputs become JSON objects (its job's)."""
        return self.job.output_serializer


@dataclass(frozen=True)
class WindowStage:
    """A keyed window: ``stream.key_by(key_selector).window(assigner).process(function)``.

    ``assigner``: a PyFlink ``WindowAssigner`` (``TumblingEventTimeWindows.of(...)``) or a zero-argument
    callable returning one; ``function``: a ``ProcessWindowFunction`` (or a zero-argument callable returning
    one) — the user's aggregate. Its state (the open windows' contents) is restored from production's savepoint
    under ``uid`` (default ``afr-window-<name>``)."""

    name: str
    key_selector: Callable[[Any], Hashable]
    assigner: Any
    function: Any
    uid: str | None = None
    key_type: KeyTypeName | Any | None = None
    output_serializer: Callable[[Any], Mapping[str, Any]] = to_json_object

    kind = "window"
    stateful = True

    def __post_init__(self) -> None:
        _check_name("WindowStage", self.name)
        if not callable(self.key_selector):
            raise ValueError(f"WindowStage {self.name!r}: key_selector must be a callable: element -> key")

    def operator_uid(self) -> str:
        """The uid of the window operator."""
        return self.uid or f"afr-window-{self.name}"

    def window_assigner(self) -> Any:
        """The assigner (built when given as a zero-argument callable)."""
        return self.assigner if hasattr(self.assigner, "assign_windows") else self.assigner()

    def window_function(self) -> Any:
        """The window function (built when given as a class or zero-argument callable)."""
        fn = self.function
        return fn() if isinstance(fn, type) else fn

    def is_event_time(self) -> bool | None:
        """Whether the window assigns by event time (None: the assigner does not say)."""
        check = getattr(self.window_assigner(), "is_event_time", None)
        return bool(check()) if callable(check) else None

    def flink_key_type(self) -> Any:
        """The PyFlink ``TypeInformation`` of the window's key (pickled by default)."""
        return flink_key_type_of(self.key_type)


@dataclass(frozen=True)
class MapStep:
    """A stateless step: ``function`` applied to each element as a ``map`` (element → element), ``filter``
    (element → keep it?) or ``flat_map`` (element → iterable of elements)."""

    name: str
    function: Callable[[Any], Any]
    kind: Literal["map", "filter", "flat_map"] = "map"
    output_serializer: Callable[[Any], Mapping[str, Any]] = to_json_object

    stateful = False

    def __post_init__(self) -> None:
        _check_name("MapStep", self.name)
        if self.kind not in ("map", "filter", "flat_map"):
            raise ValueError(f"MapStep {self.name!r}: kind {self.kind!r} must be 'map', 'filter' or 'flat_map'")
        if not callable(self.function):
            raise ValueError(f"MapStep {self.name!r}: function must be a callable")

    def operator_uid(self) -> str:
        """The uid of the step's operator (stateless: for readable plans)."""
        return f"afr-step-{self.name}"


Stage = AgentStage | WindowStage | MapStep


@dataclass(frozen=True)
class AgentPipeline:
    """The stages of one job in order, and what they share: the input's deserializer and key (the capture
    topic's key), production's event time and watermark strategy, env-level resources and Flink Agents config
    (one agents environment serves every agent of a job), ``bad_records``, and the intermediate stages whose
    outputs are compared too (``compare_stages``)."""

    stages: Sequence[Stage]
    deserializer: Callable[[bytes], Any] = json_object
    key_selector: Callable[[Any], Hashable] | None = None
    key_type: KeyTypeName | Any | None = None
    env_resources: Sequence[EnvResource] = ()
    config: Mapping[Any, Any] = field(default_factory=dict)
    event_time: EventTime = field(default_factory=EventTime)
    watermark: str = "monotonous"
    idleness_ms: int | None = None
    bad_records: Literal["drop", "fail"] = "drop"
    compare_stages: Sequence[str] = ()

    is_pipeline = True  # a job definition (agent_job.is_job_definition), not a field

    def __post_init__(self) -> None:
        stages = list(self.stages)
        if not stages or not any(isinstance(s, AgentStage) for s in stages):
            raise ValueError("AgentPipeline.stages must hold at least one AgentStage. Fix: stages=[AgentStage(...)]")
        bad = [type(s).__name__ for s in stages if not isinstance(s, AgentStage | WindowStage | MapStep)]
        if bad:
            raise ValueError(f"AgentPipeline.stages holds {bad}: each stage is an AgentStage, WindowStage or MapStep")
        _unique("stage name", [s.name for s in stages])
        pin = "\0the agent pin"  # whatever uid the first agent gets, it is not a stage's own
        _unique("operator uid", [uid for s, uid in self.stage_uids(pin) if s.stateful and uid and uid != pin])
        first_agent = self.agent_stages()[0]
        if first_agent.uid:
            raise ValueError(
                f"AgentPipeline: the first agent stage {first_agent.name!r} has uid {first_agent.uid!r}, but its "
                "operator is pinned by the agent pin (production.agent_uid, production_job.py --agent-uid), as the "
                "agent of an AgentJob is. Fix: leave its uid empty and set production.agent_uid"
            )
        if self.key_selector is None and not isinstance(stages[0], AgentStage):
            raise ValueError(
                f"AgentPipeline: the first stage {stages[0].name!r} is not an agent, so the input's key is not "
                "known. Fix: key_selector= the key of an input record (the capture topic is keyed by it)"
            )
        if self.bad_records not in ("drop", "fail"):
            raise ValueError(f"AgentPipeline.bad_records {self.bad_records!r} must be 'drop' or 'fail'")
        names = {s.name for s in stages[:-1]}
        unknown = [n for n in self.compare_stages if n not in names]
        if unknown:
            raise ValueError(
                f"AgentPipeline.compare_stages names {unknown}, not intermediate stages of the pipeline "
                f"({sorted(names)}; the last stage's outputs are always compared)"
            )
        self.shared_resources()  # refuses two different resources under one name
        self.shared_config()

    # ----------------------------------------------------------------- what the ingest and the env read
    @property
    def input_key_selector(self) -> Callable[[Any], Hashable]:
        """The input record's key: ``key_selector``, else the first stage's (an agent)."""
        if self.key_selector is not None:
            return self.key_selector
        first = self.stages[0]
        assert isinstance(first, AgentStage)  # __post_init__
        return first.job.key_selector

    @property
    def output_serializer(self) -> Callable[[Any], Mapping[str, Any]]:
        """How the last stage's outputs become JSON objects."""
        return self.stages[-1].output_serializer

    @property
    def memory(self) -> None:
        """A pipeline has no one memory binding: each agent stage's job has its own."""
        return None

    def agent_stages(self) -> list[AgentStage]:
        """The agent stages, in order."""
        return [s for s in self.stages if isinstance(s, AgentStage)]

    def shared_resources(self) -> list[EnvResource]:
        """The env-level resources of the pipeline and of every agent stage's job (one agents environment
        serves them all). Raises ``ValueError`` for two different resources under one name."""
        out: dict[str, EnvResource] = {}
        for res in [*self.env_resources, *(r for s in self.agent_stages() for r in s.job.env_resources)]:
            seen = out.setdefault(res.name, res)
            if seen is not res and seen != res:
                raise ValueError(
                    f"AgentPipeline: two different env-level resources are named {res.name!r} (one agents "
                    "environment serves every agent of the job). Fix: rename one, or declare it once in "
                    "AgentPipeline.env_resources"
                )
        return list(out.values())

    def shared_config(self) -> dict[Any, Any]:
        """The Flink Agents config of the pipeline and of every agent stage's job, which Flink Agents applies to
        every agent of the job. Raises ``ValueError`` when two give one option different values."""
        out: dict[Any, Any] = dict(self.config)
        for stage in self.agent_stages():
            for key, value in stage.job.config.items():
                if key in out and out[key] != value:
                    raise ValueError(
                        f"AgentPipeline: config option {key!r} is {out[key]!r} and {value!r} (stage {stage.name!r}); "
                        "Flink Agents applies one config to every agent of a job. Fix: set it once in "
                        "AgentPipeline.config"
                    )
                out[key] = value
        return out

    def apply_config(self, agent_config: Any) -> None:
        """Set :meth:`shared_config` on a Flink Agents configuration (``agents_env.get_config()``)."""
        from airflow_flink_replay.flink.agent_job import set_config

        set_config(agent_config, self.shared_config())

    def register_env_resources(self, agents_env: Any) -> None:
        """``agents_env.add_resource`` each of :meth:`shared_resources`."""
        for res in self.shared_resources():
            agents_env.add_resource(res.name, res.resource_type(), res.descriptor)

    def stage_job(self, stage: AgentStage) -> AgentJob:
        """``stage``'s job as it runs in this pipeline: with the shared env-level resources and config (what its
        ``AgentPlan`` is built with)."""
        return dataclasses.replace(stage.job, env_resources=tuple(self.shared_resources()), config=self.shared_config())

    @property
    def input_key_type(self) -> KeyTypeName | Any | None:
        """The input's key type: ``key_type`` with the pipeline's own ``key_selector``, else the first stage's (an
        agent, whose key the input is keyed by)."""
        first = self.stages[0]
        if self.key_selector is None and isinstance(first, AgentStage):
            return first.job.key_type
        return self.key_type

    def stage_uids(self, first_agent_uid: str | None) -> Iterator[tuple[Stage, str | None]]:
        """Each stage with the uid its operator gets: the first agent ``first_agent_uid`` (the agent pin; None:
        pinned by hash or not at all), the others their own."""
        first = True
        for stage in self.stages:
            if isinstance(stage, AgentStage) and first:
                first = False
                yield stage, first_agent_uid
            else:
                yield stage, stage.operator_uid()


JobDefinition = AgentJob | AgentPipeline


def _unique(what: str, values: list[str]) -> None:
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise ValueError(f"AgentPipeline: {what} {twice} given twice. Fix: give every stage its own")


def as_pipeline(job: JobDefinition) -> AgentPipeline:
    """``job`` as a pipeline: itself, or an ``AgentJob`` as the one-agent pipeline it is (stage ``agent``)."""
    if isinstance(job, AgentPipeline):
        return job
    return AgentPipeline(
        stages=[AgentStage("agent", dataclasses.replace(job, env_resources=(), config={}))],
        deserializer=job.deserializer,
        key_selector=job.key_selector,
        key_type=job.key_type,
        env_resources=job.env_resources,
        config=job.config,
        event_time=job.event_time,
        watermark=job.watermark,
        idleness_ms=job.idleness_ms,
        bad_records=job.bad_records,
    )

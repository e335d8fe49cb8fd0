"""Apply a job definition to a stream: the one function production's ``main()`` and every replay call.

    raw source (bytes) → ingest (uid afr-ingest: deserialize + key, [capture tee in production])
      → key by the job's key selector (typed key) → agent ("action-execute-operator", pinned: uid / uid hash /
      max parallelism) → output serializer (uid afr-agent-output) → JSON strings

A pipeline (:class:`~airflow_flink_replay.flink.agent_pipeline.AgentPipeline`) runs its stages in order between
the ingest and the output serializer: agents (each keyed by its own key selector, the first pinned as above,
the others by their stage's uid), keyed windows and stateless steps (:func:`apply_stages`).

:func:`apply_agent_job` is the public entry. Production's own ``main()`` calls it on its own source stream::

    env = StreamExecutionEnvironment.get_execution_environment()
    raw = env.from_source(my_kafka_source_of_bytes, watermark_strategy, "source").uid("my-source")
    out = apply_agent_job(
        env, raw, load_agent_job("my_pkg.jobs:review_job"),
        runtime=AgentRuntimeConfig(bootstrap=..., action_state_topic=..., job_identifier=...),
        pin=AgentPin(uid="afr-agent", max_parallelism=128),
        capture=CaptureConfig(bootstrap=..., topic="reviews-capture", job="reviews-prod", source_topic="reviews"),
        mem0_config=my_mem0_config,
    )
    out.sink_to(my_sink)

What the agent sees is exactly what it would see without this package: ``job.deserializer(raw bytes)`` (the
user's type), keyed by ``job.key_selector`` with its typed key (``job.key_type``, pickled by default as
Flink Agents' own ``from_datastream(input, key_selector=...)`` keys). The capture tee only *writes* the raw
bytes it was given — it never rewrites them. The replay job calls the same function on the bounded capture
source, so a replay deserialises the very bytes production received.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyflink.datastream.functions import ProcessFunction, RuntimeContext

from airflow_flink_replay.flink.agent_job import AgentJob, set_config
from airflow_flink_replay.flink.agent_pin import AgentPin, pin_agent_operator
from airflow_flink_replay.flink.agent_pipeline import AgentPipeline, AgentStage, Stage, WindowStage, as_pipeline
from airflow_flink_replay.flink.capture import CaptureConfig, CaptureWriter

__all__ = [
    "INGEST_UID",
    "OUTPUT_UID",
    "AgentRuntimeConfig",
    "agent_plan_of",
    "agents_environment",
    "apply_agent_job",
    "apply_stages",
]

INGEST_UID = "afr-ingest"
OUTPUT_UID = "afr-agent-output"
#: The package a cluster loads parent-first when Flink Agents' jar is in its lib/ (the stack does).
AGENTS_PACKAGE = "org.apache.flink.agents."

_log = logging.getLogger("airflow_flink_replay")


@dataclass(frozen=True)
class AgentRuntimeConfig:
    """Flink Agents configuration of the agent operator (the action-state store and identity)."""

    bootstrap: str
    action_state_topic: str
    job_identifier: str | None = None
    action_state_partitions: int | None = 1
    extra: Mapping[str, Any] = field(default_factory=dict)

    def entries(self) -> dict[str, Any]:
        """Config key → value as Flink Agents 0.2.0 reads them. ``extra`` never overrides the store and the
        identity this config sets (the replay spec refuses them in ``agent_config`` too: ``RESERVED_AGENT_CONFIG``
        of :mod:`airflow_flink_replay.core.replay_job_spec`): a replay's isolation is not a default an option
        can undo."""
        out: dict[str, Any] = dict(self.extra)
        out |= {
            "actionStateStoreBackend": "kafka",
            "kafkaBootstrapServers": self.bootstrap,
            "kafkaActionStateTopic": self.action_state_topic,
        }
        if self.action_state_partitions:
            out["kafkaActionStateTopicNumPartitions"] = int(self.action_state_partitions)
        if self.job_identifier:
            out["job-identifier"] = self.job_identifier
        return out


def raw_bytes(value: Any) -> bytes:
    """A source element as bytes: ``bytes`` as is (a byte-array source), text as its UTF-8 encoding."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(
        f"the source gave a {type(value).__name__}; apply_agent_job takes a stream of the records' raw values "
        "(bytes, e.g. a KafkaSource with ByteArraySchema, or text)"
    )


class _Ingest(ProcessFunction):
    """Raw value → ``job.deserializer(raw)``; with a capture config the raw bytes go to the capture topic too.

    A record the deserializer or the key selector rejects is dropped with a warning (``bad_records="drop"``)
    — before the tee, so the capture topic holds exactly the agent's input — or fails the job (``"fail"``).
    """

    def __init__(self, job: AgentJob | AgentPipeline, capture: CaptureConfig | None) -> None:
        pipeline = as_pipeline(job)
        self.deserializer = pipeline.deserializer
        self.key_selector = pipeline.input_key_selector
        self.bad_records = pipeline.bad_records
        self.capture = capture
        self._writer: CaptureWriter | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        if self.capture is not None:
            self._writer = CaptureWriter(self.capture)
            self._writer.open()

    def process_element(self, value: Any, ctx: ProcessFunction.Context):  # type: ignore[override]
        raw = raw_bytes(value)
        try:
            event = self.deserializer(raw)
            key = self.key_selector(event)
        except Exception as exc:
            if self.bad_records == "fail":
                raise ValueError(f"record rejected by the job definition ({exc}): {raw[:200]!r}") from exc
            _log.warning("dropping a record the job definition rejects (%s): %.200r", exc, raw)
            return
        if self._writer is not None:
            self._writer.write(raw, key, ctx.timestamp())
        yield event

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class _ToJson:
    """Agent output → ``job.output_serializer(output)`` (+ ``extra``) as sorted JSON text."""

    def __init__(self, serializer: Callable[[Any], Mapping[str, Any]], extra: Mapping[str, Any] | None) -> None:
        self.serializer = serializer
        self.extra = dict(extra or {})

    def obj(self, output: Any) -> dict[str, Any]:
        out = self.serializer(output)
        if not isinstance(out, Mapping):
            raise TypeError(f"output_serializer returned a {type(out).__name__}, not a JSON object (a mapping)")
        out = dict(out)
        if self.extra:
            out.update({k: (dict(v) if isinstance(v, dict) else v) for k, v in self.extra.items()})
        return out

    def __call__(self, output: Any) -> str:
        return json.dumps(self.obj(output), sort_keys=True, default=str)


class _ToJsonTimed(ProcessFunction):
    """:class:`_ToJson` that also notes the record's event time and the operator's current watermark under
    ``output[timing_key]`` (``event_time_ms``, ``watermark_ms``): the replay's evidence of the event time and
    watermark strategy it ran with (the agent operator keeps its input's timestamp and forwards watermarks in
    order with its outputs)."""

    def __init__(
        self, serializer: Callable[[Any], Mapping[str, Any]], extra: Mapping[str, Any] | None, timing_key: str
    ) -> None:
        self.to_json = _ToJson(serializer, extra)
        self.timing_key = timing_key

    def process_element(self, value: Any, ctx: ProcessFunction.Context):  # type: ignore[override]
        out = self.to_json.obj(value)
        timing = out.get(self.timing_key)
        timing = dict(timing) if isinstance(timing, dict) else {}
        timing["event_time_ms"] = ctx.timestamp()
        timing["watermark_ms"] = ctx.timer_service().current_watermark()
        out[self.timing_key] = timing
        yield json.dumps(out, sort_keys=True, default=str)


def agents_jar_by_path(env: Any) -> list[str]:
    """Ship no copy of the Flink Agents jar when the cluster loads ``org.apache.flink.agents.`` parent-first
    (its jar in lib/, as Flink Agents' installation guide puts it: every job then uses the JVM's one copy
    instead of loading ~115 MB of classes in a classloader of its own, ~25 MB of TaskManager and ~14 MB of
    JobManager metaspace a job that is never reclaimed); else refer to it by its path on the Flink hosts
    instead of shipping it, when the TaskManagers run this very Python. Returns the jars taken out of
    ``pipeline.jars`` (none when it stays shipped).

    ``AgentsExecutionEnvironment`` adds its ~115 MB jar to ``pipeline.jars``: every submission uploads it to
    the blob server (hashed, stored) and every TaskManager downloads it again — on the local stack the replay
    submissions spent 1-8 s each on it while the variants submitted before them started. The TaskManagers'
    Python (``python.executable``) imports flink_agents from its own installation, so when that is the
    interpreter running this program the jar is at the same path on every TaskManager, and
    ``pipeline.classpaths`` (read in place, listed after the job's jars: the connector's kafka-clients still
    comes first) serves it. Any other setup keeps Flink Agents' own ``pipeline.jars``."""
    import os
    import sys

    from py4j.java_collections import ListConverter
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    config = jvm.org.apache.flink.python.util.PythonConfigUtil.getEnvironmentConfig(env._j_stream_execution_environment)
    options = jvm.org.apache.flink.configuration.PipelineOptions
    jars = list(config.getOptional(options.JARS).orElse(jvm.java.util.ArrayList()))
    moved = [j for j in jars if "/flink_agents/lib/" in j]  # the jars AgentsExecutionEnvironment adds
    client = get_gateway()._gateway_client
    if moved and _cluster_loads_agents_from_lib(config):
        config.set(options.JARS, ListConverter().convert([j for j in jars if j not in moved], client))
        _log.info("Flink Agents jar not shipped: the cluster loads it from its lib/ (parent-first): %s", moved)
        return moved
    workers_python = config.getString("python.executable", None)
    if not workers_python or os.path.realpath(workers_python) != os.path.realpath(sys.executable):
        return []
    if moved:
        classpaths = list(config.getOptional(options.CLASSPATHS).orElse(jvm.java.util.ArrayList()))
        config.set(options.JARS, ListConverter().convert([j for j in jars if j not in moved], client))
        config.set(options.CLASSPATHS, ListConverter().convert(classpaths + moved, client))
        _log.info("Flink Agents jar referred to in place (pipeline.classpaths), not shipped: %s", moved)
    return moved


def _cluster_loads_agents_from_lib(config: Any) -> bool:
    """Whether the cluster's configuration loads Flink Agents' classes parent-first (its jar in lib/)."""
    patterns = str(config.toMap().get("classloader.parent-first-patterns.additional") or "")
    return any(p.strip().strip("[]'\" ") == AGENTS_PACKAGE for p in re.split(r"[;,]", patterns))


def agents_environment(env: Any, config: AgentRuntimeConfig, job: AgentJob | AgentPipeline | None = None) -> Any:
    """``AgentsExecutionEnvironment`` on ``env``: the job's config options, then ``config`` (the runtime's
    action-state store and identity win), and the job's env-level resources registered.

    Connector jars must be added to ``env`` first (the flink-agents fat jar carries another kafka-clients).
    """
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    agents_env = AgentsExecutionEnvironment.get_execution_environment(env)
    agents_jar_by_path(env)
    conf = agents_env.get_config()
    if job is not None:
        job.apply_config(conf)
    set_config(conf, config.entries())
    if job is not None:
        job.register_env_resources(agents_env)
    return agents_env


def apply_agent_job(
    env: Any,
    raw_source: Any,
    job: AgentJob | AgentPipeline,
    *,
    runtime: AgentRuntimeConfig,
    pin: AgentPin | None = None,
    capture: CaptureConfig | None = None,
    plan_hook: Callable[[Any, AgentStage], None] | None = None,
    mem0_config: Mapping[str, Any] | None = None,
    output_extra: Mapping[str, Any] | None = None,
    output_timing_key: str | None = None,
    stage_outputs: bool = False,
) -> Any:
    """Run ``job`` — one agent (:class:`~airflow_flink_replay.flink.agent_job.AgentJob`) or the stages of an
    :class:`~airflow_flink_replay.flink.agent_pipeline.AgentPipeline` — over ``raw_source``; returns the
    DataStream of the last stage's outputs as JSON text.

    - ``raw_source``: a DataStream of the records' raw values — ``bytes`` (a Kafka source with PyFlink's
      ``ByteArraySchema``, what :func:`~airflow_flink_replay.flink.kafka.unbounded_source` builds) or text
      (encoded as UTF-8). Event time and watermarks are the caller's: assign them on ``raw_source``.
    - ``runtime``: the agent operators' action-state store and ``job-identifier`` (the Mem0 namespace).
    - ``pin``: the (first) agent operator's identity (uid / uid hash) and the max parallelism of every stateful
      operator, so savepoints map onto them; a pipeline's other stages carry their own uids.
    - ``capture``: production only — the raw bytes of every record the job receives, unchanged, written
      to the capture topic keyed by the input's key (per-key order kept) with provenance headers.
    - ``plan_hook(plan, stage)``: may rewrite each agent's compiled ``AgentPlan`` before Flink gets it (the
      replay wraps resources, the agent's and the env-level ones alike, in policy proxies there).
    - ``mem0_config``: the store config each agent's
      :class:`~airflow_flink_replay.flink.agent_job.MemoryBinding` is built with (production's in production,
      the replay's in a replay).
    - ``output_extra`` is merged into every output object; ``output_timing_key`` adds the record's event time
      and the current watermark under that key (a process function instead of a map, same uid: no state).
    - ``stage_outputs`` (needs ``output_timing_key``): the outputs of the pipeline's ``compare_stages`` are in
      the returned stream too, each marked ``output[output_timing_key]["stage"] = <stage name>`` (the replay).

    Must be called once per ``env``; connector jars must be on ``env`` before (see :func:`agents_environment`).
    """
    pipeline = as_pipeline(job)
    if pin is not None and pin.uid_hash and len(pipeline.stages) > 1:
        raise ValueError(
            "a pipeline cannot be replayed by uid hash (production without uids): every stateful stage needs a uid "
            "production and the replay share. Fix: deploy production with uids (production_job.py --agent-uid, or "
            "pin its agent in your main()) and set production.agent_uid"
        )
    stream = raw_source.process(_Ingest(pipeline, capture)).uid(INGEST_UID).name("ingest")
    agents_env = agents_environment(env, runtime, pipeline)
    outputs = apply_stages(stream, pipeline, agents_env, pin or AgentPin(), plan_hook, mem0_config)
    last_stage, last = outputs[-1]
    out = _serialized(last, last_stage.output_serializer, output_extra, output_timing_key).uid(OUTPUT_UID)
    out = out.name("agent-output")
    if not (stage_outputs and output_timing_key and pipeline.compare_stages):
        return out
    for stage, stream in outputs[:-1]:
        if stage.name in pipeline.compare_stages:
            extra = dict(output_extra or {})
            extra[output_timing_key] = {**dict(extra.get(output_timing_key) or {}), "stage": stage.name}
            marked = _serialized(stream, stage.output_serializer, extra, output_timing_key)
            out = out.union(marked.uid(f"{OUTPUT_UID}-{stage.name}").name(f"stage-output-{stage.name}"))
    return out


def _serialized(
    stream: Any, serializer: Callable[[Any], Mapping[str, Any]], extra: Mapping[str, Any] | None, timing_key: str | None
) -> Any:
    """``stream``'s elements as sorted JSON text (with the timing under ``timing_key`` when given)."""
    from pyflink.common import Types

    if timing_key:
        return stream.process(_ToJsonTimed(serializer, extra, timing_key), output_type=Types.STRING())
    return stream.map(_ToJson(serializer, extra), output_type=Types.STRING())


def apply_stages(
    stream: Any,
    pipeline: AgentPipeline,
    agents_env: Any,
    pin: AgentPin,
    plan_hook: Callable[[Any, AgentStage], None] | None,
    mem0_config: Mapping[str, Any] | None,
) -> list[tuple[Stage, Any]]:
    """Each stage of ``pipeline`` applied in order to ``stream`` (the ingested input); returns every stage with
    its output stream (Python objects). Agents go through ``agents_env``; the first agent carries ``pin``'s uid or
    uid hash, every other stateful operator its stage's uid; all stateful ones ``pin``'s max parallelism."""
    outputs: list[tuple[Stage, Any]] = []
    first_uid = pin.uid or None
    for stage, uid in pipeline.stage_uids(first_uid):
        if isinstance(stage, AgentStage):
            stream = _apply_agent(stream, pipeline.stage_job(stage), stage, agents_env, plan_hook, mem0_config)
            stage_pin = AgentPin(uid=uid, uid_hash=pin.uid_hash if uid is None else None,
                                 max_parallelism=pin.max_parallelism)  # fmt: skip
            if not stage_pin.is_empty:
                pin_agent_operator(stream, stage_pin)
        elif isinstance(stage, WindowStage):
            keyed = stream.key_by(stage.key_selector, key_type=stage.flink_key_type())
            stream = keyed.window(stage.window_assigner()).process(stage.window_function())
            stream = stream.uid(uid).name(stage.name)
            if pin.max_parallelism:
                stream.set_max_parallelism(int(pin.max_parallelism))
        else:
            stream = getattr(stream, stage.kind)(stage.function).uid(uid).name(stage.name)
        outputs.append((stage, stream))
    return outputs


def _apply_agent(
    stream: Any,
    job: AgentJob,
    stage: AgentStage,
    agents_env: Any,
    plan_hook: Callable[[Any, AgentStage], None] | None,
    mem0_config: Mapping[str, Any] | None,
) -> Any:
    """``job``'s agent over ``stream`` keyed by its key selector; returns the agent's outputs (Python objects)."""
    agent = job.agent_with_memory(mem0_config)
    # The agent operator takes pickled Python objects: no output_type on the streams that feed it.
    keyed = stream.key_by(job.key_selector, key_type=job.flink_key_type())
    builder = agents_env.from_datastream(input=keyed).apply(agent)
    if plan_hook is not None:
        plan_hook(agent_plan_of(builder), stage)
    return builder.to_datastream()


def agent_plan_of(builder: Any) -> Any:
    """The compiled ``AgentPlan`` inside a Flink Agents ``RemoteAgentBuilder`` (0.2.0 keeps it private)."""
    for name in ("_RemoteAgentBuilder__agent_plan", "agent_plan", "_agent_plan"):
        plan = getattr(builder, name, None)
        if plan is not None:
            return plan
    raise RuntimeError("cannot find the agent plan on the agent builder (flink-agents version changed?)")

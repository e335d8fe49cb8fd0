"""The one pipeline builder used by BOTH production and replay jobs.

    source stream → normalise (stable uid) → [capture tee (stable uid), production only] → key by
      → agent ("action-execute-operator", pinned: uid / uid hash / max parallelism) → output (stable uid)

The caller builds the source (an unbounded Kafka source in production, the bounded capture source in a
replay) and attaches the sink to the returned stream of JSON strings. The agent sees the normalised JSON
string of each event; its key is the event's ``key_field``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyflink.datastream.functions import ProcessFunction

from airflow_flink_replay.flink.agent_pin import AgentPin, pin_agent_operator
from airflow_flink_replay.flink.capture import CaptureConfig, CaptureTee

NORMALISE_UID = "afr-normalise"
CAPTURE_UID = "afr-capture-tee"
OUTPUT_UID = "afr-agent-output"


@dataclass(frozen=True)
class AgentRuntimeConfig:
    """Flink Agents configuration of the agent operator (the action-state store and identity)."""

    bootstrap: str
    action_state_topic: str
    job_identifier: str | None = None
    action_state_partitions: int | None = 1
    extra: Mapping[str, Any] = field(default_factory=dict)

    def entries(self) -> dict[str, Any]:
        """Config key → value as Flink Agents 0.2.0 reads them."""
        out: dict[str, Any] = {
            "actionStateStoreBackend": "kafka",
            "kafkaBootstrapServers": self.bootstrap,
            "kafkaActionStateTopic": self.action_state_topic,
        }
        if self.action_state_partitions:
            out["kafkaActionStateTopicNumPartitions"] = int(self.action_state_partitions)
        if self.job_identifier:
            out["job-identifier"] = self.job_identifier
        out.update(self.extra)
        return out


class _Normalise:
    """Parse, check the key field, re-emit canonical JSON; drop what cannot be keyed (logged)."""

    def __init__(self, key_field: str) -> None:
        self.key_field = key_field

    def __call__(self, value: str):
        import logging

        try:
            event = json.loads(value)
            key = event[self.key_field]
        except Exception as exc:  # a poison record must not stop production
            logging.getLogger("airflow_flink_replay").warning("dropping unkeyable record (%s): %.200s", exc, value)
            return
        event[self.key_field] = str(key).strip()
        yield json.dumps(event, sort_keys=True)


class _KeyOf:
    def __init__(self, key_field: str) -> None:
        self.key_field = key_field

    def __call__(self, value: str) -> str:
        return str(json.loads(value)[self.key_field])


class _ToJson:
    def __init__(self, extra: Mapping[str, Any] | None) -> None:
        self.extra = dict(extra or {})

    def __call__(self, output: Any) -> str:
        if hasattr(output, "model_dump"):
            output = output.model_dump(mode="json")
        if not isinstance(output, dict):
            output = {"output": output}
        if self.extra:
            output = {**output, **self.extra}
        return json.dumps(output, sort_keys=True, default=str)


class _ToJsonTimed(ProcessFunction):
    """:class:`_ToJson` that also notes the record's event time and the operator's current watermark under
    ``output[timing_key]`` (``event_time_ms``, ``watermark_ms``): the replay's evidence of the event time and
    watermark strategy it ran with (the agent operator keeps its input's timestamp and forwards watermarks in
    order with its outputs)."""

    def __init__(self, extra: Mapping[str, Any] | None, timing_key: str) -> None:
        self.to_json = _ToJson(None)
        self.extra = dict(extra or {})
        self.timing_key = timing_key

    def process_element(self, value: Any, ctx: ProcessFunction.Context):  # type: ignore[override]
        out = json.loads(self.to_json(value))
        out.update({k: (dict(v) if isinstance(v, dict) else v) for k, v in self.extra.items()})
        timing = out.get(self.timing_key)
        timing = timing if isinstance(timing, dict) else {}
        timing["event_time_ms"] = ctx.timestamp()
        timing["watermark_ms"] = ctx.timer_service().current_watermark()
        out[self.timing_key] = timing
        yield json.dumps(out, sort_keys=True, default=str)


def agents_environment(env: Any, config: AgentRuntimeConfig) -> Any:
    """``AgentsExecutionEnvironment`` on ``env`` with ``config`` applied (connector jars must be added first)."""
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    agents_env = AgentsExecutionEnvironment.get_execution_environment(env)
    conf = agents_env.get_config()
    for key, value in config.entries().items():
        if isinstance(value, bool):
            conf.set_bool(key, value)
        elif isinstance(value, int):
            conf.set_int(key, value)
        else:
            conf.set_str(key, str(value))
    return agents_env


def build_agent_pipeline(
    env: Any,
    source: Any,
    agent: Any,
    *,
    runtime: AgentRuntimeConfig,
    key_field: str = "customer",
    pin: AgentPin | None = None,
    capture: CaptureConfig | None = None,
    plan_hook: Callable[[Any], None] | None = None,
    output_extra: Mapping[str, Any] | None = None,
    output_timing_key: str | None = None,
) -> Any:
    """Wire ``source`` (a DataStream of JSON strings) through the agent; returns a DataStream of JSON strings.

    ``pin`` pins the agent operator (see :mod:`airflow_flink_replay.flink.agent_pin`); ``capture`` adds the
    capture tee; ``plan_hook`` may rewrite the compiled ``AgentPlan`` before it is handed to Flink (the replay
    wraps resources in policy proxies there); ``output_extra`` is merged into every output object;
    ``output_timing_key`` adds the record's event time and the current watermark under that key (a process
    function instead of a map; the output's uid stays the same, it holds no state).
    """
    from pyflink.common import Types

    # The agent operator takes pickled Python objects: no output_type on the streams that feed it.
    stream = source.flat_map(_Normalise(key_field)).uid(NORMALISE_UID).name("normalise")
    if capture is not None:
        stream = stream.process(CaptureTee(capture)).uid(CAPTURE_UID).name("capture-tee")
    keyed = stream.key_by(_KeyOf(key_field), key_type=Types.STRING())
    agents_env = agents_environment(env, runtime)
    builder = agents_env.from_datastream(input=keyed).apply(agent)
    if plan_hook is not None:
        plan_hook(agent_plan_of(builder))
    out = builder.to_datastream()
    if pin is not None and not pin.is_empty:
        pin_agent_operator(out, pin)
    if output_timing_key:
        out = out.process(_ToJsonTimed(output_extra, output_timing_key), output_type=Types.STRING())
    else:
        out = out.map(_ToJson(output_extra), output_type=Types.STRING())
    return out.uid(OUTPUT_UID).name("agent-output")


def agent_plan_of(builder: Any) -> Any:
    """The compiled ``AgentPlan`` inside a Flink Agents ``RemoteAgentBuilder`` (0.2.0 keeps it private)."""
    for name in ("_RemoteAgentBuilder__agent_plan", "agent_plan", "_agent_plan"):
        plan = getattr(builder, name, None)
        if plan is not None:
            return plan
    raise RuntimeError("cannot find the agent plan on the agent builder (flink-agents version changed?)")

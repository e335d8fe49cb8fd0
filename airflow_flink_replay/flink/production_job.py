"""The production entry: a Flink Agents job from a job definition, with the capture tee and the identity pin.

This is THE production program the replay DAG quiesces and resumes (``ReplaySpec.production.program``
points at it), unless your own ``main()`` calls
:func:`~airflow_flink_replay.flink.pipeline.apply_agent_job` itself (see docs/flink-side.md). It builds::

    Kafka source (uid afr-source, raw bytes; watermarks in the source, or with --event-time-field a
      timestamp/watermark operator afr-watermarks after it)
      → ingest (uid afr-ingest: the job's deserializer + key selector; the capture tee writes the raw bytes)
      → key by → agent (--agent-uid pinned, or no uid at all with --agent-uid '') → output (uid afr-agent-output)
      → Kafka sink (uid afr-sink)

Run it with the Flink CLI (or the REST PythonDriver with the same program arguments), as a module of the
job side's Python (``-pym``: nothing to share with the Airflow worker; ``-py <this file>`` works too)::

    flink run -d -pym airflow_flink_replay.flink.production_job -- \\
        --agent-job my_pkg.jobs:review_job --bootstrap kafka:9092 \\
        --source-topic reviews --sink-topic reviews-out --capture-topic reviews-capture \\
        --action-state-topic reviews-action-state --job-identifier reviews-prod --agent-uid afr-agent \\
        --max-parallelism 128 --mem0-config '{"vector_store": {...}}' --jars /opt/flink/kafka.jar,...

Arguments:

- ``--agent-job module:attr``: the job definition (an :class:`~airflow_flink_replay.flink.agent_job.AgentJob`,
  or a zero-argument function returning one) — the same reference as ``ReplaySpec.production.agent_job``.
- ``--agent-factory module:attr`` (instead of ``--agent-job``; the older form): a function called as
  ``factory(mem0_config=..., **agent_options)``; the agent then receives the record's JSON text and is keyed by
  the text of ``--key-field``. ``--agent-options`` (a JSON object) gives the factory's extra keyword arguments.
- ``--bootstrap``: Kafka bootstrap servers as the Flink cluster reaches them. ``--kafka-security``: a secured
  broker's settings, the JSON of a :class:`~airflow_flink_replay.core.kafka_security.KafkaClientSecurity`
  (password as a reference): the source, the sink and the capture tee are built with them; Flink Agents'
  action-state store is not (it takes the bootstrap servers only).
- ``--source-topic`` / ``--group-id``: the input topic and the consumer group (default ``afr-<job name>``);
  a fresh group starts at the earliest offset, then the savepoint's offsets rule.
- ``--sink-topic``: where the agent's outputs go (JSON text, one object per output).
- ``--capture-topic``: the capture tee's topic (``''``: no tee; the replay DAG needs it).
- ``--cassette-topic``: record production's mediated calls there (``''``: none), so replays are served
  production's results (the policy's ``replay`` decision, :mod:`airflow_flink_replay.core.cassette`);
  ``--cassette-record``: what is recorded, comma-separated resource types (``tool``, ``chat_model``,
  ``vector_store.read``, ...), resource names or ``name.method`` (default ``tool``).
- ``--action-state-topic`` / ``--job-identifier``: Flink Agents' action-state store and job identifier (the
  Mem0 namespace); the spec's ``production.action_state_topic`` / ``production.job_identifier``.
- ``--agent-uid`` / ``--max-parallelism``: the agent operator's identity (``production.agent_uid`` /
  ``production.max_parallelism``); a replay restores the agent's state only with the same ones.
- ``--mem0-config``: the Mem0 store config (JSON) the job's memory binding (or the factory) is built with.
- ``--memory-journal-topic``: journal every memory write to this topic (``''``: none), so that the memory cut in
  the stop window reads only what production wrote since the pre-copy (:mod:`airflow_flink_replay.memory.journal`):
  added to the mem0 config the memory binding gets, for a memory built by
  :func:`~airflow_flink_replay.memory.offline.build_offline_memory` (or wrapped with
  :func:`~airflow_flink_replay.memory.journal.journal_memory`).
- ``--watermark`` (``none`` / ``monotonous`` / ``bounded:<ms>``), ``--idleness-ms``, ``--event-time-field``
  (JSONPath into the JSON value; default the Kafka record timestamp), ``--event-time-unit``: production's event
  time and watermark strategy. Left out: the job definition's (``event_time``, ``watermark``,
  ``idleness_ms``). They must equal the spec's ``production.event_time`` / ``production.watermark``: the
  manifest records those for the replays.
- ``--checkpoint-interval-ms``, ``--job-name``, ``--jars`` (comma-separated connector jars).
- ``--no-isolate``: import the job definition's module by its own name instead of a content-hashed copy of its
  package (see :mod:`airflow_flink_replay.flink.agent_build`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

SOURCE_UID = "afr-source"
SINK_UID = "afr-sink"
WATERMARK_UID = "afr-watermarks"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Program arguments (see the module docstring)."""
    p = argparse.ArgumentParser(prog="production_job", description="Flink Agents production job")
    agent = p.add_mutually_exclusive_group(required=True)
    agent.add_argument("--agent-job", default="", help='"module:attr" of the AgentJob definition')
    agent.add_argument("--agent-factory", default="", help='older form: "module:attr" of factory(mem0_config=...)')
    p.add_argument("--key-field", default="customer", help="--agent-factory only: JSON field that is the agent key")
    p.add_argument("--agent-options", default="", help="--agent-factory only: JSON object of extra factory kwargs")
    p.add_argument("--bootstrap", required=True)
    p.add_argument(
        "--kafka-security",
        default="",
        help="JSON: KafkaClientSecurity of a secured broker (password by reference, resolved inside Flink)",
    )
    p.add_argument("--source-topic", required=True)
    p.add_argument("--sink-topic", required=True)
    p.add_argument("--capture-topic", default="", help="capture tee topic ('' = no tee)")
    p.add_argument("--cassette-topic", default="", help="record mediated calls to this topic ('' = none)")
    p.add_argument("--cassette-record", default="tool", help="what to record: resource types, names or name.method")
    p.add_argument("--action-state-topic", required=True)
    p.add_argument("--job-identifier", default="")
    p.add_argument("--agent-uid", default="afr-agent", help="uid of the agent operator ('' = leave it auto)")
    p.add_argument("--max-parallelism", type=int, default=0)
    p.add_argument("--mem0-config", default="", help="mem0 config as JSON")
    p.add_argument("--memory-journal-topic", default="", help="journal memory writes to this topic ('' = none)")
    p.add_argument("--jars", default="", help="comma-separated connector jars")
    p.add_argument("--group-id", default="")
    p.add_argument("--watermark", default=None, help='"none", "monotonous" or "bounded:<ms>" (default: the job\'s)')
    p.add_argument("--idleness-ms", type=int, default=None, help="watermark idleness timeout (0 = never idle)")
    p.add_argument(
        "--event-time-field", default=None, help="JSONPath of the event time in the value ('' = Kafka record timestamp)"
    )
    p.add_argument("--event-time-unit", default="ms", choices=["ms", "s", "iso8601"])
    p.add_argument("--checkpoint-interval-ms", type=int, default=2000)
    p.add_argument("--job-name", default="afr-production")
    p.add_argument(
        "--no-isolate",
        action="store_true",
        help="import the job definition by its own module name (default: content-hashed copy, see "
        "airflow_flink_replay.flink.agent_build)",
    )
    return p.parse_args(argv)


def production_timing(args: argparse.Namespace, job: Any = None) -> Any:
    """Production's event time and watermark strategy (what its replay manifest must record) as a ReplayTiming:
    the arguments where given, else the job definition's, else the Kafka record timestamp + monotonous."""
    from airflow_flink_replay.core.manifest import EventTime
    from airflow_flink_replay.core.replay_job_spec import ReplayTiming

    if args.event_time_field is not None:
        event_time = (
            EventTime(source="field", field=args.event_time_field, unit=args.event_time_unit)
            if args.event_time_field
            else EventTime()
        )
    else:
        event_time = job.event_time if job is not None else EventTime()
    watermark = args.watermark if args.watermark is not None else (job.watermark if job is not None else "monotonous")
    idleness = args.idleness_ms if args.idleness_ms is not None else (job.idleness_ms if job is not None else None)
    return ReplayTiming(event_time=event_time, watermark=watermark, idleness_ms=idleness or None)


def load_job(args: argparse.Namespace, build_root: Path | None) -> Any:
    """The job definition of ``--agent-job``, or ``--agent-factory`` adapted to one."""
    from airflow_flink_replay.flink.agent_build import load_agent_factory, load_job_definition
    from airflow_flink_replay.flink.agent_job import AgentJob

    isolate = not args.no_isolate
    if args.agent_job:
        return load_job_definition(args.agent_job, isolate=isolate, build_root=build_root).job
    build = load_agent_factory(args.agent_factory, isolate=isolate, build_root=build_root)
    return AgentJob.from_factory(
        build.factory,
        key_field=args.key_field,
        mem0_config=json.loads(args.mem0_config) if args.mem0_config else None,
        agent_options=json.loads(args.agent_options) if args.agent_options else None,
        ref=args.agent_factory,
        field_name="--agent-factory",
    )


def java_properties(args: argparse.Namespace) -> dict[str, str] | None:
    """The Kafka connector's client properties of ``--kafka-security`` (references resolved here, inside Flink)."""
    from airflow_flink_replay.core.kafka_security import KafkaClientSecurity

    security = KafkaClientSecurity.from_arg(args.kafka_security)
    return security.java_properties() if security else None


def source_stream(env: Any, args: argparse.Namespace, timing: Any, properties: dict[str, str] | None = None) -> Any:
    """The Kafka source of raw bytes with production's event time and watermarks (``properties``: a secured
    broker's client properties, :func:`java_properties`)."""
    from airflow_flink_replay.flink.event_time import watermark_strategy_for
    from airflow_flink_replay.flink.kafka import unbounded_source

    source = unbounded_source(
        args.bootstrap, args.source_topic, args.group_id or f"afr-{args.job_name}", properties=properties
    )
    if timing.event_time.source == "field":  # a Python timestamp assigner cannot run inside the source
        from pyflink.common import WatermarkStrategy

        stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "source").uid(SOURCE_UID)
        return stream.assign_timestamps_and_watermarks(watermark_strategy_for(timing)).uid(WATERMARK_UID)
    return env.from_source(source, watermark_strategy_for(timing), "source").uid(SOURCE_UID)


def cassette_plan_hook(args: argparse.Namespace, job: Any) -> Any:
    """The plan hook wrapping production's recorded resources (``--cassette-topic``), or None."""
    if not args.cassette_topic:
        return None
    from airflow_flink_replay.core.cassette import CassetteRecording
    from airflow_flink_replay.flink.agent_job import audit_key_source
    from airflow_flink_replay.flink.proxies import record_plan_resources

    recording = CassetteRecording(
        bootstrap=args.bootstrap,
        topic=args.cassette_topic,
        record=tuple(s.strip() for s in args.cassette_record.split(",") if s.strip()),
        security=args.kafka_security,  # references only; resolved when the producer opens
        namespace=args.job_identifier,
    )

    def hook(plan: Any, stage: Any) -> None:
        key_field, key_selector = audit_key_source(stage.job, args.key_field)  # cassette keys: as the replays' audit
        report = record_plan_resources(plan, recording, key_field, key_selector)
        logging.info("production: calls of stage %s recorded to %s for %s", stage.name, recording.topic,
                     report["wrapped"])  # fmt: skip

    return hook


def production_mem0_config(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--mem0-config`` with the memory journal of ``--memory-journal-topic`` named in it (or as given)."""
    config = json.loads(args.mem0_config) if args.mem0_config else None
    if not args.memory_journal_topic:
        return config
    from airflow_flink_replay.memory.journal import JOURNAL_KEY, JournalTarget

    journal = JournalTarget(topic=args.memory_journal_topic, bootstrap=args.bootstrap, security=args.kafka_security)
    return {**(config or {}), JOURNAL_KEY: journal.model_dump()}


def build_production(env: Any, args: argparse.Namespace) -> Any:
    """Add the production pipeline to ``env``; returns the output stream."""
    from airflow_flink_replay.flink.agent_build import build_folder
    from airflow_flink_replay.flink.agent_pin import AgentPin
    from airflow_flink_replay.flink.capture import CaptureConfig
    from airflow_flink_replay.flink.kafka import add_connector_jars, string_sink
    from airflow_flink_replay.flink.pipeline import AgentRuntimeConfig, apply_agent_job

    add_connector_jars(env, [j for j in args.jars.split(",") if j])
    env.set_parallelism(1)
    if args.max_parallelism:
        env.set_max_parallelism(args.max_parallelism)
    env.enable_checkpointing(args.checkpoint_interval_ms)
    build_root = None if args.no_isolate else build_folder("afr-build-production-")
    job = load_job(args, build_root)
    if build_root is not None:
        env.add_python_file(str(build_root))
    properties = java_properties(args)  # resolved once, for the source and the sink
    stream = source_stream(env, args, production_timing(args, job), properties)
    capture = (
        CaptureConfig(
            bootstrap=args.bootstrap,
            topic=args.capture_topic,
            job=args.job_identifier or args.job_name,
            source_topic=args.source_topic,
            security=args.kafka_security,  # references only; the tee resolves them when it opens
        )
        if args.capture_topic
        else None
    )
    out = apply_agent_job(
        env,
        stream,
        job,
        runtime=AgentRuntimeConfig(
            bootstrap=args.bootstrap,
            action_state_topic=args.action_state_topic,
            job_identifier=args.job_identifier or None,
        ),
        pin=AgentPin(uid=args.agent_uid or None, max_parallelism=args.max_parallelism or None),
        capture=capture,
        plan_hook=cassette_plan_hook(args, job),
        mem0_config=production_mem0_config(args),
    )
    out.sink_to(string_sink(args.bootstrap, args.sink_topic, properties)).uid(SINK_UID).name("sink")
    return out


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    from airflow_flink_replay.flink.environment import job_environment

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    env = job_environment()
    build_production(env, args)
    env.execute(args.job_name)


if __name__ == "__main__":
    main()

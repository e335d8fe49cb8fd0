"""A production agent job built with the shared pipeline builder (the example's and the tests' production job).

    Kafka source (uid afr-source, watermarks in the source; with ``--event-time-field`` a timestamp/watermark
      operator afr-watermarks after it) → normalise → capture tee → key by
      → agent (``--agent-uid`` pinned, or no uid at all with ``--agent-uid ''``) → output → Kafka sink

Kafka action-state store, checkpointing, ``job-identifier`` = ``--job-identifier``. Run with
``flink run -d -py production_job.py -- --agent-factory examples.review_agent.v1.agent:build_agent ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

SOURCE_UID = "afr-source"
SINK_UID = "afr-sink"
WATERMARK_UID = "afr-watermarks"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Program arguments."""
    p = argparse.ArgumentParser(prog="production_job")
    p.add_argument("--agent-factory", required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--source-topic", required=True)
    p.add_argument("--sink-topic", required=True)
    p.add_argument("--capture-topic", default="", help="capture tee topic ('' = no tee)")
    p.add_argument("--action-state-topic", required=True)
    p.add_argument("--job-identifier", default="")
    p.add_argument("--agent-uid", default="afr-agent", help="uid of the agent operator ('' = leave it auto)")
    p.add_argument("--max-parallelism", type=int, default=0)
    p.add_argument("--mem0-config", default="", help="mem0 config as JSON")
    p.add_argument("--jars", default="", help="comma-separated connector jars")
    p.add_argument("--group-id", default="")
    p.add_argument("--watermark", default="monotonous", help='"none", "monotonous" or "bounded:<ms>"')
    p.add_argument("--idleness-ms", type=int, default=0, help="watermark idleness timeout (0 = never idle)")
    p.add_argument(
        "--event-time-field", default="", help="JSONPath of the event time in the value ('' = Kafka record timestamp)"
    )
    p.add_argument("--event-time-unit", default="ms", choices=["ms", "s", "iso8601"])
    p.add_argument("--checkpoint-interval-ms", type=int, default=2000)
    p.add_argument("--job-name", default="afr-production")
    p.add_argument("--key-field", default="customer")
    p.add_argument(
        "--no-isolate",
        action="store_true",
        help="import the agent factory by its own module name (default: content-hashed copy, see "
        "airflow_flink_replay.flink.agent_build)",
    )
    return p.parse_args(argv)


def production_timing(args: argparse.Namespace) -> Any:
    """Production's event time and watermark strategy (what its replay manifest must record) as a ReplayTiming."""
    from airflow_flink_replay.core.manifest import EventTime
    from airflow_flink_replay.core.replay_job_spec import ReplayTiming

    event_time = (
        EventTime(source="field", field=args.event_time_field, unit=args.event_time_unit)
        if args.event_time_field
        else EventTime()
    )
    return ReplayTiming(event_time=event_time, watermark=args.watermark, idleness_ms=args.idleness_ms or None)


def build_production(env: Any, args: argparse.Namespace) -> Any:
    """Add the production pipeline to ``env``."""
    from airflow_flink_replay.flink.agent_build import load_agent_factory
    from airflow_flink_replay.flink.agent_pin import AgentPin
    from airflow_flink_replay.flink.capture import CaptureConfig
    from airflow_flink_replay.flink.event_time import watermark_strategy_for
    from airflow_flink_replay.flink.kafka import add_connector_jars, string_sink, unbounded_source
    from airflow_flink_replay.flink.pipeline import AgentRuntimeConfig, build_agent_pipeline

    add_connector_jars(env, [j for j in args.jars.split(",") if j])
    env.set_parallelism(1)
    if args.max_parallelism:
        env.set_max_parallelism(args.max_parallelism)
    env.enable_checkpointing(args.checkpoint_interval_ms)
    build_root = None if args.no_isolate else Path(tempfile.mkdtemp(prefix="afr-build-production-"))
    build = load_agent_factory(args.agent_factory, isolate=not args.no_isolate, build_root=build_root)
    if build_root is not None:
        env.add_python_file(str(build_root))
    agent = build.factory(mem0_config=json.loads(args.mem0_config) if args.mem0_config else None)
    source = unbounded_source(args.bootstrap, args.source_topic, args.group_id or f"afr-{args.job_name}")
    timing = production_timing(args)
    if timing.event_time.source == "field":  # a Python timestamp assigner cannot run inside the source
        from pyflink.common import WatermarkStrategy

        stream = env.from_source(source, WatermarkStrategy.no_watermarks(), "source").uid(SOURCE_UID)
        stream = stream.assign_timestamps_and_watermarks(watermark_strategy_for(timing)).uid(WATERMARK_UID)
    else:
        stream = env.from_source(source, watermark_strategy_for(timing), "source").uid(SOURCE_UID)
    capture = (
        CaptureConfig(
            bootstrap=args.bootstrap,
            topic=args.capture_topic,
            key_field=args.key_field,
            job=args.job_identifier or args.job_name,
            source_topic=args.source_topic,
        )
        if args.capture_topic
        else None
    )
    out = build_agent_pipeline(
        env,
        stream,
        agent,
        runtime=AgentRuntimeConfig(
            bootstrap=args.bootstrap,
            action_state_topic=args.action_state_topic,
            job_identifier=args.job_identifier or None,
        ),
        key_field=args.key_field,
        pin=AgentPin(uid=args.agent_uid or None, max_parallelism=args.max_parallelism or None),
        capture=capture,
    )
    out.sink_to(string_sink(args.bootstrap, args.sink_topic)).uid(SINK_UID).name("sink")
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

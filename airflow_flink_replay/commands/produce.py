"""``flink-replay produce``: sample input from a JSONL file to production's source topic on the local stack.

Each line is sent as it is (its bytes unchanged: the capture tee records exactly what production read),
keyed by ``--key-field`` when given. The topic is ``--topic``, or the spec's ``production.input_topic``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``produce``."""
    p = sub.add_parser("produce", help="produce records from a JSONL file to production's source topic")
    p.add_argument("--file", type=Path, required=True, help="JSONL file: one JSON object per line")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--spec", type=Path, help="a ReplaySpec YAML: its production.input_topic")
    where.add_argument("--topic", help="the topic to produce to")
    p.add_argument("--key-field", default=None, help="field whose value is the Kafka key (default: no key)")
    p.add_argument("--rate", type=float, default=0.0, help="records per second (default: as fast as possible)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Read and check every line, then produce them in order."""
    from airflow_flink_replay.local.own_job import OwnJobError, produce_jsonl, read_jsonl, running_stack

    try:
        topic = args.topic or _spec_topic(args.spec)
        records = read_jsonl(args.file, args.key_field)
        stack = running_stack()
        sent = produce_jsonl(stack.kafka_bootstrap, topic, records, rate=args.rate)
    except OwnJobError as err:
        print(f"produce: {err}", file=sys.stderr)
        return 2
    print(f"produced {sent} record(s) from {args.file} to {topic} ({stack.kafka_bootstrap})")
    return 0


def _spec_topic(path: Path) -> str:
    from airflow_flink_replay.local.own_job import load_spec

    return load_spec(path).production.input_topic

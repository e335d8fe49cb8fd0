"""``flink-replay produce``: sample input from a JSONL file to production's source topic on the local stack.

Each line is sent as it is (its bytes unchanged: the capture tee records exactly what production read),
keyed by ``--key-field`` when given. The topic is ``--topic``, or the spec's ``production.input_topic``.

With ``--spec`` the records are for the spec's production: when no job of its name runs on the stack (it failed,
was cancelled, or was never deployed) nothing is sent and the command fails (exit 1) with the newest job's
cause — records sent to a dead production would wait unread. ``--topic`` sends without asking.

Exit codes: 0 sent; 1 production does not run (nothing sent) or a record was not delivered; 2 a wrong file, spec
or topic, or the stack is not up (one line naming it and the fix); 64 a command line that does not parse.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_flink_replay.commands.arguments import non_negative_float, topic_problems
from airflow_flink_replay.commands.output import one_line, printable

if TYPE_CHECKING:
    from airflow_flink_replay.local.stack import StackInfo


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``produce``."""
    p = sub.add_parser("produce", help="produce records from a JSONL file to production's source topic")
    p.add_argument("--file", type=Path, required=True, help="JSONL file: one JSON object per line")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--spec", type=Path, help="a ReplaySpec YAML: its production.input_topic")
    where.add_argument("--topic", help="the topic to produce to")
    p.add_argument("--key-field", default=None, help="field whose value is the Kafka key (default: no key)")
    p.add_argument("--rate", type=non_negative_float, default=0.0,
                   help="records per second (default: as fast as possible)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Read and check every line, then produce them in order."""
    from airflow_flink_replay.exceptions import StackSetupError
    from airflow_flink_replay.local.own_job import OwnJobError, load_spec, produce_jsonl, read_jsonl, running_stack

    try:
        if problem := topic_problems("--topic", args.topic):
            raise OwnJobError(problem)
        spec = load_spec(args.spec) if args.spec is not None else None
        topic = spec.production.input_topic if spec is not None else str(args.topic)
        records = read_jsonl(args.file, args.key_field)
        stack = running_stack()
    except (OwnJobError, StackSetupError) as err:
        print(f"produce: {one_line(err)}", file=sys.stderr)
        return 2
    if spec is not None:
        dead = _not_running(stack, spec.production.job_name)
        if dead:
            print(printable(f"produce: {dead}", keep="\n"), file=sys.stderr)
            return 1
    try:
        sent = produce_jsonl(stack.kafka_bootstrap, topic, records, rate=args.rate)
    except OwnJobError as err:
        print(f"produce: {one_line(err)}", file=sys.stderr)
        return 2
    print(f"produced {sent} record(s) from {args.file} to {topic} ({stack.kafka_bootstrap})")
    return 0


def _not_running(stack: StackInfo, job_name: str) -> str:
    """Why the records would not be read (production's newest job is not live), or ``""``."""
    from airflow_flink_replay.core.flink_models import LIVE_STATES
    from airflow_flink_replay.local.own_job import production_state

    state, cause = production_state(stack, job_name)
    if state in LIVE_STATES:
        return ""
    found = "no job of that name" if state == "NONE" else f"its newest job is {state}" + (f": {cause}" if cause else "")
    return (f"production {job_name!r} does not run on the stack ({found}); nothing was sent.\nFix: deploy it "
            "(`flink-replay deploy ...`, which reports why a job fails), or give --topic to send anyway")

"""``flink-replay deploy``: your own job as production on the local stack, and a replay spec for it.

Submits the production entry (``airflow_flink_replay/flink/production_job.py``) with your job definition
(``--agent-job module:attr``) or agent factory (``--agent-factory module:attr``) to the stack's
production cluster, reading ``<name>-input`` and writing ``<name>-outputs``, with the capture tee to
``<name>-capture`` and the action-state store on ``<name>-action-state`` (topics created if missing).
``--spec-out`` writes the ReplaySpec of that production, ready for ``flink-replay run-dag --spec``, and checks
its ``compare_key`` against the outputs production already wrote (when it did: a fresh topic has none yet).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_flink_replay.local.stack import StackInfo

ROOT = Path(__file__).resolve().parent.parent.parent


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``deploy``."""
    p = sub.add_parser("deploy", help="deploy your job as production on the local stack (and write its spec)")
    agent = p.add_mutually_exclusive_group(required=True)
    agent.add_argument("--agent-job", metavar="MODULE:ATTR", help="your job definition (AgentJob)")
    agent.add_argument("--agent-factory", metavar="MODULE:ATTR", help="an agent factory (the older form)")
    p.add_argument("--name", required=True, help="production's Flink job name, job identifier and topic prefix")
    p.add_argument("--python-path", type=Path, action="append", default=[], metavar="DIR",
                   help="folder your package is imported from (repeatable; default: the current folder)")
    p.add_argument("--key-field", default=None, help="with --agent-factory: the input's key field (default customer)")
    p.add_argument("--source-topic", help="default <name>-input")
    p.add_argument("--sink-topic", help="default <name>-outputs")
    p.add_argument("--capture-topic", help="default <name>-capture")
    p.add_argument("--action-state-topic", help="default <name>-action-state")
    p.add_argument("--spec-out", type=Path, help="write the ReplaySpec of this production here")
    p.add_argument("--candidate", metavar="MODULE:ATTR", help="the spec's candidate (same form as the agent)")
    p.add_argument("--window", type=int, default=40, help="the spec's records per replay window")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the references, link your package into the stack's Flink side, submit production, write the spec."""
    from airflow_flink_replay.local.demo import AgentRef, DemoTopics, submit_production, write_spec
    from airflow_flink_replay.local.own_job import OwnJobError, check_reference, link_python_path, running_stack

    agent = AgentRef(reference=args.agent_job or args.agent_factory,
                     kind="agent_job" if args.agent_job else "agent_factory", key_field=args.key_field)
    kind, option = agent.kind, agent.option
    python_path = args.python_path or [Path.cwd()]
    topics = DemoTopics(
        reviews=args.source_topic or f"{args.name}-input",
        outputs=args.sink_topic or f"{args.name}-outputs",
        capture=args.capture_topic or f"{args.name}-capture",
        action_state=args.action_state_topic or f"{args.name}-action-state",
        cassette=f"{args.name}-cassette",
    )
    try:
        if kind == "agent_job" and args.key_field:
            raise OwnJobError("--key-field is for --agent-factory.\nFix: your job definition's key selector "
                              "keys the input; drop --key-field")
        check_reference(option, agent.reference, python_path, ROOT)
        if args.candidate:
            check_reference("--candidate", args.candidate, python_path, ROOT)
        stack = running_stack()
        linked = [p for p in python_path if p.resolve() != ROOT]  # the checkout is linked by the stack itself
        if linked:
            pth = link_python_path(stack, linked)
            print(f"Flink side imports your package from {', '.join(str(p) for p in linked)} ({pth})")
        job_id, submitted = submit_production(stack, topics, job_name=args.name, job_identifier=args.name,
                                              agent=agent)
    except OwnJobError as err:
        print(f"deploy: {err}", file=sys.stderr)
        return 2
    print(f"production {args.name}: Flink job {job_id} {'submitted' if submitted else 'was already running'} "
          f"({stack.flink_rest_url}/#/job/running/{job_id}/overview)")
    print(f"  input {topics.reviews} -> outputs {topics.outputs}; capture {topics.capture}; "
          f"cassette {topics.cassette}; action state {topics.action_state}")
    if args.spec_out:
        write_spec(stack, topics, args.spec_out, name=args.name, job_name=args.name, job_identifier=args.name,
                   window_records=args.window, runs_dir=Path(stack.workdir) / "runs" / args.name, agent=agent,
                   candidate=args.candidate)
        print(f"  spec: {args.spec_out} (flink-replay run-dag gate --spec {args.spec_out})")
        check_compare_key(stack, topics.outputs, args.spec_out)
    return 0


#: Production outputs read to check the spec's compare key, and how long the topic may stay quiet meanwhile.
KEY_CHECK_OUTPUTS = 500
KEY_CHECK_IDLE_S = 2.0


def check_compare_key(stack: StackInfo, topic: str, spec: Path) -> None:
    """Warn when the spec's ``compare_key`` is not unique among the outputs production already wrote: several
    outputs per key are aligned per input record (key + event time), which works, but a field unique per output
    (if the agent has one) aligns them exactly. A check that cannot run is said, never fatal: the spec is
    written, and the comparison states its alignment anyway (reason ALIGNMENT)."""
    import yaml

    from airflow_flink_replay.core.compare.alignment import KeyShape

    key = str((yaml.safe_load(spec.read_text()) or {}).get("compare_key") or "$.id")
    try:
        outputs = first_outputs(stack.kafka_bootstrap, topic)
    except Exception as err:  # the deploy succeeded; the check is advice
        print(f"  compare_key {key} not checked: cannot read {topic}: {err}")
        return
    if not outputs:
        print(f"  compare_key {key} not checked: no outputs on {topic} yet")
        return
    shape = KeyShape.of(outputs, key)
    if shape.several:
        print(f"warning: in production's first {len(outputs)} outputs on {topic}, {shape.not_unique(key)}. "
              "The comparison aligns such outputs per input record (key + event time) and says so (reason "
              f"ALIGNMENT).\nFix: set compare_key in {spec} to a field unique per output if there is one",
              file=sys.stderr)


def first_outputs(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Up to :data:`KEY_CHECK_OUTPUTS` JSON-object outputs from the start of ``topic``, read until it stays
    quiet for :data:`KEY_CHECK_IDLE_S` (counted by consuming: tansu's high watermark is wrong for the batches
    Flink's sink writes)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    parts = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"flink-replay-deploy-{uuid.uuid4().hex[:12]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out: list[dict[str, Any]] = []
    quiet_since = time.monotonic()
    try:
        while len(out) < KEY_CHECK_OUTPUTS and time.monotonic() - quiet_since < KEY_CHECK_IDLE_S:
            msg = consumer.poll(0.5)
            raw = msg.value() if msg is not None and not msg.error() else None
            if not raw:
                continue
            quiet_since = time.monotonic()
            try:
                value = json.loads(raw)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
    finally:
        consumer.close()
    return out


"""``flink-replay deploy``: your own job as production on the local stack, and a replay spec for it.

Submits the production entry (``airflow_flink_replay/flink/production_job.py``) with your job definition
(``--agent-job module:attr``) or agent factory (``--agent-factory module:attr``) to the stack's
production cluster, reading ``<name>-input`` and writing ``<name>-outputs``, with the capture tee to
``<name>-capture`` and the action-state store on ``<name>-action-state`` (topics created if missing).
``--spec-out`` writes the ReplaySpec of that production, ready for ``flink-replay run-dag --spec``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
    return 0


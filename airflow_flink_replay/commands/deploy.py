"""``flink-replay deploy``: your own job as production on the local stack, and a replay spec for it.

Submits the production entry (``airflow_flink_replay/flink/production_job.py``) with your job definition
(``--agent-job module:attr``) or agent factory (``--agent-factory module:attr``) to the stack's
production cluster, reading ``<name>-input`` and writing ``<name>-outputs``, with the capture tee to
``<name>-capture`` and the action-state store on ``<name>-action-state`` (topics created if missing).
``--spec-out`` writes the ReplaySpec of that production, ready for ``flink-replay run-dag --spec``, and checks
its ``compare_key`` against the outputs production already wrote (when it did: a fresh topic has none yet).

Before it submits, the agent check runs on the job definition in the stack's Flink-side Python (imported, built,
its deserializer, key selector and output serializer imported the way Flink's Python worker imports them, its
plan compiled): a definition that would fail in Flink is refused there, with the Python error and the fix. After
it submits, ``deploy`` waits (``--wait``, 120 s) until production runs every task and has completed a
checkpoint; a job that fails or keeps restarting is reported with the Python error of the failing task.

Exit codes: 0 production runs (and the spec is written); 1 production does not run: refused by the agent
check (nothing submitted), the submission failed, or the job failed, kept restarting or completed no checkpoint
in time; 2 a wrong name, topic, reference, folder or --spec-out, or the stack is not up (one line naming it and the
fix, before anything is submitted); 64 a command line that does not parse.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_flink_replay.commands.arguments import folder_problems, positive_float, positive_int, topic_problems
from airflow_flink_replay.commands.output import one_line, printable

if TYPE_CHECKING:
    from airflow_flink_replay.core.agent_check import DefinitionFacts
    from airflow_flink_replay.local.demo import AgentRef, DemoTopics
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
    p.add_argument("--window", type=positive_int, default=40, help="the spec's records per replay window")
    p.add_argument("--wait", type=positive_float, default=120.0, metavar="SECONDS",
                   help="how long production may take to run and complete its first checkpoint (default 120)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the references and the definition, link your package into the stack's Flink side, submit production,
    wait until it runs and checkpoints, write the spec (exit codes: the module docstring)."""
    from airflow_flink_replay.exceptions import FlinkRestError, FlinkSubmissionError, StackSetupError
    from airflow_flink_replay.local.demo import AgentRef, submit_production, write_spec
    from airflow_flink_replay.local.own_job import OwnJobError, production_runs

    agent = AgentRef(reference=args.agent_job or args.agent_factory,
                     kind="agent_job" if args.agent_job else "agent_factory", key_field=args.key_field)
    topics = _topics(args)
    try:
        if problem := _option_problems(args):
            raise OwnJobError(problem)
        stack = _prepared_stack(args, agent)
    except (OwnJobError, StackSetupError) as err:
        print(f"deploy: {one_line(err)}", file=sys.stderr)
        return 2
    try:
        refused, facts = _refused(stack, agent)
        if refused:
            print(printable(f"deploy: {refused}", keep="\n"), file=sys.stderr)
            return 1
        job_id, submitted = submit_production(stack, topics, job_name=args.name, job_identifier=args.name,
                                              agent=agent)
        running = production_runs(stack, job_id, submitted=submitted, timeout=args.wait)
    except OwnJobError as err:
        print(printable(f"deploy: {err}", keep="\n"), file=sys.stderr)
        return 1
    except (FlinkRestError, FlinkSubmissionError) as err:
        fix = "" if "\nFix:" in str(err) else "\nFix: correct the cause above, then deploy again"
        print(printable(f"deploy: production {args.name} could not be submitted: {err}{fix}", keep="\n"),
              file=sys.stderr)
        return 1
    restarts = f"; {running.failures} restart(s) before: {running.newest_failure}" if running.failures else ""
    print(f"production {args.name}: Flink job {job_id} {'submitted' if submitted else 'was already running'}, "
          f"runs (checkpoint {running.checkpoint_id} completed{restarts}) "
          f"({stack.flink_rest_url}/#/job/running/{job_id}/overview)")
    print(f"  input {topics.reviews} -> outputs {topics.outputs}; capture {topics.capture}; "
          f"cassette {topics.cassette}; action state {topics.action_state}")
    if args.spec_out:
        write_spec(stack, topics, args.spec_out, name=args.name, job_name=args.name, job_identifier=args.name,
                   window_records=args.window, runs_dir=Path(stack.workdir) / "runs" / args.name, agent=agent,
                   candidate=args.candidate, timing=spec_timing(facts))
        print(f"  spec: {args.spec_out} (flink-replay run-dag gate --spec {args.spec_out})")
        check_compare_key(stack, topics.outputs, args.spec_out)
    return 0


def _option_problems(args: argparse.Namespace) -> str:
    """What is wrong with the name, the topics, the folders or --spec-out (``""``: nothing), found before the
    stack is asked: a name that cannot be a job name, a topic prefix or (with --spec-out) a spec name would
    otherwise fail after production was deployed."""
    from airflow_flink_replay.core.replay_spec import MAX_TOPIC_NAME, is_spec_name, job_name_problem

    if problem := job_name_problem(args.name):
        return f"--name {args.name[:60]!r} {problem}"
    if len(args.name) > MAX_TOPIC_NAME - len("-action-state") or topic_problems("--name", args.name):
        return (f"--name {args.name[:60]!r}: production's topics are named after it (<name>-input, ...).\nFix: at most "
                f"{MAX_TOPIC_NAME - len('-action-state')} characters of a-z A-Z 0-9 . _ -, or name each topic")
    if args.spec_out and not is_spec_name(args.name):
        return (f"--name {args.name[:60]!r}: the spec (--spec-out) is named after it.\nFix: 2-63 characters of "
                "a-z 0-9 _ -, starting with a letter or digit")
    for option, topic in (("--source-topic", args.source_topic), ("--sink-topic", args.sink_topic),
                          ("--capture-topic", args.capture_topic), ("--action-state-topic", args.action_state_topic)):
        if problem := topic_problems(option, topic):  # an empty one too: it would fall back to <name>-...
            return problem
    if args.spec_out and (args.spec_out.is_dir() or not args.spec_out.parent.is_dir()):
        return (f"--spec-out {args.spec_out}: {'a folder' if args.spec_out.is_dir() else 'its folder does not exist'}."
                "\nFix: the path of the spec file to write, in an existing folder")
    return folder_problems("--python-path", args.python_path)


def _topics(args: argparse.Namespace) -> DemoTopics:
    """Production's topics: the options, else ``<name>-input`` and so on."""
    from airflow_flink_replay.local.demo import DemoTopics

    return DemoTopics(
        reviews=args.source_topic or f"{args.name}-input",
        outputs=args.sink_topic or f"{args.name}-outputs",
        capture=args.capture_topic or f"{args.name}-capture",
        action_state=args.action_state_topic or f"{args.name}-action-state",
        cassette=f"{args.name}-cassette",
    )


def _prepared_stack(args: argparse.Namespace, agent: AgentRef) -> StackInfo:
    """The running stack, with the references checked and your package linked into its Flink side."""
    from airflow_flink_replay.local.own_job import OwnJobError, check_reference, link_python_path, running_stack

    python_path = args.python_path or [Path.cwd()]
    if agent.kind == "agent_job" and args.key_field:
        raise OwnJobError("--key-field is for --agent-factory.\nFix: your job definition's key selector "
                          "keys the input; drop --key-field")
    check_reference(agent.option, agent.reference, python_path, ROOT)
    if args.candidate:
        check_reference("--candidate", args.candidate, python_path, ROOT)
    stack = running_stack()
    linked = [p for p in python_path if p.resolve() != ROOT]  # the checkout is linked by the stack itself
    if linked:
        link = link_python_path(stack, linked)
        print(f"Flink side imports your package from {', '.join(str(p) for p in linked)} ({link.pth})")
        for package in link.shadowed:
            print(f"warning: a folder linked by an earlier deploy holds {package}; a production deployed from "
                  "there imports the new one when it restarts", file=sys.stderr)
    return stack


def _refused(stack: StackInfo, agent: AgentRef) -> tuple[str, DefinitionFacts | None]:
    """The agent check's refusal of production's definition (its problems), or ``""``; and its facts."""
    from airflow_flink_replay.local.own_job import check_definition

    report = check_definition(stack, agent)
    facts = report.facts.definition("production")
    if not report.refused:
        return "", facts
    return (f"production's job definition {agent.reference} would not run in Flink; nothing was submitted.\n"
            + "\n".join(report.problems)), facts


def spec_timing(facts: DefinitionFacts | None) -> dict[str, Any]:
    """What the spec says of production's time, from its definition (the agent check's facts): its event time
    and watermark (the manifest records them for the replays), and for a pipeline with windows the ``stop``
    quiesce (``drain`` would fire every open window before the savepoint) and outputs tied to the window's
    records by watermark (they are aggregates, stamped with their window's end)."""
    out: dict[str, Any] = {}
    if facts is None:
        return out
    if facts.event_time is not None and facts.event_time.source == "field":
        out["event_time"] = facts.event_time.model_dump(exclude_none=True)
    if facts.watermark and facts.watermark.startswith("bounded:"):
        out["watermark"] = {"max_out_of_orderness_ms": int(facts.watermark.split(":", 1)[1])}
    if any(s.kind == "window" for s in facts.stages):
        out["quiesce_mode"] = "stop"
        out["outputs_tied_by"] = "watermark"
    return out


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


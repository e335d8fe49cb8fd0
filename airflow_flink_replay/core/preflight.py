"""Preflight checks of a replay run that need no I/O: names, modes and the production plan.

The operator (``operators/preflight.py``) gathers the facts (the running job, its plan, the topics that
exist) and this module judges them, so every rule is unit-testable. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from airflow_flink_replay.core.replay_spec import ReplaySpec
from airflow_flink_replay.exceptions import PreflightError

AGENT_OPERATOR_NAME = "action-execute-operator"
#: Vertex names that betray event-time windows or timers (Flink's own operator names).
_EVENT_TIME = re.compile(r"(EventTime|TumblingEventTime|SlidingEventTime|EventTimeSession|Window\()", re.I)


@dataclass
class PreflightFindings:
    """Problems (refuse) and warnings (report) of one preflight."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def raise_if_any(self) -> None:
        """Raise :class:`PreflightError` listing every problem."""
        if self.problems:
            raise PreflightError("replay preflight refused:\n" + "\n".join(f"  - {p}" for p in self.problems))


def check_names(spec: ReplaySpec, run_tag: str) -> PreflightFindings:
    """Replay topics and namespaces must never be production's."""
    found = PreflightFindings()
    prod = spec.production
    for variant in spec.variants():
        ns = spec.fork_namespace(run_tag, variant)
        topic = spec.action_state_topic(run_tag, variant)
        if ns == prod.job_identifier:
            found.problems.append(
                f"the {variant} memory fork namespace {ns!r} equals production's job identifier; "
                "rename the spec (`name`) or production's `job_identifier`"
            )
        production_topics = (
            prod.action_state_topic, prod.input_topic, prod.capture_topic, prod.cassette_topic, prod.output_topic,
            prod.memory_journal_topic,
        )
        if topic in production_topics:
            found.problems.append(
                f"the {variant} action-state topic {topic!r} is one of production's topics; rename the spec"
            )
        for kind, result in spec.result_topics(run_tag, variant).model_dump().items():
            if result in production_topics:
                found.problems.append(
                    f"the {variant} {kind} topic {result!r} (its replay results) is one of production's topics; "
                    "rename the spec"
                )
    if prod.capture_topic == prod.input_topic:
        found.problems.append(
            f"capture_topic equals input_topic ({prod.input_topic!r}): the capture tee must write its own topic"
        )
    found.problems.extend(_shared_topics(spec))
    if prod.cassette_topic and prod.cassette_topic in (
        prod.input_topic, prod.capture_topic, prod.output_topic, prod.action_state_topic
    ):
        found.problems.append(
            f"cassette_topic {prod.cassette_topic!r} is another of production's topics: production records its "
            "calls to a topic of their own (production_job.py --cassette-topic)"
        )
    if prod.memory_journal_topic and prod.memory_journal_topic in (
        prod.input_topic, prod.capture_topic, prod.output_topic, prod.action_state_topic, prod.cassette_topic
    ):
        found.problems.append(
            f"memory_journal_topic {prod.memory_journal_topic!r} is another of production's topics: production "
            "journals its memory writes to a topic of their own (production_job.py --memory-journal-topic)"
        )
    return found


#: Production's topics that must be four topics (capture = input has its own message; the cassette and the
#: journal are checked in :func:`check_names`).
_DISTINCT_TOPICS = ("input_topic", "capture_topic", "output_topic", "action_state_topic")


def _shared_topics(spec: ReplaySpec) -> list[str]:
    """Two of production's input, capture, output and action-state topics that are one topic: the capture would
    hold the agent's state or its outputs, or production would read its own outputs or state as input."""
    prod = spec.production
    problems = []
    for i, first in enumerate(_DISTINCT_TOPICS):
        for second in _DISTINCT_TOPICS[i + 1 :]:
            topic = getattr(prod, first)
            if topic and topic == getattr(prod, second) and {first, second} != {"input_topic", "capture_topic"}:
                problems.append(
                    f"production.{first} and production.{second} are one topic ({topic!r}): production's input, "
                    "capture, output and action-state topics are four topics. Fix: give each its own topic"
                )
    return problems


#: The production program this package ships (its arguments are known).
_PRODUCTION_PROGRAM = "production_job"


def _our_program_arg(spec: ReplaySpec, option: str) -> str | None:
    """The value production's program gives ``option`` ('' when it does not), or None when production does not
    run this package's program (its arguments are not ours to read)."""
    program = spec.production.program
    ours = (program.module or "").endswith(_PRODUCTION_PROGRAM) or (program.entry_point or "").endswith(
        f"{_PRODUCTION_PROGRAM}.py"
    )
    if not ours:
        return None
    args = program.program_args
    return args[args.index(option) + 1] if option in args[:-1] else ""


def _cassette_mismatch(spec: ReplaySpec) -> str | None:
    """A warning when production runs this package's program but does not record to the spec's cassette topic
    (its tool calls would all be unmatched in the replays), or records to one the spec does not read."""
    prod = spec.production
    recorded = _our_program_arg(spec, "--cassette-topic")
    if recorded is None or (prod.cassette_topic or "") == recorded:
        return None
    if not prod.cassette_topic:
        return (f"production records its calls to {recorded!r} (--cassette-topic) but production.cassette_topic is "
                "not set: the replays are not served them (tools are recorded). Fix: set production.cassette_topic")
    return (f"production.cassette_topic is {prod.cassette_topic!r} but production's program records to "
            f"{recorded or 'no cassette topic'} (--cassette-topic): the replays' tool calls will be unmatched until "
            "production is resubmitted with it. Fix: add --cassette-topic to production.program's arguments")


def _journal_mismatch(spec: ReplaySpec) -> str | None:
    """A problem when production runs this package's program but does not journal its memory writes to the spec's
    journal topic: the memory cut would trust a journal that misses writes, and fork the wrong memory."""
    prod = spec.production
    journaled = _our_program_arg(spec, "--memory-journal-topic")
    if journaled is None or not prod.memory_journal_topic or journaled == prod.memory_journal_topic:
        return None
    return (f"production.memory_journal_topic is {prod.memory_journal_topic!r} but production's program journals "
            f"its memory writes to {journaled or 'no topic'} (--memory-journal-topic): the memory cut would miss "
            "production's writes. Fix: add --memory-journal-topic to production.program's arguments, or unset "
            "production.memory_journal_topic (the cut then reads the whole namespace)")


def check_production(
    spec: ReplaySpec,
    running: list[tuple[str, str]],
    vertex_names: list[str] | None,
    topics: set[str] | None,
) -> PreflightFindings:
    """Judge production: exactly one RUNNING job with the name, an agent vertex, the topics exist.

    :param running: ``(job_id, name)`` of every RUNNING job on the cluster.
    :param vertex_names: the production job's vertex names (None if no job was found).
    :param topics: topics on the broker (None if the broker was not asked).
    """
    found = PreflightFindings()
    prod = spec.production
    matching = [jid for jid, name in running if name == prod.job_name]
    if spec.quiesce_mode != "existing":
        if not matching:
            names = ", ".join(sorted({n for _, n in running})) or "none"
            found.problems.append(
                f"no RUNNING Flink job named {prod.job_name!r} (running: {names}); start production or fix "
                "production.job_name"
            )
        elif len(matching) > 1:
            found.problems.append(
                f"{len(matching)} RUNNING jobs are named {prod.job_name!r} ({', '.join(matching)}); "
                "production must be unique — cancel the duplicates"
            )
    if vertex_names is not None:
        if not any(AGENT_OPERATOR_NAME in v for v in vertex_names):
            found.problems.append(
                f"production's plan has no {AGENT_OPERATOR_NAME!r} vertex: is {prod.job_name!r} a Flink Agents job?"
            )
        windows = [v for v in vertex_names if _EVENT_TIME.search(v)]
        if windows and spec.quiesce_mode == "drain":
            found.problems.append(
                "quiesce_mode=drain emits MAX_WATERMARK and production has event-time windows/timers "
                f"({'; '.join(windows)[:200]}): they would fire early and Flink advises against resuming "
                "such a savepoint — use quiesce_mode=stop"
            )
    if spec.quiesce_mode == "savepoint":
        found.warnings.append(
            "quiesce_mode=savepoint: production keeps running — records that race the savepoint are not replayed "
            "and in-flight agent runs may be inside it (the report says how many); use drain or stop for an "
            "exact boundary"
        )
    recording = _cassette_mismatch(spec)
    if recording:
        found.warnings.append(recording)
    journal = _journal_mismatch(spec)
    if journal:
        found.problems.append(journal)
    if topics is not None:
        for label, topic in (
            ("input_topic", prod.input_topic),
            ("capture_topic", prod.capture_topic),
            ("action_state_topic", prod.action_state_topic),
            *([("cassette_topic", prod.cassette_topic)] if prod.cassette_topic else []),
            *([("memory_journal_topic", prod.memory_journal_topic)] if prod.memory_journal_topic else []),
        ):
            if topic not in topics:
                found.problems.append(f"production.{label} {topic!r} does not exist on the broker")
    return found

"""The agent check's job-side program: import both job definitions (and their worker-side code as Flink's Python
worker imports it, :mod:`~airflow_flink_replay.flink.worker_import`), build both plans, try captured records, and
run each agent on one of them (:mod:`~airflow_flink_replay.flink.sample_run`).

Run by Flink's PythonDriver before anything is stopped (``-pym airflow_flink_replay.flink.agent_check``), in the
cluster's own Python — where production and the replays import the user's package — so what it finds is what
the jobs will meet. It never raises for the user's code: every failure (import, agent construction, plan
compilation, deserialising a captured record) is caught and sent back as facts with the Python traceback
text; the Airflow side judges them (:mod:`airflow_flink_replay.core.agent_check`).

How the facts get back (``--emit``):

``plan`` (REST, the default)
    The program builds a one-operator job graph and calls ``execute()``; the Airflow side calls
    ``POST /jars/{id}/plan``, so Flink hands the graph back in the REST answer *without running anything*, and
    the facts travel in the name of that graph's only sink (``CARRIER_MARKER`` + URL-safe base64 of
    compressed JSON, which survives the plan's HTML escaping). Checked on the stack: a 300 kB name comes back
    whole in under a second. Why this and not the alternatives: the program's stdout and stderr go to the
    JobManager's log, which REST offers only as a whole file some deployments do not expose; a per-run Kafka
    topic would need creating, reading and deleting, and a producer on the JobManager host; a shared file
    system is exactly what a real deployment does not have. The plan call needs nothing but REST, leaves no
    job, topic or file behind, and is what the identity preflight already uses.
``stdout`` (CLI submitter)
    The program runs on the worker (``flink run``), so its own output is the channel: one line with the
    marker, and no ``execute()`` (which would submit a job).

Captured records are read here, from the capture topic, with the job side's Kafka client: record contents
never travel in program arguments. Only the newest few per partition are read, with a private consumer that
commits nothing.

Never imports Airflow. Imports Flink Agents (and PyFlink for ``--emit plan``) lazily.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from airflow_flink_replay.core.agent_check import (
    ActionFact,
    CheckFacts,
    DefinitionFacts,
    InputTrial,
    PythonFailure,
    ResourceFact,
    SampleFacts,
    StageFact,
    encode_facts,
)
from airflow_flink_replay.core.kafka_security import KafkaClientSecurity
from airflow_flink_replay.core.policy import ReplayPolicy

MODULE = "airflow_flink_replay.flink.agent_check"
#: Traceback lines kept per error (the innermost frames: where the user's code raised).
TRACEBACK_LINES = 60
#: Resource types the replay's policy proxies govern (the others are not called by an action directly).
_GOVERNED = {"tool", "chat_model", "vector_store", "embedding_model"}
#: Attributes Flink Agents' decorators set, and what they declare.
_DECLARATIONS = (
    ("_listen_events", "action"),
    ("_is_tool", "tool"),
    ("_is_chat_model_setup", "chat model setup"),
    ("_is_chat_model_connection", "chat model connection"),
    ("_is_embedding_model_setup", "embedding model setup"),
    ("_is_embedding_model_connection", "embedding model connection"),
    ("_is_vector_store", "vector store"),
    ("_is_prompt", "prompt"),
    ("_is_mcp_server", "MCP server"),
)


@dataclass(frozen=True)
class CapturedRecord:
    """One record of the capture topic, as the deserializer gets it."""

    topic: str
    partition: int
    offset: int
    value: bytes

    @property
    def where(self) -> str:
        """``topic/partition@offset``."""
        return f"{self.topic}/{self.partition}@{self.offset}"


def python_error(exc: BaseException) -> PythonFailure:
    """``exc`` as text: type, message and the formatted traceback (its last :data:`TRACEBACK_LINES` lines)."""
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines()
    lines = [ln for ln in lines if not ln.startswith('  File "<frozen importlib')]  # the import machinery's frames
    if len(lines) > TRACEBACK_LINES:
        kept = lines[-(TRACEBACK_LINES - 2) :]
        lines = [lines[0], f"  ... ({len(lines) - 1 - len(kept)} lines left out)", *kept]
    return PythonFailure(type=type(exc).__name__, message=str(exc)[:2000], traceback="\n".join(lines))


def qualified(obj: Any) -> str:
    """``module.QualName`` of a class (builtins without the module)."""
    cls = obj if isinstance(obj, type) else type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


# --------------------------------------------------------------------------------------------- records
def read_captured(
    bootstrap: str, topic: str, count: int, timeout: float = 15.0, *, client: Mapping[str, str] | None = None
) -> tuple[list[CapturedRecord], str]:
    """The newest ``count`` records of ``topic`` (at most ``count`` per partition), and an error text or ``""``.

    A private consumer (``assign``, no group offsets committed) reads each partition from ``high - count`` to its
    end offset (offsets may have gaps: compacted or transactional topics), for at most ``timeout`` seconds.
    ``client``: librdkafka settings of a secured broker (:meth:`KafkaClientSecurity.librdkafka_config`).
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"afr-agent-check-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **(client or {}),
    })  # fmt: skip
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return [], f"topic {topic!r} not readable: {getattr(meta, 'error', 'missing')}"
        starts, ends = [], {}
        for partition in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                starts.append(TopicPartition(topic, partition, max(low, high - count)))
                ends[partition] = high
        if not starts:
            return [], ""
        consumer.assign(starts)
        records: list[CapturedRecord] = []
        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:  # until every partition was read to its end offset
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            partition, offset = msg.partition() or 0, msg.offset() or 0
            records.append(CapturedRecord(topic, partition, offset, msg.value() or b""))
            if offset >= ends.get(partition, 0) - 1:
                ends.pop(partition, None)
        records.sort(key=lambda r: (r.partition, r.offset))
        return records[-count:], ""
    except Exception as exc:  # the check reports it; the plans are still checked
        return [], f"{type(exc).__name__}: {exc}"
    finally:
        consumer.close()


def try_inputs(job: Any, records: Sequence[CapturedRecord]) -> InputTrial:
    """Deserialise ``records`` with ``job`` and select their keys; the first failure is the result. The key is
    shown by its text, as audit records and cassette entries name it."""
    from airflow_flink_replay.core.audit import key_text_of

    key_selector = getattr(job, "input_key_selector", None) or job.key_selector  # a pipeline: its input's key
    trial = InputTrial()
    for record in records:
        try:
            value = job.deserializer(record.value)
            key = key_selector(value)
            hash(key)
        except Exception as exc:
            return InputTrial(records=trial.records, error=python_error(exc), failed_record=record.where)
        trial = InputTrial(
            records=trial.records + 1, input_type=qualified(value), key=key_text_of(key)[:80], key_type=qualified(key)
        )
    return trial


# ------------------------------------------------------------------------------------------- definitions
def load_definition(ref: str, form: str, key_field: str, mem0_config: dict[str, Any] | None) -> Any:
    """The :class:`~airflow_flink_replay.flink.agent_job.AgentJob` behind ``ref`` (the factory form adapted)."""
    from airflow_flink_replay.flink.agent_build import load_agent_factory
    from airflow_flink_replay.flink.agent_job import AgentJob, load_agent_job

    if form == "job":
        return load_agent_job(ref)
    factory = load_agent_factory(ref, isolate=False).factory
    return AgentJob.from_factory(factory, key_field=key_field, mem0_config=mem0_config, ref=ref)


def invisible_declarations(agent_class: type) -> list[str]:
    """What a base class of ``agent_class`` declares (actions, tools, resources) that its plan will not have.

    Flink Agents builds the plan from ``agent_class.__dict__`` only: a subclass inherits none of it.
    """
    from flink_agents.api.agents.agent import Agent

    own = set(vars(agent_class))
    seen: set[str] = set()
    found: list[str] = []
    for base in agent_class.__mro__[1:]:
        if base is object or (isinstance(base, type) and issubclass(Agent, base)):
            continue
        for name, value in vars(base).items():
            if name in own or name in seen:
                continue
            func = getattr(value, "__func__", value)  # the decorators mark the staticmethod or its function
            kind = next((k for attr, k in _DECLARATIONS if hasattr(value, attr) or hasattr(func, attr)), None)
            if kind is not None:
                seen.add(name)
                found.append(f"{base.__qualname__}.{name} ({kind})")
    return found


def plan_facts(facts: DefinitionFacts, job: Any, plan: Any) -> None:
    """Fill ``facts`` with ``plan``'s actions and resources, which of them the policy proxy can wrap, and each
    resource's fingerprint (the Airflow side compares production's and the candidate's)."""
    from flink_agents.plan.agent_plan import BUILT_IN_ACTIONS

    from airflow_flink_replay.flink.proxies import rewrite_plan_resources

    builtin = {a.name for a in BUILT_IN_ACTIONS}
    facts.builtin_actions = sorted(n for n in plan.actions if n in builtin)
    facts.actions = [
        ActionFact(name=name, listens=list(act.listen_event_types))
        for name, act in plan.actions.items()
        if name not in builtin
    ]
    env_names = {r.name for r in job.env_resources}
    memory = job.memory.resource_name if job.memory is not None else None
    resources: list[ResourceFact] = []
    for rtype, named in (plan.resource_providers or {}).items():
        for name, provider in named.items():
            level: Literal["agent", "env", "memory"] = (
                "env" if name in env_names else "memory" if name == memory else "agent"
            )
            fingerprint, why = _fingerprint(provider, plan.config)  # before the rewrite below wraps it
            resources.append(ResourceFact(name=name, type=rtype.value, level=level, clazz=_provider_class(provider),
                                          fingerprint=fingerprint, fingerprint_error=why))  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="afr-agent-check-") as audit_dir:
        # rewrites this plan in place: it was built for this check only
        wrapped = rewrite_plan_resources(plan, ReplayPolicy(), "agent-check", audit_dir)
    unmediated = set(wrapped["unmediated"])
    for res in resources:
        if res.type in _GOVERNED:
            res.mediated = f"{res.type}:{res.name}" not in unmediated
    facts.resources = sorted(resources, key=lambda r: (r.type, r.name))


def _fingerprint(provider: Any, config: Any) -> tuple[str | None, str | None]:
    """A provider's fingerprint, or None and why: what tells the Airflow side which resources the candidate
    changed (:mod:`~airflow_flink_replay.flink.fingerprint`)."""
    from airflow_flink_replay.flink.fingerprint import provider_fingerprint

    try:
        found = provider_fingerprint(provider, config)
    except Exception as exc:  # the user's code: reported, never raised
        return None, f"{type(exc).__name__}: {exc}"[:300]
    return found, None if found else f"a {type(provider).__name__} is not fingerprinted"


def _provider_class(provider: Any) -> str:
    descriptor = getattr(provider, "descriptor", None)
    if descriptor is not None and getattr(descriptor, "target_clazz", None):
        return f"{getattr(descriptor, 'target_module', '')}.{descriptor.target_clazz}".lstrip(".")
    module, clazz = getattr(provider, "module", ""), getattr(provider, "clazz", "")
    return f"{module}.{clazz}".strip(".")


def inspect_definition(
    role: str,
    ref: str,
    form: str,
    records: Sequence[CapturedRecord],
    *,
    key_field: str = "customer",
    mem0_config: dict[str, Any] | None = None,
    policy: ReplayPolicy | None = None,
    sample_runs: int = 1,
) -> DefinitionFacts:
    """Import and build one definition, import its worker-side code as Flink's Python worker does, plan it, try
    it on ``records`` and run the agent on the first of them (``sample_runs`` > 0); every failure becomes facts."""
    from airflow_flink_replay.flink.agent_pipeline import AgentPipeline, as_pipeline
    from airflow_flink_replay.flink.sample_run import run_sample
    from airflow_flink_replay.flink.worker_import import worker_import_failure

    facts = DefinitionFacts(role=role, ref=ref, form=form, stage="import")  # type: ignore[arg-type]
    try:
        importlib.import_module(ref.split(":", 1)[0])
        facts.stage = "build"
        job = load_definition(ref, form, key_field, mem0_config)
        pipeline = as_pipeline(job)
        stage_jobs = [pipeline.stage_job(s) for s in pipeline.agent_stages()]
        agents = [j.build_agent() for j in stage_jobs]
        facts.agent_class = ", ".join(qualified(a) for a in agents)
        facts.key_serializer = key_serializer(pipeline.input_key_type)
        facts.invisible = [f for a in agents for f in invisible_declarations(type(a))]
        facts.event_time, facts.watermark = pipeline.event_time, pipeline.watermark
        if isinstance(job, AgentPipeline):
            facts.stages = stage_facts(pipeline)
        facts.stage = "worker"
        facts.error = worker_import_failure(job)
        if facts.error is not None:
            return facts
        facts.stage = "plan"
        for stage_job in stage_jobs:
            plan_facts(facts, stage_job, stage_job.build_plan(mem0_config))
        facts.stage = "input"
        facts.input = try_inputs(pipeline, records) if records else InputTrial()
        facts.stage = "done"
    except (Exception, SystemExit) as exc:  # a module that exits at import is reported like one that raises
        facts.error = python_error(exc)
        return facts
    if sample_runs > 0 and records and facts.input is not None and facts.input.error is None:
        sampled = sample_job(pipeline)
        if sampled is not None:
            facts.sample = run_sample(sampled, records[0].value, records[0].where, facts, policy or ReplayPolicy(),
                                      mem0_config)  # fmt: skip
    return facts


def sample_job(pipeline: Any) -> Any:
    """The agent a sample run tries on a captured record: the first stage's, when the first stage is an agent
    (fed the pipeline's deserialised input); None otherwise."""
    import dataclasses

    from airflow_flink_replay.flink.agent_pipeline import AgentStage

    first = pipeline.stages[0]
    if not isinstance(first, AgentStage):
        return None
    return dataclasses.replace(pipeline.stage_job(first), deserializer=pipeline.deserializer)


def stage_facts(pipeline: Any) -> list[StageFact]:
    """Each stage of a pipeline as facts: kind, the uid its operator gets, its key selector's fingerprint and key
    type, and whether a window assigns by event time."""
    from airflow_flink_replay.flink.agent_pipeline import AgentStage, WindowStage

    out = []
    for stage, uid in pipeline.stage_uids(None):
        key = stage.job.key_selector if isinstance(stage, AgentStage) else getattr(stage, "key_selector", None)
        key_type = stage.job.key_type if isinstance(stage, AgentStage) else getattr(stage, "key_type", None)
        out.append(StageFact(
            name=stage.name, kind=stage.kind, uid=uid, stateful=stage.stateful,
            key=_key_fingerprint(key) if key is not None else None,
            key_type=None if key is None else key_serializer(key_type),
            event_time=stage.is_event_time() if isinstance(stage, WindowStage) else None,
        ))  # fmt: skip
    return out


def key_serializer(key_type: Any) -> str:
    """How Flink serialises a key of ``key_type``: ``pickled`` for None (as Flink Agents keys), else its name."""
    return "pickled" if key_type is None else str(key_type)


def _key_fingerprint(key: Any) -> str:
    """A key selector's fingerprint: its code (a function) or its class and settings (an instance)."""
    from airflow_flink_replay.flink.fingerprint import function_fingerprint

    try:
        if callable(key) and hasattr(key, "__code__"):
            return str(function_fingerprint(key))
        return f"{qualified(key)}:{sorted(vars(key).items())!r}"
    except Exception:  # the user's object: a key that cannot be fingerprinted compares by its type
        return qualified(key)


# -------------------------------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The program's arguments (names and references only; never record contents or secrets)."""
    p = argparse.ArgumentParser(prog=MODULE)
    p.add_argument("--production", required=True, help='production\'s job definition "module:attr"')
    p.add_argument("--production-form", choices=("job", "factory"), default="job")
    p.add_argument("--candidate", help='the candidate\'s job definition "module:attr"')
    p.add_argument("--candidate-form", choices=("job", "factory"), default="job")
    p.add_argument("--key-field", default="customer", help="the factory form's JSON key field")
    p.add_argument("--mem0-config", default=None, help="JSON: the memory store config the agents are built with")
    p.add_argument("--capture-topic", default=None)
    p.add_argument("--bootstrap", default=None, help="Kafka bootstrap servers as seen from the job side")
    p.add_argument("--kafka-security", default=None, help="JSON: KafkaClientSecurity (password by reference)")
    p.add_argument("--samples", type=int, default=3, help="captured records to try per definition")
    p.add_argument(
        "--sample-runs",
        type=int,
        default=1,
        help="run the agent on the first captured record (0: do not; see flink.sample_run)",
    )
    p.add_argument("--policy", default=None, help="JSON: the run's ReplayPolicy (the sample run applies it)")
    p.add_argument("--emit", choices=("plan", "stdout"), default="plan")
    return p.parse_args(list(argv))


def collect(args: argparse.Namespace) -> CheckFacts:
    """Run every check of the program; never raises for the user's code."""
    try:
        from importlib.metadata import version

        agents_version: str | None = version("flink-agents")
    except Exception:
        agents_version = None
    facts = CheckFacts(flink_agents=agents_version, python=platform.python_version())
    records: list[CapturedRecord] = []
    if args.capture_topic and args.bootstrap and args.samples > 0:
        client = KafkaClientSecurity.librdkafka_config_of(args.kafka_security)
        records, error = read_captured(args.bootstrap, args.capture_topic, args.samples, client=client)
        facts.sample = SampleFacts(topic=args.capture_topic, records=len(records), error=error or None)
    mem0 = json.loads(args.mem0_config) if args.mem0_config else None
    policy = ReplayPolicy.model_validate_json(args.policy) if args.policy else ReplayPolicy()
    roles = [("production", args.production, args.production_form)]
    if args.candidate:
        roles.append(("candidate", args.candidate, args.candidate_form))
    for role, ref, form in roles:
        facts.definitions.append(inspect_definition(
            role, ref, form, records, key_field=args.key_field, mem0_config=mem0, policy=policy,
            sample_runs=args.sample_runs,
        ))  # fmt: skip
    return facts


def emit(facts: CheckFacts, how: str) -> None:
    """Send the facts back: in the job graph a ``/plan`` call returns (``plan``) or on stdout (``stdout``)."""
    text = encode_facts(facts)
    if how == "stdout":
        print(text, flush=True)
        return
    carry_in_job_graph(text, "afr-agent-check")


def carry_in_job_graph(text: str, job_name: str) -> None:
    """Hand Flink a one-operator job graph whose operator is named ``text`` (a ``/plan`` call returns it;
    nothing runs). Shared by the job-side programs that report through their plan."""
    from pyflink.common import Types
    from pyflink.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([job_name], type_info=Types.STRING()).print().name(text)
    env.execute(job_name)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point (``python -m airflow_flink_replay.flink.agent_check --production module:attr ...``)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    emit(collect(args), args.emit)


if __name__ == "__main__":
    main()

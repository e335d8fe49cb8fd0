"""The agent check: what the job side found in production's and the candidate's job definitions, judged.

Before anything is stopped, a short program runs on the job side (:mod:`airflow_flink_replay.flink.agent_check`,
through Flink's PythonDriver): it imports both job definitions, builds both Flink Agents plans, deserialises a
few captured records with each definition, and sends back :class:`CheckFacts` — facts only, Python errors as
their traceback text. This module judges those facts with the run's :class:`~airflow_flink_replay.core.policy.
ReplayPolicy` and production's agent identity (:func:`judge`) and renders the result for a person
(:meth:`AgentCheckReport.render`): the Airflow task log and the run record show the same text.

The check refuses (``problems``):

- a definition that cannot be imported or built, or whose plan cannot be compiled (the Python error's text,
  file and line are in the message);
- a definition whose worker-side code (deserializer, key selector, output serializer) cannot be imported the
  way Flink's Python worker imports it, where PyFlink refuses a Java gateway (stage ``worker``; a module that
  imports ``flink_agents.api.core_options`` at its top: :data:`GATEWAY_FIX`);
- an empty plan: no action of the user's (the framework's built-in actions do not count);
- a candidate plan that lost actions or resources production's has;
- a deserializer (or key selector) that cannot produce the agent's input from a captured record;
- a candidate that keys records differently from production (another key type or key serializer): the
  savepoint's per-key agent state would not be found;
- a sample run (one captured record through the agent, :class:`SampleRun`) that Flink Agents refused: an event
  it built from what the agent's resources returned did not validate — tool-call ids that are not UUIDs
  (:data:`TOOL_CALL_ID_FIX`). Any other failure of the sample is a warning.

The job side also fingerprints every resource of both plans (:mod:`airflow_flink_replay.flink.fingerprint`: a
tool's code, a prompt's text, a descriptor's class and arguments); :func:`changed_resources` names the candidate's
resources whose fingerprint differs from production's (or that production lacks). The report marks them, and the
replay DAG keeps them off production's cassette in the candidate's replay (``ReplayPolicy.changed``): a changed
tool is never served production's recorded answer.

A plain ``class Mine(ExistingAgent): pass`` is the common cause of the two plan refusals: flink-agents builds an
agent's plan from ``type(agent).__dict__``, so actions and resources declared on a base class are not in it.
The job side lists what a base class declares that the plan lacks (``invisible``), and the message names them.

The facts travel as text both ways (:func:`encode_facts` / :func:`decode_facts`: JSON, zlib, URL-safe base64
behind :data:`CARRIER_MARKER`) because the REST path carries them in an operator name of a job graph (see the
job-side module). Pure: pydantic only.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field

from airflow_flink_replay.core.carrier import carried, encode_carried
from airflow_flink_replay.core.identity import uid_to_operator_id
from airflow_flink_replay.core.manifest import EventTime
from airflow_flink_replay.core.policy import Decision, ReplayPolicy

__all__ = [
    "CARRIER_MARKER",
    "AgentCheckReport",
    "AgentIdentity",
    "CheckFacts",
    "DefinitionFacts",
    "PythonFailure",
    "ResourceDecision",
    "SampleRun",
    "StageFact",
    "changed_resources",
    "decode_facts",
    "encode_facts",
    "judge",
    "python_error_fix",
    "stage_problems",
    "stage_warnings",
]

#: What precedes the encoded facts in the job graph's operator name (REST) or on the program's stdout (CLI).
CARRIER_MARKER = "afr-agent-check:"
FACTS_SCHEMA = 1
Role = Literal["production", "candidate"]
#: The method a resource type's calls are judged by in the report (vector stores: one read, one write).
_CALL = {"chat_model": "chat", "tool": "call", "embedding_model": "embed"}
#: Resource types that are never called by an action directly (no policy decision of their own).
_NOT_CALLED = {
    "chat_model_connection": "used through a chat model setup (which the policy mediates)",
    "embedding_model_connection": "used through an embedding model setup (which the policy mediates)",
    "prompt": "text, no call",
    "mcp_server": "not mediated: its tools reach the server directly",
}


class PythonFailure(BaseModel):
    """A Python exception raised on the job side, as text."""

    type: str
    message: str
    traceback: str = Field(default="", description="the formatted traceback (file and line of every frame)")

    def headline(self) -> str:
        """``Type: message``."""
        return f"{self.type}: {self.message}" if self.message else self.type


class ActionFact(BaseModel):
    """One action of the plan and the events it listens to."""

    name: str
    listens: list[str] = Field(default_factory=list)


class ResourceFact(BaseModel):
    """One resource of the plan: declared on the agent, on the agents environment, or the memory binding."""

    name: str
    type: str
    level: Literal["agent", "env", "memory"] = "agent"
    clazz: str = ""
    mediated: bool | None = Field(default=None, description="the replay's policy proxy can wrap it (None: not a call)")
    fingerprint: str | None = Field(
        default=None,
        description="digest of its code, text or class and arguments (flink.fingerprint); None: not computed",
    )
    fingerprint_error: str | None = Field(default=None, description="why the fingerprint could not be computed")


class InputTrial(BaseModel):
    """Captured records deserialised with a definition: the agent's input type and key, or the error."""

    records: int = 0
    input_type: str | None = None
    key: str | None = None
    key_type: str | None = None
    error: PythonFailure | None = None
    failed_record: str | None = Field(default=None, description="topic/partition@offset of the record that failed")


class SampleRun(BaseModel):
    """One captured record through the agent on the job side (Flink Agents' local runner), every resource behind
    the replay policy and nothing done for real that the replays would not do: tool calls that would run are
    recorded instead, unmediated calls blocked (:mod:`airflow_flink_replay.flink.sample_run`)."""

    record: str | None = Field(default=None, description="topic/partition@offset of the record")
    skipped: str | None = Field(default=None, description="why the sample did not run (it is then not judged)")
    outputs: int = 0
    calls: list[str] = Field(default_factory=list, description="'type name.method: decision (outcome)' per call")
    substituted: bool = Field(default=False, description="a call was recorded or blocked instead of made")
    error: PythonFailure | None = None
    rejected_by_flink_agents: bool = Field(
        default=False,
        description="the error is Flink Agents refusing an event built from what the agent's resources returned "
        "(a pydantic ValidationError raised in flink_agents): the replays fail the same way",
    )
    timed_out: bool = False


class StageFact(BaseModel):
    """One stage of a pipeline definition (an ``AgentJob`` is one agent stage)."""

    name: str
    kind: Literal["agent", "window", "map", "filter", "flat_map"]
    uid: str | None = Field(default=None, description="the uid its operator gets (None: the agent pin's)")
    stateful: bool = False
    key: str | None = Field(default=None, description="fingerprint of its key selector (keyed stages)")
    key_type: str | None = None
    event_time: bool | None = Field(default=None, description="a window: assigned by event time (None: unknown)")


class DefinitionFacts(BaseModel):
    """What the job side found in one job definition."""

    role: Role
    ref: str
    form: Literal["job", "factory"] = "job"
    stage: str = Field(
        default="import",
        description="the last stage reached: import, build, worker (the worker-side code imported as Flink's "
        "Python worker imports it), plan, input, done",
    )
    error: PythonFailure | None = None
    agent_class: str | None = None
    actions: list[ActionFact] = Field(default_factory=list)
    builtin_actions: list[str] = Field(default_factory=list)
    resources: list[ResourceFact] = Field(default_factory=list)
    key_serializer: str | None = Field(
        default=None, description="how Flink serialises the key (AgentJob.key_type): pickled, string, long, int, ..."
    )
    invisible: list[str] = Field(
        default_factory=list,
        description="'Base.name (kind)' declared on a base class of the agent but absent from the plan",
    )
    input: InputTrial | None = None
    sample: SampleRun | None = None
    stages: list[StageFact] = Field(
        default_factory=list, description="a pipeline's stages in order (empty: one agent, an AgentJob)"
    )
    event_time: EventTime | None = Field(default=None, description="the definition's event time")
    watermark: str | None = Field(default=None, description="its watermark strategy: monotonous or bounded:<ms>")


class SampleFacts(BaseModel):
    """The captured records the job side read to try the deserializers."""

    topic: str
    records: int = 0
    error: str | None = None


class CheckFacts(BaseModel):
    """Everything the job-side program sends back."""

    schema_version: int = FACTS_SCHEMA
    definitions: list[DefinitionFacts] = Field(default_factory=list)
    sample: SampleFacts | None = None
    flink_agents: str | None = None
    python: str | None = None

    def definition(self, role: Role) -> DefinitionFacts | None:
        """The facts of ``role``'s definition, if it was checked."""
        return next((d for d in self.definitions if d.role == role), None)


class AgentIdentity(BaseModel):
    """How the replays will pin the agent operator to production's state."""

    uid: str | None = None
    uid_hash: str | None = None
    max_parallelism: int | None = None
    production_vertex: str | None = Field(default=None, description="production's running agent vertex id, if known")

    def describe(self) -> str:
        """One line for the report."""
        if self.uid:
            pin = f"uid {self.uid!r}"
        elif self.uid_hash or self.production_vertex:
            pin = f"uid hash {self.uid_hash or self.production_vertex} (production's agent vertex; it has no uid)"
        else:
            pin = "no pin known (production not running and no agent_uid in the spec)"
        mp = f", max parallelism {self.max_parallelism}" if self.max_parallelism else ""
        seen = ""
        if self.uid and self.production_vertex:
            same = self.uid_matches_production()
            seen = f"; production's running agent vertex {self.production_vertex}" + (
                " (the uid's id)" if same else " (NOT the uid's id)" if same is False else ""
            )
        return pin + mp + seen

    def uid_matches_production(self) -> bool | None:
        """Whether production's running agent vertex has the id Flink derives from ``uid`` (None: unknown)."""
        if not (self.uid and self.production_vertex):
            return None
        expected = uid_to_operator_id(self.uid)
        return None if expected is None else expected == self.production_vertex


Change = Literal["changed", "added"]


class ResourceDecision(BaseModel):
    """A resource of one definition and what the replay policy will do with its calls."""

    name: str
    type: str
    level: str
    decision: str
    change: Change | None = Field(
        default=None,
        description="candidate only: its fingerprint differs from production's (changed) or production has no "
        "such resource (added); its calls are then never served production's cassette",
    )

    def shown(self) -> str:
        """The decision as the table shows it: with the change and what it means for the cassette."""
        if self.change is None:
            return self.decision
        if self.decision.startswith("- ") or self.decision.startswith("UNMEDIATED"):
            return f"{self.decision} ({self.change})"
        return f"{self.decision} ({self.change}: not replayed)"


class AgentCheckReport(BaseModel):
    """The judged check: facts, decisions per resource, identity, problems (refuse) and warnings."""

    facts: CheckFacts
    identity: AgentIdentity = Field(default_factory=AgentIdentity)
    decisions: dict[str, list[ResourceDecision]] = Field(default_factory=dict)
    changed: dict[str, Change] = Field(
        default_factory=dict,
        description="the candidate's resources whose fingerprint differs from production's (changed) or that "
        "production lacks (added), by name: the replays never serve them production's cassette",
    )
    problems: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    @property
    def refused(self) -> bool:
        """Whether the replay must not start."""
        return bool(self.problems)

    def render(self) -> str:
        """The report as a person reads it (task log, run record, failure message)."""
        facts = self.facts
        side = ", ".join(x for x in (f"flink-agents {facts.flink_agents}" if facts.flink_agents else "",
                                     f"Python {facts.python}" if facts.python else "") if x)  # fmt: skip
        lines = [f"agent check ({side or 'job side'}): {'REFUSED' if self.refused else 'OK'}"]
        for d in facts.definitions:
            lines += _render_definition(d, self.decisions.get(d.role, []))
        if self.changed:
            typed = {r.name: r.type for r in self.decisions.get("candidate", [])}
            listed = ", ".join(f"{typed.get(n, 'resource')} {n} ({c})" for n, c in sorted(self.changed.items()))
            lines.append(f"candidate changed: {listed}; the replays never serve them production's recorded results")
        lines.append(f"agent operator identity: {self.identity.describe()}")
        if facts.sample is not None:
            s = facts.sample
            lines.append(f"captured records tried: {s.records} from {s.topic}" + (f" ({s.error})" if s.error else ""))
        for title, items in (("problems", self.problems), ("warnings", self.warnings)):
            if items:
                lines.append(f"{title}:")
                lines += ["  - " + item.replace("\n", "\n    ") for item in items]
        return "\n".join(lines)


def _render_definition(d: DefinitionFacts, decisions: list[ResourceDecision]) -> list[str]:
    form = "AgentJob" if d.form == "job" else "agent factory"
    lines = [f"{d.role}: {d.ref} ({form})" + (f" -> {d.agent_class}" if d.agent_class else "")]
    if d.error is not None:
        lines.append(f"  failed at {d.stage}: {d.error.headline()}")
        return lines
    acts = ", ".join(f"{a.name} ({', '.join(e.rsplit('.', 1)[-1] for e in a.listens)})" for a in d.actions)
    lines.append(f"  actions: {acts or 'NONE'}")
    lines.append("  resources:" + ("" if decisions else " NONE"))
    width = max((len(r.type) for r in decisions), default=0)
    name_width = max((len(r.name) for r in decisions), default=0)
    lines += [f"    {r.type:<{width}}  {r.name:<{name_width}}  {r.level:<6}  {r.shown()}" for r in decisions]
    if d.invisible:
        lines.append(f"  declared on a base class, NOT in the plan: {', '.join(d.invisible)}")
    if d.stages:
        lines.append("  stages: " + " -> ".join(
            f"{s.name} ({s.kind}{', uid ' + s.uid if s.uid else ''}"
            + (", processing time" if s.event_time is False else "") + ")" for s in d.stages))  # fmt: skip
    if d.event_time is not None and d.event_time.source == "field":
        lines.append(f"  event time: {d.event_time.field} ({d.event_time.unit}), watermark {d.watermark}")
    if d.input is not None:
        t = d.input
        if t.error is not None:
            lines.append(f"  input: failed on {t.failed_record or 'a captured record'}: {t.error.headline()}")
        elif t.records:
            key = f"key {t.key} ({t.key_type}" + (f", serialised {d.key_serializer})" if d.key_serializer else ")")
            lines.append(f"  input: {t.records} captured record(s) -> {t.input_type}, {key}")
        else:
            lines.append("  input: not tried (no captured record)")
    if d.sample is not None:
        lines.append(_render_sample(d.sample))
    return lines


def _render_sample(run: SampleRun) -> str:
    if run.skipped:
        return f"  sample run: skipped ({run.skipped})"
    where = f" on {run.record}" if run.record else ""
    if run.timed_out:
        return f"  sample run{where}: did not finish in time"
    calls = f"; calls: {', '.join(run.calls)}" if run.calls else "; no resource call"
    if run.error is not None:
        return f"  sample run{where}: FAILED: {run.error.headline().splitlines()[0]}{calls}"
    return f"  sample run{where}: {run.outputs} output(s){calls}"


# ------------------------------------------------------------------------------------------------ carrier
def encode_facts(facts: CheckFacts) -> str:
    """``CARRIER_MARKER`` + the facts' JSON, compressed (:mod:`~airflow_flink_replay.core.carrier`)."""
    return encode_carried(CARRIER_MARKER, facts.model_dump_json())


def decode_facts(text: str) -> CheckFacts | None:
    """The facts carried anywhere in ``text`` (a plan's JSON, a program's output), or None."""
    payload = carried(CARRIER_MARKER, text)
    return None if payload is None else CheckFacts.model_validate(json.loads(payload))


# -------------------------------------------------------------------------------------------------- judge
def decision_of(policy: ReplayPolicy, resource: ResourceFact, *, cassette: bool = False) -> str:
    """What the policy does with calls of ``resource`` (as the report shows it); ``cassette``: whether the replays
    are served production's recorded calls (production records a cassette), as the replay job decides."""
    if resource.type in _NOT_CALLED:
        return "- " + _NOT_CALLED[resource.type]
    if resource.mediated is False:
        return "UNMEDIATED: its calls go through unchanged (the policy proxy cannot wrap it)"
    if resource.type == "vector_store":
        read = next(iter(policy.read_methods), "query")
        return (
            f"read: {_shown(policy, 'vector_store', resource.name, read, cassette)}, "
            f"write: {_shown(policy, 'vector_store', resource.name, 'add', cassette)}"
        )
    return _shown(policy, resource.type, resource.name, _CALL.get(resource.type, "call"), cassette)


def _shown(policy: ReplayPolicy, rtype: str, name: str, method: str, cassette: bool) -> str:
    """The decision for one call as the table shows it: ``replay (else record)`` names what a call production's
    cassette holds no result for gets instead."""
    decided = policy.decide(rtype, name, method, cassette=cassette)
    if decided == Decision.REPLAY:
        return f"replay (else {policy.fallback(rtype, name, method).value})"
    return decided.value


def changed_resources(facts: CheckFacts) -> dict[str, Change]:
    """The candidate's resources that are not production's, by name: ``changed`` (the same type and name, another
    fingerprint) or ``added`` (production has no such resource). Empty without both plans; a resource either
    side could not fingerprint is not compared (:func:`judge` warns)."""
    production, candidate = facts.definition("production"), facts.definition("candidate")
    if not (production and candidate) or production.error or candidate.error:
        return {}
    theirs = {(r.type, r.name): r for r in production.resources}
    found: dict[str, Change] = {}
    for r in candidate.resources:
        prod = theirs.get((r.type, r.name))
        if prod is None:
            found.setdefault(r.name, "added")
        elif r.fingerprint and prod.fingerprint and r.fingerprint != prod.fingerprint:
            found[r.name] = "changed"
    return dict(sorted(found.items()))


def _decisions(
    d: DefinitionFacts, policy: ReplayPolicy, changed: dict[str, Change], cassette: bool
) -> list[ResourceDecision]:
    """``d``'s resources with what the policy does with their calls (``changed``: the candidate's changes;
    ``cassette``: whether production's recorded calls are served)."""
    decisions = []
    for r in d.resources:
        applied = policy.with_memory(r.name) if r.level == "memory" else policy
        change = changed.get(r.name)
        if change is not None:
            applied = applied.with_changed([r.name])
        decisions.append(
            ResourceDecision(
                name=r.name,
                type=r.type,
                level=r.level,
                change=change,
                decision=decision_of(applied, r, cassette=cassette),
            )
        )
    return decisions


def _unfingerprinted(facts: CheckFacts) -> list[str]:
    """Warnings for the resources both plans have that could not be compared (a fingerprint missing)."""
    production, candidate = facts.definition("production"), facts.definition("candidate")
    if not (production and candidate) or production.error or candidate.error:
        return []
    if not any(r.fingerprint for r in (*production.resources, *candidate.resources)):
        return (
            [
                "the job side sent no resource fingerprints (an older airflow-flink-replay in the cluster's Python?): "
                "resources the candidate changed cannot be told apart, and a cassette would serve their calls "
                "production's recorded results. Fix: install this version in the Flink cluster's Python"
            ]
            if production.resources or candidate.resources
            else []
        )
    theirs = {(r.type, r.name): r for r in production.resources}
    warnings = []
    for r in candidate.resources:
        prod = theirs.get((r.type, r.name))
        if prod is not None and not (r.fingerprint and prod.fingerprint):
            why = r.fingerprint_error or prod.fingerprint_error or "not fingerprinted"
            warnings.append(
                f"{r.type} {r.name!r} could not be fingerprinted ({why}): whether the candidate changed it is "
                "unknown, and a cassette would serve its calls production's recorded results"
            )
    return warnings


def judge(
    facts: CheckFacts, policy: ReplayPolicy, identity: AgentIdentity | None = None, *, cassette: bool = False
) -> AgentCheckReport:
    """Decide per resource and list what refuses the replay (``problems``) or deserves a look (``warnings``);
    ``cassette``: production records a cassette the replays are served (the decisions shown are the ones the
    replays apply)."""
    report = AgentCheckReport(facts=facts, identity=identity or AgentIdentity(), changed=changed_resources(facts))
    report.warnings += _unfingerprinted(facts)
    for d in facts.definitions:
        report.decisions[d.role] = _decisions(d, policy, report.changed if d.role == "candidate" else {}, cassette)
        report.problems += _definition_problems(d)
        report.warnings += _sample_warnings(d)
        report.warnings += [
            f"{d.role}: {r.type} {r.name!r} ({r.level}-level) cannot be mediated by the replay policy: "
            "its calls run for real in every replay"
            for r in d.resources
            if r.mediated is False
        ]
    if report.identity.uid_matches_production() is False:
        report.warnings.append(
            f"production's running agent vertex {report.identity.production_vertex} is not the id of the spec's "
            f"agent_uid {report.identity.uid!r} ({uid_to_operator_id(report.identity.uid or '')}): the replays pin "
            "that uid, and their identity check will refuse them if production's agent state is under another id. "
            "Fix: set production.agent_uid to the uid production's job sets on the agent (or remove it)"
        )
    production, candidate = facts.definition("production"), facts.definition("candidate")
    if production and candidate and not (production.error or candidate.error) and candidate.actions:
        report.problems += _lost(production, candidate)
    if production and candidate:
        report.problems += _keys_differ(production, candidate)
        report.problems += stage_problems(production, candidate)
    report.warnings += [w for d in facts.definitions for w in stage_warnings(d)]
    if production and candidate and production.input and candidate.input:
        p, c = production.input.input_type, candidate.input.input_type
        if p and c and p != c:
            report.warnings.append(
                f"production's deserializer makes {p}, the candidate's {c}: the replay feeds the candidate its own type"
            )
    if facts.sample is not None:
        if facts.sample.error:
            report.warnings.append(f"captured records could not be read ({facts.sample.error}): inputs not tried")
        elif facts.sample.records == 0:
            report.warnings.append(
                f"the capture topic {facts.sample.topic!r} holds no record yet: the deserializers were not tried"
            )
    return report


def _keys_differ(production: DefinitionFacts, candidate: DefinitionFacts) -> list[str]:
    """The candidate must key records as production did: the savepoint's agent state is under those keys."""
    problems = []
    ps, cs = production.key_serializer, candidate.key_serializer
    if ps and cs and ps != cs:
        problems.append(
            f"the candidate's key is serialised as {cs}, production's as {ps}: the savepoint's agent state cannot be "
            "read with another key serializer. Fix: give the candidate's AgentJob production's key_type"
        )
    pt = production.input.key_type if production.input else None
    ct = candidate.input.key_type if candidate.input else None
    if pt and ct and pt != ct:
        problems.append(
            f"the candidate's key selector gives {ct} keys, production's {pt} keys (same captured records): the "
            "savepoint's per-key agent state is under production's keys, the candidate would find none of it. "
            "Fix: give the candidate's AgentJob production's key_selector"
        )
    return problems


def stage_problems(production: DefinitionFacts, candidate: DefinitionFacts) -> list[str]:
    """A pipeline candidate must keep every stateful stage of production (same uid) keyed as production keys
    it: the savepoint's state of a stage is under its uid and its keys."""
    problems = []
    kept = {s.uid: s for s in candidate.stages if s.stateful and s.uid}
    for stage in production.stages:
        if not (stage.stateful and stage.uid):
            continue
        other = kept.get(stage.uid)
        if other is None:
            problems.append(
                f"the candidate drops production's stateful stage {stage.name!r} ({stage.kind}, uid {stage.uid}): "
                "its state in the savepoint (open windows, the agent's runs) would not be restored. Fix: keep the "
                "stage with its uid in the candidate's pipeline"
            )
        elif (stage.key, stage.key_type) != (other.key, other.key_type):
            problems.append(
                f"the candidate re-keys production's stateful stage {stage.name!r} (uid {stage.uid}): another key "
                f"selector or key type than production's, whose state in the savepoint is under production's keys. "
                "Fix: give the candidate's stage production's key_selector and key_type"
            )
    return problems


def stage_warnings(d: DefinitionFacts) -> list[str]:
    """Processing-time windows do not replay: they group records by when they arrive."""
    return [
        f"{d.role}: window stage {s.name!r} assigns windows by processing time: every replay groups the records "
        "differently (and a bounded replay may end before a window fires), so its outputs differ run to run. Fix: "
        "an event-time window (e.g. TumblingEventTimeWindows) over the pipeline's event_time"
        for s in d.stages
        if s.kind == "window" and s.event_time is False
    ]


#: PyFlink's message when code in a Python worker would start a Java gateway (``pyflink/java_gateway.py``).
GATEWAY_IN_WORKER = "launching the PythonGatewayServer during Python UDF execution"
#: The fix of :data:`GATEWAY_IN_WORKER` (also printed by ``flink-replay deploy``).
GATEWAY_FIX = (
    "a module Flink's Python worker imports starts PyFlink's Java gateway while it is imported, which the worker "
    "forbids: flink_agents.api.core_options (AgentExecutionOptions, AgentConfigOptions) and flink_agents.plan do. "
    "Import them inside functions only (never at the top of a job definition module or of the modules its "
    "deserializer, key selector and output serializer live in), and give Flink Agents options by key: "
    'AgentJob(config={"num-async-threads": 2}) rather than {AgentExecutionOptions.NUM_ASYNC_THREADS: 2} '
    "(docs/your-agent.md, 'What a job definition module may import')"
)
#: The fix of a tool call whose id is not a UUID (Flink Agents keys tool calls and their responses by UUID).
TOOL_CALL_ID_FIX = (
    'Flink Agents keys tool calls by UUID (ToolRequestEvent, ToolResponseEvent): every tool call\'s "id" must be a '
    "UUID string, e.g. str(uuid.uuid4()), or str(uuid.uuid5(namespace, text)) for a deterministic stand-in, in "
    "your chat model connection, in a stand-in and in recorded chat answers (docs/your-agent.md, section 3)"
)


def python_error_fix(text: str) -> str | None:
    """The fix of a Python error of a job's code that this package knows (``text``: the error or its traceback);
    None for any other."""
    if GATEWAY_IN_WORKER in text:
        return GATEWAY_FIX
    if "valid UUID" in text and ("Tool" in text or "tool" in text):
        return TOOL_CALL_ID_FIX
    return None


def _sample_problems(d: DefinitionFacts) -> list[str]:
    """A sample run that Flink Agents itself refused: the replays would fail on the same record."""
    run = d.sample
    if run is None or run.error is None or not run.rejected_by_flink_agents:
        return []
    fix = python_error_fix(f"{run.error.headline()}\n{run.error.traceback}") or (
        "make the agent's resources return what Flink Agents' events accept (the validation error above names "
        "the event and the field)"
    )
    return [
        f"{d.role}'s sample run on a captured record ({run.record or 'a captured record'}) failed: Flink Agents "
        f"refused an event built from what the agent's resources returned: {run.error.headline()}\n"
        f"{run.error.traceback.rstrip()}\nFix: {fix}"
    ]


def _sample_warnings(d: DefinitionFacts) -> list[str]:
    """A sample run that raised for another reason, or ran out of time: not judged, said."""
    run = d.sample
    if run is None or run.rejected_by_flink_agents:
        return []
    if run.timed_out:
        return [f"{d.role}'s sample run did not finish in time (a slow chat model?): it was not judged"]
    if run.error is None:
        return []
    after = (
        " after a call the sample recorded or blocked instead of making it (its stand-in may be what the "
        "agent could not use)"
        if run.substituted
        else ""
    )
    return [
        f"{d.role}'s sample run on {run.record or 'a captured record'} raised {run.error.headline()}{after}: the "
        "replays may fail the same way. The traceback is in the check's facts (run record)"
    ]


def _definition_problems(d: DefinitionFacts) -> list[str]:
    if d.error is not None:
        return [_error_problem(d, d.error)]
    problems: list[str] = _sample_problems(d)
    if not d.actions:
        problems.append(_empty_plan_problem(d))
    if d.input is not None and d.input.error is not None:
        where = d.input.failed_record or "a captured record"
        problems.append(
            f"{d.role}'s deserializer or key selector cannot produce the agent's input from {where}: "
            f"{d.input.error.headline()}\n{d.input.error.traceback.rstrip()}\n"
            f"Fix: make the deserializer of {d.ref} accept the bytes production captures (the capture topic holds "
            "the input exactly as received), and the key selector accept what it returns"
        )
    return problems


def _error_problem(d: DefinitionFacts, err: PythonFailure) -> str:
    what = {
        "import": "could not be imported on the job side",
        "build": "raised while building the agent",
        "worker": "cannot be imported the way Flink's Python worker imports it (the worker runs the deserializer, "
        "the key selector and the output serializer, and unpickling them imports their modules): every task "
        "attempt of the job would fail so",
        "plan": "raised while Flink Agents compiled the agent's plan",
    }.get(d.stage, f"failed ({d.stage})")
    fix = {
        "import": f"make {d.ref.split(':', 1)[0]} importable by the Flink cluster's Python and fix the error above",
        "build": "fix the error above in the agent's construction (or its zero-argument factory)",
        "worker": python_error_fix(err.headline())
        or "make the modules in the traceback importable in a Python "
        "without a Java gateway and without the client's state (nothing at their top level that needs the job's "
        "environment)",
        "plan": "fix the resource or action declaration named in the traceback",
    }.get(d.stage, "fix the error above")
    if d.form == "factory" and err.type == "TypeError" and "mem0_config" in err.message:
        fix = (
            f"{d.ref} is used as an agent factory, which is called as factory(mem0_config=..., **agent_options); "
            "point the spec at an AgentJob (airflow_flink_replay.flink.agent_job) instead, or accept those arguments"
        )
    return f"{d.role} job definition {d.ref} {what}: {err.headline()}\n{err.traceback.rstrip()}\nFix: {fix}"


def _empty_plan_problem(d: DefinitionFacts) -> str:
    text = f"{d.role}'s agent {d.agent_class or d.ref} has an empty plan: no action of its own"
    if d.invisible:
        text += (
            f". Its base class declares {', '.join(d.invisible)}, but flink-agents builds an agent's plan from the "
            "class's own __dict__ (type(agent).__dict__): a subclass such as `class Mine(ExistingAgent): pass` "
            "inherits none of its actions, tools or resources into the plan, and the job would run doing nothing"
        )
    return text + (
        ". Fix: declare the actions and resources on the agent class itself, or re-declare the inherited ones in "
        "the subclass body (e.g. `process_input = ExistingAgent.__dict__['process_input']` for each action, "
        "tool and resource)"
    )


def _lost(production: DefinitionFacts, candidate: DefinitionFacts) -> list[str]:
    lost_actions = sorted({a.name for a in production.actions} - {a.name for a in candidate.actions})
    cand = {(r.type, r.name) for r in candidate.resources}
    lost_resources = sorted(f"{t} {n!r}" for t, n in {(r.type, r.name) for r in production.resources} - cand)
    if not (lost_actions or lost_resources):
        return []
    parts = [f"actions {', '.join(lost_actions)}" if lost_actions else "",
             f"resources {', '.join(lost_resources)}" if lost_resources else ""]  # fmt: skip
    text = (
        f"the candidate's plan ({candidate.ref}) lost what production's ({production.ref}) has: "
        f"{'; '.join(p for p in parts if p)}"
    )
    if candidate.invisible:
        text += (
            f". Its base class declares {', '.join(candidate.invisible)}, which flink-agents does not see: it builds "
            "the plan from the class's own __dict__, so a subclass inherits none of it"
        )
    return [
        text + ". Fix: declare them on the candidate's agent class itself (or re-declare the inherited ones in the "
        "subclass body), or register the env-level ones in the candidate's AgentJob(env_resources=...) as "
        "production does"
    ]

"""Identity preflight: will production's savepoint map onto the replay job?

Flink restores state by operator id. The replay job differs from production upstream of the agent (a
bounded source on the capture topic replaces production's source), so ids that Flink derives from the
topology can shift, and ``allowNonRestoredState`` then drops the agent's state *silently*. This module
compares production's plan with the replay job's plan before anything is submitted and refuses unless:

1. the agent vertex (the Flink Agents ``action-execute-operator``) is found in both plans, and the replay's
   agent carries production's operator id — same vertex id, or pinned by ``setUidHash(<production id>)``,
   or the same ``setUid`` string as production;
2. the agent's max parallelism is the same (key groups are fixed by it);
3. every production vertex that the replay lacks is an old **source** (its state — Kafka offsets — is
   replaced by the manifest's window). Any other missing vertex would lose its state: refuse.

Plans are the JSON of Flink's REST API: ``GET /jobs/{id}`` (job details: vertices with
``maxParallelism`` and the ``plan``), ``GET /jobs/{id}/plan`` or ``POST /jars/{jar}/plan`` (``{"plan":
{...}}``; no max parallelism there — the replay declares it in its pins).

Limits (said in the report): the REST plan shows one id per *vertex* (a chain of operators): the id of its
head operator. Operators chained behind the head keep or lose their state by their own ids, which the plan
does not show; the report lists them as "chained, not checked" so a person can see what rides along.

Pure: pydantic only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from airflow_flink_replay.core.manifest import AgentVertex
from airflow_flink_replay.exceptions import IdentityMismatchError

AGENT_OPERATOR_NAME = "action-execute-operator"
_HEX32 = re.compile(r"^[0-9a-f]{32}\Z")
_TAG = re.compile(r"<[^>]+>")


# ------------------------------------------------------------------------------------------- plans
class PlanVertex(BaseModel):
    """One vertex (a chain of operators) of a Flink job plan."""

    model_config = ConfigDict(frozen=True)

    id: str
    operators: list[str] = Field(description="operator names in chain order; fused Python operators split")
    parallelism: int = 1
    max_parallelism: int | None = None
    inputs: list[str] = Field(default_factory=list)

    @property
    def label(self) -> str:
        """Readable name: the operator names joined like Flink's UI does."""
        return " -> ".join(self.operators) or "(unnamed)"

    @property
    def head(self) -> str:
        """The chain's first operator (the one whose id the vertex carries)."""
        return self.operators[0] if self.operators else ""

    @property
    def is_source(self) -> bool:
        """A vertex whose chain head is a source (Flink names them ``Source: …``) and that has no inputs.

        The name is required: plans rebuilt from vertex lists (no edges) would otherwise make every vertex
        look like a source and let its state drop unnoticed.
        """
        return self.head.startswith("Source:") and not self.inputs


class IdentityPlan(BaseModel):
    """A job's plan as vertices, parsed from any of Flink's plan-bearing REST responses.

    Not :class:`~airflow_flink_replay.core.flink_models.JobPlan` (the REST model as Flink sends it): this is
    the view the identity check needs — vertices with their operator chains, inputs and max parallelism.
    """

    model_config = ConfigDict(frozen=True)

    job_id: str = ""
    name: str = ""
    vertices: list[PlanVertex]

    @classmethod
    def from_rest(cls, payload: Mapping[str, Any], details: Mapping[str, Any] | None = None) -> IdentityPlan:
        """Parse ``GET /jobs/{id}`` details, ``GET /jobs/{id}/plan`` or ``POST /jars/{jar}/plan`` JSON.

        ``details`` (job details) may be passed next to a bare plan to add max parallelism per vertex.
        """
        if "vertices" in payload and details is None:
            details = payload
        plan = payload.get("plan", payload)
        if "nodes" not in plan:
            raise ValueError(
                "not a Flink plan: expected 'plan.nodes' (GET /jobs/{id}/plan, POST /jars/{jar}/plan) or job "
                "details with 'plan' (GET /jobs/{id})"
            )
        max_par = {v["id"]: v.get("maxParallelism") for v in (details or {}).get("vertices", [])}
        names = {v["id"]: v.get("name", "") for v in (details or {}).get("vertices", [])}
        vertices = []
        for node in plan["nodes"]:
            ops = _operators(node.get("description") or names.get(node["id"], "") or node.get("operator", ""))
            vertices.append(
                PlanVertex(
                    id=node["id"],
                    operators=ops,
                    parallelism=node.get("parallelism", 1),
                    max_parallelism=max_par.get(node["id"]),
                    inputs=[i["id"] for i in node.get("inputs", [])],
                )
            )
        return cls(job_id=plan.get("jid", ""), name=plan.get("name", ""), vertices=vertices)

    def vertex(self, vertex_id: str) -> PlanVertex | None:
        """The vertex with this id, if any."""
        return next((v for v in self.vertices if v.id == vertex_id), None)

    def find_agent(self, name: str = AGENT_OPERATOR_NAME) -> tuple[PlanVertex, int] | None:
        """The vertex holding the agent operator and the operator's position in its chain (0 = head)."""
        for vertex in self.vertices:
            for pos, op in enumerate(vertex.operators):
                if name in op:
                    return vertex, pos
        return None

    def agent_vertex(self, name: str = AGENT_OPERATOR_NAME, *, uid: str | None = None) -> AgentVertex:
        """The manifest's :class:`AgentVertex` for this (production) plan; needs job details for max par."""
        found = self.find_agent(name)
        if found is None:
            raise ValueError(f"no operator named like {name!r} in plan {self.name!r}: is this the agent job?")
        vertex, _pos = found
        if vertex.max_parallelism is None:
            raise ValueError("the plan carries no max parallelism: pass the job details (GET /jobs/{id}) too")
        return AgentVertex(
            vertex_id=vertex.id,
            name=name,
            uid=uid,
            parallelism=vertex.parallelism,
            max_parallelism=vertex.max_parallelism,
        )


def _operators(description: str) -> list[str]:
    """Split a plan description ("a, b<br/>+- c<br/>" or "a -> b") into operator names."""
    parts = re.split(r"<br\s*/?>| -> ", description)
    ops: list[str] = []
    for part in parts:
        text = _TAG.sub("", part).strip()
        text = re.sub(r"^(\+-\s*)+", "", text).strip()
        if not text:
            continue
        # PyFlink fuses consecutive Python operators into one ("a, b"); a source name keeps its commas.
        ops.extend([text] if text.startswith("Source:") else [s.strip() for s in text.split(", ") if s.strip()])
    return ops


# ------------------------------------------------------------------------------------------- pins
class ReplayPins(BaseModel):
    """What the replay job pins (from its ReplayJobSpec): they are not visible in a REST plan."""

    model_config = ConfigDict(frozen=True)

    agent_uid: str | None = None
    agent_uid_hash: str | None = None
    max_parallelism: int | None = Field(default=None, ge=1)


def uid_to_operator_id(uid: str) -> str | None:
    """Flink's operator id for ``setUid(uid)``: murmur3_128 (seed 0) of the uid, hex; None without mmh3."""
    try:
        import mmh3
    except ImportError:  # pragma: no cover - mmh3 is on both sides here
        return None
    return mmh3.hash_bytes(uid.encode("utf-8"), 0, True).hex()


# ------------------------------------------------------------------------------------------ report
Status = Literal["kept", "agent", "dropped-source", "dropped-allowed", "DROPPED", "new", "AGENT-UNMAPPED"]


class VertexRow(BaseModel):
    """One line of the identity diff."""

    vertex_id: str
    production: str | None = None
    replay: str | None = None
    status: Status
    note: str = ""


class IdentityProblem(BaseModel):
    """Why the savepoint does not map, and how to fix it."""

    code: Literal[
        "AGENT_NOT_IN_PRODUCTION",
        "AGENT_NOT_IN_REPLAY",
        "AGENT_NOT_CHAIN_HEAD",
        "AGENT_ID_DIFFERS",
        "MAX_PARALLELISM_UNKNOWN",
        "MAX_PARALLELISM_DIFFERS",
        "STATE_DROPPED",
    ]
    message: str
    fix: str


class IdentityReport(BaseModel):
    """The preflight's verdict (``maps``), the per-vertex diff and the problems."""

    maps: bool
    production_job: str
    replay_job: str
    agent_vertex_id: str | None = None
    agent_mapped_by: Literal["vertex-id", "uid-hash", "uid", "none"] = "none"
    production_max_parallelism: int | None = None
    replay_max_parallelism: int | None = None
    rows: list[VertexRow] = Field(default_factory=list)
    problems: list[IdentityProblem] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    def render(self) -> str:
        """The diff as text a person reads in a task log or a failed-task message."""
        verdict = "MAPS" if self.maps else f"REFUSED ({len(self.problems)} problem(s))"
        out = [
            f"identity preflight: {verdict}",
            f"  production: {self.production_job}",
            f"  replay:     {self.replay_job}",
            f"  agent: {self.agent_vertex_id or '?'} mapped by {self.agent_mapped_by}; max parallelism "
            f"production {self.production_max_parallelism or '?'} / replay {self.replay_max_parallelism or '?'}",
            f"  {'vertex':<32}  {'status':<15}  {'production':<45}  replay",
        ]
        for r in self.rows:
            out.append(
                f"  {r.vertex_id:<32}  {r.status:<15}  {_clip(r.production or '-', 45):<45}  {r.replay or '-'}"
                + (f"\n  {'':<32}  {'':<15}  ^ {r.note}" if r.note else "")
            )
        for p in self.problems:
            out.append(f"  ✗ [{p.code}] {p.message}\n      fix: {p.fix}")
        for w in self.warnings:
            out.append(f"  ! {w}")
        return "\n".join(out)

    def raise_if_refused(self) -> IdentityReport:
        """Raise :class:`IdentityMismatchError` when the savepoint does not map; else return self."""
        if not self.maps:
            raise IdentityMismatchError(self)
        return self


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# ------------------------------------------------------------------------------------------- check
def check_identity(
    production: IdentityPlan,
    replay: IdentityPlan,
    *,
    pins: ReplayPins | None = None,
    production_agent_uid: str | None = None,
    agent_name: str = AGENT_OPERATOR_NAME,
    allowed_dropped: Iterable[str] = (),
) -> IdentityReport:
    """Decide whether production's savepoint maps onto the replay job (see the module doc).

    :param production: production's plan, ideally from job details (it carries max parallelism).
    :param replay: the replay job's plan (``POST /jars/{jar}/plan`` before submitting).
    :param pins: what the replay pins on the agent (uid / uid hash / max parallelism).
    :param production_agent_uid: the uid production set on its agent, if any.
    :param allowed_dropped: production vertex ids a person has confirmed hold no state.
    """
    pins = pins or ReplayPins()
    report = IdentityReport(
        maps=False,
        production_job=f"{production.name} ({production.job_id or 'no id'})",
        replay_job=f"{replay.name} ({replay.job_id or 'not submitted'})",
    )
    prod_found = production.find_agent(agent_name)
    replay_found = replay.find_agent(agent_name)
    problems = _agent_found(prod_found, replay_found, agent_name, production_agent_uid)
    prod_agent = prod_found[0] if prod_found else None
    replay_agent = replay_found[0] if replay_found else None
    problems += _check_agent_id(report, prod_agent, replay_agent, pins, production_agent_uid)
    problems += _check_max_parallelism(report, prod_agent, replay_agent, pins)
    allowed = set(allowed_dropped)
    rows, dropped, warnings = _check_vertices(report, production, replay, prod_agent, replay_agent, allowed)
    report.rows, report.problems, report.warnings = rows, problems + dropped, warnings
    report.maps = not report.problems
    return report


def _agent_found(
    prod_found: tuple[PlanVertex, int] | None,
    replay_found: tuple[PlanVertex, int] | None,
    agent_name: str,
    production_agent_uid: str | None,
) -> list[IdentityProblem]:
    """The agent operator is in both plans, and production's is a chain head (or has a known uid)."""
    problems: list[IdentityProblem] = []
    if prod_found is None:
        problems.append(
            IdentityProblem(
                code="AGENT_NOT_IN_PRODUCTION",
                message=f"production's plan has no operator named like {agent_name!r}",
                fix="point the preflight at the Flink Agents job (its agent operator is 'action-execute-operator')",
            )
        )
    if replay_found is None:
        problems.append(
            IdentityProblem(
                code="AGENT_NOT_IN_REPLAY",
                message=f"the replay plan has no operator named like {agent_name!r}",
                fix="build the replay job with the same agent (the shared pipeline builder)",
            )
        )
    if prod_found and prod_found[1] != 0 and production_agent_uid is None:
        problems.append(
            IdentityProblem(
                code="AGENT_NOT_CHAIN_HEAD",
                message=f"production's agent operator is chained behind {prod_found[0].head!r}: its operator id is "
                "not visible in the plan, so the preflight cannot tell which id its state is stored under",
                fix="give production's agent a uid (the pipeline builder pins one) and pass it as production_agent_uid",
            )
        )
    return problems


def _check_agent_id(
    report: IdentityReport,
    prod_agent: PlanVertex | None,
    replay_agent: PlanVertex | None,
    pins: ReplayPins,
    production_agent_uid: str | None,
) -> list[IdentityProblem]:
    """Check 1: the replay's agent carries production's operator id (sets ``agent_vertex_id``/``mapped_by``)."""
    prod_agent_id: str | None = None
    if prod_agent is not None:
        prod_agent_id = prod_agent.id
        if production_agent_uid is not None:
            prod_agent_id = uid_to_operator_id(production_agent_uid) or prod_agent.id
    report.agent_vertex_id = prod_agent_id
    if not prod_agent_id or replay_agent is None:
        return []
    if pins.agent_uid_hash:
        mapped_by, replay_agent_id = "uid-hash", pins.agent_uid_hash.lower()
    elif pins.agent_uid:
        mapped_by = "uid"
        replay_agent_id = uid_to_operator_id(pins.agent_uid) or (
            prod_agent_id if pins.agent_uid == production_agent_uid else replay_agent.id
        )
    else:
        mapped_by, replay_agent_id = "vertex-id", replay_agent.id
    if replay_agent_id == prod_agent_id:
        report.agent_mapped_by = mapped_by  # type: ignore[assignment]
        return []
    how = {
        "uid-hash": f"pinned with setUidHash({replay_agent_id})",
        "uid": f"pinned with setUid({pins.agent_uid!r}) = {replay_agent_id}",
        "vertex-id": f"not pinned; its vertex id is {replay_agent_id}",
    }[mapped_by]
    return [
        IdentityProblem(
            code="AGENT_ID_DIFFERS",
            message=f"production stores the agent's state under operator id {prod_agent_id}; the replay's "
            f"agent is {how}. Flink would not find the agent's state (with allowNonRestoredState it is "
            "dropped silently and the replay starts with empty agent memory)",
            fix=f"pin the replay's agent: agent_uid_hash={prod_agent_id!r} in the ReplayJobSpec "
            "(setUidHash), or the same uid as production",
        )
    ]


def _check_max_parallelism(
    report: IdentityReport, prod_agent: PlanVertex | None, replay_agent: PlanVertex | None, pins: ReplayPins
) -> list[IdentityProblem]:
    """Check 2: the agent's max parallelism is known on both sides and the same (key groups depend on it)."""
    prod_mp = prod_agent.max_parallelism if prod_agent else None
    replay_mp = pins.max_parallelism or (replay_agent.max_parallelism if replay_agent else None)
    report.production_max_parallelism, report.replay_max_parallelism = prod_mp, replay_mp
    if prod_agent is None or replay_agent is None:
        return []
    if prod_mp is None:
        return [
            IdentityProblem(
                code="MAX_PARALLELISM_UNKNOWN",
                message="production's plan carries no max parallelism for the agent vertex",
                fix="pass production's job details (GET /jobs/{id}): they list maxParallelism per vertex",
            )
        ]
    if replay_mp is None:
        return [
            IdentityProblem(
                code="MAX_PARALLELISM_UNKNOWN",
                message=f"the replay does not pin the agent's max parallelism (production: {prod_mp}); Flink "
                "derives a default from the parallelism that may differ",
                fix=f"set max_parallelism={prod_mp} in the ReplayJobSpec",
            )
        ]
    if prod_mp != replay_mp:
        return [
            IdentityProblem(
                code="MAX_PARALLELISM_DIFFERS",
                message=f"agent max parallelism differs: production {prod_mp}, replay {replay_mp}; keyed state is "
                "split into max-parallelism key groups, so it cannot be restored",
                fix=f"set max_parallelism={prod_mp} in the ReplayJobSpec",
            )
        ]
    return []


def _check_vertices(
    report: IdentityReport,
    production: IdentityPlan,
    replay: IdentityPlan,
    prod_agent: PlanVertex | None,
    replay_agent: PlanVertex | None,
    allowed: set[str],
) -> tuple[list[VertexRow], list[IdentityProblem], list[str]]:
    """Check 3, vertex by vertex: only the old source's state may be dropped. Returns rows, problems, warnings."""
    rows: list[VertexRow] = []
    problems: list[IdentityProblem] = []
    warnings: list[str] = []
    replay_ids = {v.id for v in replay.vertices}
    for v in production.vertices:
        if prod_agent is not None and v.id == prod_agent.id:
            rows.append(_agent_row(v, replay_agent, report.agent_mapped_by))
        elif v.id in replay_ids:
            rows.append(
                VertexRow(vertex_id=v.id, production=v.label, replay=replay.vertex(v.id).label, status="kept")  # type: ignore[union-attr]
            )
        else:
            row, problem, warning = _missing_vertex(v, allowed)
            rows.append(row)
            problems.extend(problem)
            warnings.extend(warning)
    prod_ids = {v.id for v in production.vertices}
    for v in replay.vertices:
        if v.id not in prod_ids and not (replay_agent is not None and v.id == replay_agent.id):
            rows.append(VertexRow(vertex_id=v.id, replay=v.label, status="new", note="starts with empty state"))
    return rows, problems, warnings


def _agent_row(v: PlanVertex, replay_agent: PlanVertex | None, mapped_by: str) -> VertexRow:
    mapped = mapped_by != "none"
    return VertexRow(
        vertex_id=v.id,
        production=v.label,
        replay=replay_agent.label if replay_agent else None,
        status="agent" if mapped else "AGENT-UNMAPPED",
        note=(
            f"replay vertex {replay_agent.id}, state mapped by {mapped_by}"
            if mapped and replay_agent and replay_agent.id != v.id
            else ""
        ),
    )


def _missing_vertex(v: PlanVertex, allowed: set[str]) -> tuple[VertexRow, list[IdentityProblem], list[str]]:
    """A production vertex the replay lacks: an old source, confirmed stateless, or state that would be lost."""
    if v.is_source:
        row = VertexRow(
            vertex_id=v.id,
            production=v.label,
            status="dropped-source",
            note="old source: its offsets are replaced by the manifest's window",
        )
        chained = v.operators[1:]
        warning = (
            [
                f"operators chained behind the old source {v.head!r} ({', '.join(chained)}) keep their state "
                "only if the replay gives them the same uid; the plan cannot show their ids"
            ]
            if chained
            else []
        )
        return row, [], warning
    if v.id in allowed:
        row = VertexRow(
            vertex_id=v.id,
            production=v.label,
            status="dropped-allowed",
            note="listed in allowed_dropped (confirmed stateless)",
        )
        return row, [], []
    row = VertexRow(vertex_id=v.id, production=v.label, status="DROPPED", note="not a source: its state would be lost")
    problem = IdentityProblem(
        code="STATE_DROPPED",
        message=f"production vertex {v.id} ({v.label}) has no counterpart in the replay: its state would "
        "be dropped (only the old source's state may be)",
        fix=f"keep the uid of {v.head!r} unchanged in the replay job; if it holds no state, pass "
        f"allowed_dropped=[{v.id!r}]",
    )
    return row, [problem], []

"""The replay variants' job graphs, planned together before any is submitted.

The identity preflight (:mod:`~airflow_flink_replay.core.identity`) needs the job graph of every replay
variant. One job-side program (``airflow_flink_replay.flink.replay_plans``) builds all of them in one
PythonDriver run — each PythonDriver run costs a Python start on the JobManager, and the JobManager runs one at
a time — and sends them back through the job graph of its ``/plan`` call
(:mod:`~airflow_flink_replay.core.carrier`). This module is the shared part: the pins every replay gets from
production's plan, the carried payload, and the check of one variant's plan. Pure: pydantic only.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from pydantic import BaseModel, Field

from airflow_flink_replay.core.carrier import carried, encode_carried
from airflow_flink_replay.core.identity import IdentityPlan, IdentityReport, ReplayPins, check_identity
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec

__all__ = [
    "IDENTITY_REFUSED",
    "PLANS_MARKER",
    "IdentityCheck",
    "VariantPlan",
    "decode_plans",
    "encode_plans",
    "identity_report",
    "pin_to_production",
]

#: What precedes the encoded plans in the name of the program's only operator.
PLANS_MARKER = "afr-replay-plans:"


class VariantPlan(BaseModel):
    """One variant's job graph as Flink's REST API shows it (``{"jid", "name", "nodes"}``), or the Python
    error that kept the program from building it."""

    variant: str
    plan: dict[str, Any] | None = None
    error: str | None = Field(default=None, description="the Python traceback text when the build failed")


def encode_plans(plans: list[VariantPlan]) -> str:
    """:data:`PLANS_MARKER` + the plans' JSON, compressed."""
    return encode_carried(PLANS_MARKER, json.dumps([p.model_dump(mode="json") for p in plans]))


def decode_plans(text: str) -> list[VariantPlan] | None:
    """The plans carried anywhere in ``text``, or None."""
    payload = carried(PLANS_MARKER, text)
    return None if payload is None else [VariantPlan.model_validate(p) for p in json.loads(payload)]


def pin_to_production(
    spec: ReplayJobSpec, production: IdentityPlan | None, production_agent_uid: str | None = None
) -> ReplayJobSpec:
    """``spec`` pinned to production's running agent: its max parallelism (key groups are fixed by it) and,
    when production's agent never had a uid, its vertex id as the replay agent's uid hash."""
    found = production.find_agent() if production else None
    if found is None:
        return spec
    update: dict[str, Any] = {}
    if spec.max_parallelism is None and found[0].max_parallelism:
        update["max_parallelism"] = found[0].max_parallelism
    if not (spec.agent_uid or spec.agent_uid_hash or production_agent_uid):
        update["agent_uid_hash"] = found[0].id
    return spec.model_copy(update=update) if update else spec


def identity_report(
    production: IdentityPlan, spec: ReplayJobSpec, replay_plan: dict[str, Any], production_agent_uid: str | None
) -> IdentityReport:
    """The identity check of one variant's planned job graph against production's plan."""
    return check_identity(
        production,
        IdentityPlan.from_rest({"plan": replay_plan}),
        pins=ReplayPins(
            agent_uid=spec.agent_uid, agent_uid_hash=spec.agent_uid_hash, max_parallelism=spec.max_parallelism
        ),
        production_agent_uid=production_agent_uid,
    )


#: How a replay program's refusal starts (its exception message): nothing was submitted.
IDENTITY_REFUSED = "identity preflight refused: nothing was submitted"
_PLAN_FLAG = "--production-plan-json"
_UID_FLAG = "--production-agent-uid"


class IdentityCheck(BaseModel):
    """What the replay program needs to check every variant's job graph against production's before it submits
    any (``SubmitReplayJobsOperator`` without a separate planning task): production's plan and its agent's uid.
    Travels as program arguments next to the specs."""

    production: IdentityPlan
    production_agent_uid: str | None = None

    def to_argv(self) -> list[str]:
        """Program arguments: ``--production-plan-json <json>`` [``--production-agent-uid <uid>``]."""
        argv = [_PLAN_FLAG, self.production.model_dump_json()]
        return [*argv, _UID_FLAG, self.production_agent_uid] if self.production_agent_uid else argv

    @classmethod
    def from_argv(cls, argv: list[str]) -> IdentityCheck | None:
        """The check given in ``argv``, or None (a program submitted without one)."""
        values = dict(itertools.pairwise(argv))
        if _PLAN_FLAG not in values:
            return None
        return cls(production=IdentityPlan.model_validate_json(values[_PLAN_FLAG]),
                   production_agent_uid=values.get(_UID_FLAG))  # fmt: skip

    def reports(self, planned: list[tuple[ReplayJobSpec, dict[str, Any]]]) -> dict[str, IdentityReport]:
        """Each variant's report, from its spec and its job graph (``{"jid", "name", "nodes"}``)."""
        return {spec.variant: identity_report(self.production, spec, plan, self.production_agent_uid)
                for spec, plan in planned}  # fmt: skip

    @staticmethod
    def refusal(reports: dict[str, IdentityReport]) -> str | None:
        """The message refusing the whole submission when any variant's plan does not map (every variant's
        report, the refused ones first), or None when all map."""
        refused = [v for v, r in reports.items() if not r.maps]
        if not refused:
            return None
        ordered = refused + [v for v in reports if v not in refused]
        body = "\n\n".join(f"replay {v}: {reports[v].render()}" for v in ordered)
        return f"{IDENTITY_REFUSED} (refused: {', '.join(refused)})\n\n{body}"

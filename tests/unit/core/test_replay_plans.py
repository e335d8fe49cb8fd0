"""The replay variants planned together: the carried plans, production's pins, the check of each plan.

Plans are JSON recorded from the real local Flink 2.2.1 cluster (tests/fixtures/plans/, see test_identity.py).
"""

from __future__ import annotations

import json

import pytest

from airflow_flink_replay.core.carrier import carried, encode_carried
from airflow_flink_replay.core.identity import IdentityPlan
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.core.replay_plans import (
    VariantPlan,
    decode_plans,
    encode_plans,
    identity_report,
    pin_to_production,
)
from tests.unit.core.test_identity import PROD_AGENT, _load


@pytest.fixture(scope="module")
def production() -> IdentityPlan:
    return IdentityPlan.from_rest(_load("prod_job_details.json"))

def _spec(**changes: object) -> ReplayJobSpec:
    return ReplayJobSpec.model_validate({
        "variant": "candidate", "agent_factory": "pkg.agent:build", "job_identifier": "replay-t-candidate",
        "action_state_topic": "afr-t-candidate", "output_dir": "/tmp/out", "audit_dir": "/tmp/audit",
        "kafka_bootstrap": "localhost:9092", "manifest": "/tmp/manifest.json", **changes,
    })  # fmt: skip


def test_the_carried_text_comes_back_from_html_escaped_plan_json() -> None:
    payload = json.dumps({"nodes": ["<b>a & b</b>"] * 200, "ünï": "cödé"})
    name = encode_carried("afr-x:", payload)
    plan_text = json.dumps({"nodes": [{"description": f"Sink: {name}<br/>+- next &amp; more"}]})
    assert carried("afr-x:", plan_text) == payload
    assert carried("afr-other:", plan_text) is None
    assert len(name) < len(payload) / 5  # compressed


def test_plans_and_errors_round_trip() -> None:
    plans = [VariantPlan(variant="baseline", plan=_load("jar_plan_replay-pinned.json")["plan"]),
             VariantPlan(variant="candidate", error="Traceback ...\nModuleNotFoundError: No module named 'x'")]
    assert decode_plans(f"ignored {encode_plans(plans)} ignored") == plans
    assert decode_plans("no plans here") is None


def test_pins_take_productions_agent_vertex_and_max_parallelism(production: IdentityPlan) -> None:
    pinned = pin_to_production(_spec(), production)
    assert (pinned.agent_uid_hash, pinned.max_parallelism) == (PROD_AGENT, 128)
    # a uid (the spec's or production's) wins over the vertex id; a given max parallelism is kept
    assert pin_to_production(_spec(agent_uid="afr-agent"), production).agent_uid_hash is None
    assert pin_to_production(_spec(), production, production_agent_uid="afr-agent").agent_uid_hash is None
    assert pin_to_production(_spec(max_parallelism=64), production).max_parallelism == 64
    assert pin_to_production(_spec(), None) == _spec()


def test_each_planned_variant_is_checked_against_production(production: IdentityPlan) -> None:
    pinned = pin_to_production(_spec(), production)
    maps = identity_report(production, pinned, _load("jar_plan_replay-pinned.json")["plan"], None)
    assert maps.maps, maps.render()
    # a stateful operator (dedupe) the replay lost: refused
    refused = identity_report(production, pinned, _load("jar_plan_replay-dedupe-renamed.json")["plan"], None)
    assert not refused.maps and "REFUSED" in refused.render()

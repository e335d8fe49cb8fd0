"""Identity preflight on plan JSON recorded from the real local Flink 2.2.1 cluster.

Fixtures: tests/fixtures/plans/ (recorded by record_plans.py from plan_job.py, a stand-in pipeline of
the same shape as the agent job: source -> key-normalise -> keyBy -> dedupe -> keyBy -> agent -> output).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_flink_replay.core.identity import (
    IdentityMismatchError,
    IdentityPlan,
    ReplayPins,
    check_identity,
    uid_to_operator_id,
)

PLANS = Path(__file__).resolve().parents[2] / "fixtures" / "plans"
PROD_AGENT = "4aab10bf863e9ada48b1abaa99285148"
PROD_SOURCE = "13ac5fc714a257b6cff827eb3ec52113"
PROD_DEDUPE = "3ffe0641429cb397d997ecc9f27dd803"


def _load(name: str) -> dict:
    return json.loads((PLANS / name).read_text())


@pytest.fixture(scope="module")
def production() -> IdentityPlan:
    return IdentityPlan.from_rest(_load("prod_job_details.json"))


def replay(variant: str) -> IdentityPlan:
    return IdentityPlan.from_rest(_load(f"jar_plan_{variant}.json"))


def test_parses_job_details_plan_and_max_parallelism(production: IdentityPlan) -> None:
    assert {v.id for v in production.vertices} == {PROD_AGENT, PROD_SOURCE, PROD_DEDUPE}
    agent, pos = production.find_agent()
    assert (agent.id, pos) == (PROD_AGENT, 0)
    assert agent.operators == ["action-execute-operator", "agent-output", "Sink: Print to Std. Out"]
    assert agent.max_parallelism == 128
    assert production.vertex(PROD_SOURCE).is_source
    assert not production.vertex(PROD_DEDUPE).is_source
    av = production.agent_vertex()
    assert (av.vertex_id, av.parallelism, av.max_parallelism) == (PROD_AGENT, 1, 128)
    # a bare /jobs/{id}/plan plus the details gives the same
    again = IdentityPlan.from_rest(_load("prod_job_plan.json"), details=_load("prod_job_details.json"))
    assert again.vertex(PROD_AGENT).max_parallelism == 128


def test_pinned_replay_maps_dropping_only_the_old_source(production: IdentityPlan) -> None:
    report = check_identity(
        production, replay("replay-pinned"), pins=ReplayPins(agent_uid_hash=PROD_AGENT, max_parallelism=128)
    )
    assert report.maps, report.render()
    assert report.agent_mapped_by == "uid-hash"
    statuses = {r.vertex_id: r.status for r in report.rows}
    assert statuses[PROD_SOURCE] == "dropped-source"
    assert statuses[PROD_DEDUPE] == "kept"
    assert statuses[PROD_AGENT] == "agent"
    assert "new" in statuses.values()  # the bounded replay source
    assert any("key-normalise" in w for w in report.warnings)  # chained behind the old source
    assert report.raise_if_refused() is report


def test_agent_id_differs_is_refused(production: IdentityPlan) -> None:
    report = check_identity(production, replay("replay-unpinned-upstream"), pins=ReplayPins(max_parallelism=128))
    assert not report.maps
    assert [p.code for p in report.problems] == ["AGENT_ID_DIFFERS"]
    text = report.render()
    assert PROD_AGENT in text and "73026cf7cd7d58da426118757fc6502b" in text
    assert f"agent_uid_hash={PROD_AGENT!r}" in text
    assert "AGENT-UNMAPPED" in text
    with pytest.raises(IdentityMismatchError, match="REFUSED"):
        report.raise_if_refused()


def test_max_parallelism_differs_is_refused(production: IdentityPlan) -> None:
    report = check_identity(
        production, replay("replay-maxpar"), pins=ReplayPins(agent_uid_hash=PROD_AGENT, max_parallelism=256)
    )
    assert [p.code for p in report.problems] == ["MAX_PARALLELISM_DIFFERS"]
    assert "production 128, replay 256" in report.problems[0].message
    assert report.problems[0].fix == "set max_parallelism=128 in the ReplayJobSpec"


def test_unpinned_max_parallelism_is_refused(production: IdentityPlan) -> None:
    report = check_identity(production, replay("replay-pinned"), pins=ReplayPins(agent_uid_hash=PROD_AGENT))
    assert [p.code for p in report.problems] == ["MAX_PARALLELISM_UNKNOWN"]


def test_non_source_state_dropped_is_refused(production: IdentityPlan) -> None:
    plan = replay("replay-dedupe-renamed")
    report = check_identity(production, plan, pins=ReplayPins(agent_uid_hash=PROD_AGENT, max_parallelism=128))
    assert not report.maps
    assert [p.code for p in report.problems] == ["STATE_DROPPED"]
    assert PROD_DEDUPE in report.problems[0].message and "dedupe" in report.problems[0].message
    rows = {r.vertex_id: r for r in report.rows}
    assert rows[PROD_DEDUPE].status == "DROPPED"
    # the agent itself is mapped by its pinned hash even though the plan shows a new vertex id
    assert rows[PROD_AGENT].status == "agent" and "8f5f5fff9100d3cd26fe1f80db886a3d" in rows[PROD_AGENT].note
    # a person may confirm the vertex is stateless
    ok = check_identity(
        production,
        plan,
        pins=ReplayPins(agent_uid_hash=PROD_AGENT, max_parallelism=128),
        allowed_dropped=[PROD_DEDUPE],
    )
    assert ok.maps and {r.vertex_id: r.status for r in ok.rows}[PROD_DEDUPE] == "dropped-allowed"


def test_wrong_pin_is_refused(production: IdentityPlan) -> None:
    report = check_identity(
        production, replay("replay-pinned"), pins=ReplayPins(agent_uid_hash="0" * 32, max_parallelism=128)
    )
    assert [p.code for p in report.problems] == ["AGENT_ID_DIFFERS"]
    assert "setUidHash(00000000000000000000000000000000)" in report.problems[0].message


def test_missing_agent_is_refused(production: IdentityPlan) -> None:
    no_agent = IdentityPlan.from_rest(
        {
            "plan": {
                "jid": "x",
                "name": "other",
                "nodes": [{"id": "a" * 32, "parallelism": 1, "description": "Source: s<br/>+- map<br/>"}],
            }
        }
    )
    report = check_identity(production, no_agent, pins=ReplayPins(max_parallelism=128))
    assert "AGENT_NOT_IN_REPLAY" in [p.code for p in report.problems]


def test_uid_operator_id_is_murmur3() -> None:
    pytest.importorskip("mmh3")
    assert uid_to_operator_id("agent") and len(uid_to_operator_id("agent")) == 32


def test_not_a_plan() -> None:
    with pytest.raises(ValueError, match="not a Flink plan"):
        IdentityPlan.from_rest({"jobs": []})


def test_plan_without_edges_still_refuses_non_source_drops() -> None:
    """A production plan rebuilt from a vertex list (the quiesce result's ProductionPlan: no edges)."""
    details = _load("prod_job_details.json")
    vertices = details["vertices"]
    rebuilt = {
        "vertices": [{"id": v["id"], "name": v["name"], "maxParallelism": v["maxParallelism"]} for v in vertices],
        "plan": {
            "jid": details["jid"],
            "name": details["name"],
            "nodes": [{"id": v["id"], "description": v["name"], "parallelism": 1} for v in vertices],
        },
    }
    production = IdentityPlan.from_rest(rebuilt)
    assert [v.id for v in production.vertices if v.is_source] == [PROD_SOURCE]
    report = check_identity(
        production, replay("replay-dedupe-renamed"), pins=ReplayPins(agent_uid_hash=PROD_AGENT, max_parallelism=128)
    )
    assert [p.code for p in report.problems] == ["STATE_DROPPED"]
    ok = check_identity(
        production, replay("replay-pinned"), pins=ReplayPins(agent_uid_hash=PROD_AGENT, max_parallelism=128)
    )
    assert ok.maps, ok.render()


# Real Flink Agents jobs (issue 4's production job and a bounded replay of it, recorded on the local
# cluster): agent vertex "action-execute-operator -> Map, agent-output -> sink: …".
AGENT_UID_ID = "382ed45d504034b09088257b90c60d72"  # murmur3_128("afr-agent")
AGENT_NO_UID_ID = "ddec933e5c0622c0c7cd4f29b6ee2b39"


def test_real_agent_job_with_uid_maps_onto_its_replay() -> None:
    prod = IdentityPlan.from_rest(_load("agent_prod_job_details.json"))
    replay_plan = IdentityPlan.from_rest(_load("agent_replay_baseline_job_details.json"))
    assert prod.find_agent()[0].id == AGENT_UID_ID
    if uid_to_operator_id("afr-agent") is not None:
        assert uid_to_operator_id("afr-agent") == AGENT_UID_ID
    report = check_identity(
        prod, replay_plan, pins=ReplayPins(agent_uid="afr-agent", max_parallelism=128), production_agent_uid="afr-agent"
    )
    assert report.maps, report.render()
    assert {r.status for r in report.rows} == {"agent", "dropped-source", "new"}


def test_real_agent_job_without_uid_needs_the_uid_hash_pin() -> None:
    prod = IdentityPlan.from_rest(_load("agent_prod_no_uid_job_details.json"))
    replay_plan = IdentityPlan.from_rest(_load("agent_replay_baseline_job_details.json"))
    assert prod.find_agent()[0].id == AGENT_NO_UID_ID
    wrong = check_identity(prod, replay_plan, pins=ReplayPins(agent_uid="afr-agent", max_parallelism=128))
    assert [p.code for p in wrong.problems] == ["AGENT_ID_DIFFERS"]
    pinned = check_identity(prod, replay_plan, pins=ReplayPins(agent_uid_hash=AGENT_NO_UID_ID, max_parallelism=128))
    assert pinned.maps and pinned.agent_mapped_by == "uid-hash"

"""The lease's pure part: the identity of a production, what a run does about the newest generation, and what the
history says about the runs that held it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_flink_replay.core.production_lease import (
    LeaseHolder,
    Production,
    decide,
    generation_file,
    last_stop_before,
    lease_folder,
    lease_summary,
    new_generation,
    of_run,
    others_since,
    parse_generation_file,
    released,
    renewed,
    to_prune,
)

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
PROD = Production.of("http://flink.test:8081/", "review-triage")
GATE = LeaseHolder(dag_id="flink_agents_release_gate", run_id="ci__1", task_id="quiesce", try_number=1)
GATE_RESUME = LeaseHolder(dag_id="flink_agents_release_gate", run_id="ci__1", task_id="resume_production")
MANUAL = LeaseHolder(dag_id="flink_agents_replay", run_id="manual__1", task_id="quiesce")


def _held(holder: LeaseHolder = GATE, *, ttl_s: float = 600, current=None, now: datetime = NOW):
    return new_generation(current, PROD, holder, ttl_s=ttl_s, now=now)


def test_production_identity_is_the_flink_address_and_the_job_name() -> None:
    assert Production.of("HTTP://Flink.Test:8081", "review-triage").key == PROD.key  # same cluster, same job
    assert Production.of("http://flink.test:8081", "review-triage-2").key != PROD.key
    assert Production.of("http://other:8081", "review-triage").key != PROD.key
    assert PROD.key.startswith("review-triage-") and len(PROD.key) == len("review-triage-") + 16
    assert "/" not in Production.of("http://f", "a/../../b\nc").key  # a file-safe folder name
    with pytest.raises(ValueError, match=r"production\.job_name"):
        Production.of("http://f", "")


def test_a_run_acquires_a_free_lease_reenters_its_own_waits_for_another_and_takes_over_an_expired_one() -> None:
    assert decide(None, GATE, NOW) == "acquire"
    held = _held()
    assert decide(held, GATE_RESUME, NOW) == "reenter"  # another task of the same run
    assert decide(held, GATE_RESUME, NOW + timedelta(hours=1)) == "reenter"  # expired, but nobody took it
    assert decide(held, MANUAL, NOW + timedelta(seconds=599)) == "wait"
    assert decide(held, MANUAL, NOW + timedelta(seconds=600)) == "take_over"
    assert decide(released(held, by="quiesce", now=NOW), MANUAL, NOW) == "acquire"


def test_a_new_generation_names_the_expired_holder_it_took_over() -> None:
    held = _held(ttl_s=60)
    taken = new_generation(held, PROD, MANUAL, ttl_s=600, now=NOW + timedelta(minutes=5), waited_s=12.5)
    assert taken.generation == 2 and taken.holder == MANUAL and taken.took_over == GATE
    assert taken.took_over_expired_at == held.expires_at and taken.waited_s == 12.5
    after_release = new_generation(released(held, by="quiesce", now=NOW), PROD, MANUAL, ttl_s=600, now=NOW)
    assert after_release.took_over is None  # a released lease is simply free


def test_renewal_extends_the_lease_and_records_the_task_and_job() -> None:
    held = _held(ttl_s=60)
    later = NOW + timedelta(seconds=50)
    again = renewed(held, GATE_RESUME, ttl_s=60, now=later, job_id="j2")
    assert again.expires_at == later + timedelta(seconds=60) and again.renewed_at == later
    assert again.holder == GATE_RESUME and again.job_id == "j2" and again.acquired_at == NOW


def test_the_history_says_which_runs_held_it_after_this_one() -> None:
    first = released(_held(), by="quiesce", now=NOW)
    second = released(_held(MANUAL, current=first), by="quiesce", now=NOW)
    third = _held(GATE_RESUME, current=second)
    records = [first, second, third]
    assert [r.generation for r in of_run(records, GATE)] == [1, 3]
    assert others_since(records, GATE) == []  # this run's check (generation 3) is the newest
    assert others_since(records[:2], GATE) == [second]
    assert others_since(records[:2], LeaseHolder(dag_id="d", run_id="never")) == [first, second]


def test_a_check_s_generation_is_not_a_stop() -> None:
    """assert_production holds the lease while it checks; that never stops production."""
    first = released(_held(), by="quiesce", now=NOW)
    check = released(new_generation(first, PROD, MANUAL, ttl_s=60, now=NOW, check_only=True), by="check", now=NOW)
    assert check.check_only and others_since([first, check], GATE) == []
    assert last_stop_before([first, check], 3) == first and last_stop_before([first, check], 1) is None


def test_summary_names_the_holder_the_wait_and_the_release() -> None:
    held = _held(MANUAL, current=released(_held(), by="quiesce", now=NOW))
    summary = released(held, by="resume_production", now=NOW + timedelta(seconds=30), savepoint="file:/sp").summary()
    assert summary["holder"] == "flink_agents_replay/manual__1" and summary["generation"] == 2
    assert summary["released_by"] == "resume_production" and summary["released_at"]
    refused = lease_summary(None, waited_s=300.0, held_by=held)
    assert refused["holder"] is None and refused["held_by"] == "flink_agents_replay/manual__1"
    assert refused["waited_s"] == 300.0 and "review-triage" in refused["production"]


def test_files_folders_and_pruning() -> None:
    assert lease_folder("file:///data/runs/") == "/data/runs/_leases"
    assert lease_folder("s3://bucket/runs") == "s3://bucket/runs/_leases"
    assert generation_file(7) == "000000000007.json" and parse_generation_file("x/000000000007.json") == 7
    assert parse_generation_file(".000000000007.json.abc.tmp") is None
    assert to_prune([1, 2, 3, 4], keep=2) == [1, 2] and to_prune([1, 2], keep=2) == []

"""Production's lease on a real local folder (and fsspec's in-memory store): processes racing for it, a wait that
ends, an expired lease taken over, a release refused to a run that does not hold it, the heartbeat."""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.production_lease import LeaseHolder, Production, new_generation
from airflow_flink_replay.exceptions import (
    ProductionLeaseError,
    ProductionLeaseHeldError,
    ProductionLeaseNotHeldError,
)
from airflow_flink_replay.hooks.production_lease import ProductionLeaseHook

PROD = Production.of("http://flink.test:8081", "review-triage")
GATE = LeaseHolder(dag_id="flink_agents_release_gate", run_id="ci__1", task_id="quiesce")
MANUAL = LeaseHolder(dag_id="flink_agents_replay", run_id="manual__1", task_id="quiesce")
ROUNDS = 6


def _racer(folder: str, name: str, start: Any, go: Any, results: Any) -> None:
    """One process: in every round, wait for the others at the barrier, then try to take the lease once."""
    hook = ProductionLeaseHook(folder, PROD)
    me = LeaseHolder(dag_id=name, run_id="r")
    start.wait(timeout=120)
    for round_ in range(ROUNDS):
        go.wait(timeout=30)
        held, _ = hook.try_acquire(me, ttl_s=60)
        results.put((round_, name, held.generation if held else None))
        go.wait(timeout=30)  # every racer has tried: the winner releases, the next round starts on a free lease
        if held is not None:
            hook.release(me, by="test")


def test_of_processes_racing_for_the_lease_exactly_one_takes_it(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    racers = 3
    start, go, results = ctx.Barrier(racers + 1), ctx.Barrier(racers), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(str(tmp_path), f"dag{i}", start, go, results)) for i in range(racers)]
    for proc in procs:
        proc.start()
    start.wait(timeout=120)  # every process imported the package: the rounds start together
    for proc in procs:
        proc.join(120)
        if proc.is_alive():
            proc.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    by_round: dict[int, list[int | None]] = {}
    while not results.empty():
        round_, _, generation = results.get()
        by_round.setdefault(round_, []).append(generation)
    assert sorted(by_round) == list(range(ROUNDS))
    for round_, generations in by_round.items():
        won = [g for g in generations if g is not None]
        assert len(generations) == racers and won == [round_ + 1], (round_, generations)
    hook = ProductionLeaseHook(str(tmp_path), PROD)
    assert [r.generation for r in hook.records()] == list(range(1, ROUNDS + 1))
    assert all(r.released_at is not None for r in hook.records())
    assert not [p for p in (tmp_path / PROD.key).iterdir() if p.name.endswith(".tmp")]  # no temporary file left


def test_a_second_run_waits_bounded_then_fails_naming_the_holder(tmp_path: Path) -> None:
    hook = ProductionLeaseHook(str(tmp_path), PROD)
    held = hook.acquire(GATE, ttl_s=60, wait_s=0)
    seen: list[str] = []
    started = time.monotonic()
    with pytest.raises(ProductionLeaseHeldError) as refused:
        hook.acquire(MANUAL, ttl_s=60, wait_s=0.6, poll_s=0.1, on_wait=lambda h, _w: seen.append(h.holder.label))
    assert 0.6 <= time.monotonic() - started < 5
    assert refused.value.holder.generation == held.generation and refused.value.waited_s >= 0.6
    assert "flink_agents_release_gate/ci__1" in str(refused.value) and "review-triage" in str(refused.value)
    assert seen == ["flink_agents_release_gate/ci__1"]  # told once, not at every poll
    assert hook.current() == held  # the waiting run wrote nothing


def test_a_waiting_run_gets_the_lease_once_the_holder_releases_it(tmp_path: Path) -> None:
    hook = ProductionLeaseHook(str(tmp_path), PROD)
    hook.acquire(GATE, ttl_s=60, wait_s=0)
    releaser = threading.Timer(0.4, lambda: hook.release(GATE, by="quiesce", savepoint="file:/sp/1"))
    releaser.start()
    held = hook.acquire(MANUAL, ttl_s=60, wait_s=10, poll_s=0.05, job_id="j2")
    releaser.join()
    assert held.generation == 2 and held.holder == MANUAL and held.took_over is None
    assert held.waited_s >= 0.3 and held.job_id == "j2"
    first = hook.read(1)
    assert first.released_by == "quiesce" and first.savepoint == "file:/sp/1"


def test_an_expired_lease_is_taken_over_and_the_taker_says_whose(tmp_path: Path, caplog) -> None:
    hook = ProductionLeaseHook(str(tmp_path), PROD)
    hook.acquire(GATE, ttl_s=0.2, wait_s=0, job_id="j1")  # its holder died: nobody renews it
    time.sleep(0.3)
    with caplog.at_level(logging.WARNING):
        taken = hook.acquire(MANUAL, ttl_s=60, wait_s=0)
    assert taken.generation == 2 and taken.took_over == GATE and taken.job_id == "j1"
    assert "took over the expired lease" in caplog.text and "flink_agents_release_gate/ci__1" in caplog.text
    # the run that lost it can neither renew nor release it any more
    with pytest.raises(ProductionLeaseNotHeldError, match="flink_agents_replay/manual__1"):
        hook.renew(GATE, ttl_s=60)
    with pytest.raises(ProductionLeaseNotHeldError):
        hook.release(GATE, by="resume_production")
    assert hook.current() == taken


def test_only_the_holder_releases_and_releasing_twice_is_harmless(tmp_path: Path) -> None:
    hook = ProductionLeaseHook(str(tmp_path), PROD)
    assert hook.release(GATE, by="assert_production") is None  # never held, nobody holds it: nothing to do
    held = hook.acquire(GATE, ttl_s=60, wait_s=0)
    with pytest.raises(ProductionLeaseNotHeldError, match="held by run flink_agents_release_gate/ci__1"):
        hook.release(MANUAL, by="assert_production")
    assert hook.current() == held  # refused: unchanged
    resume = GATE.model_copy(update={"task_id": "resume_production"})
    done = hook.release(resume, by="resume_production")  # another task of the holder's run
    assert done is not None and done.released_by == "resume_production"
    assert hook.release(GATE, by="assert_production") == done  # idempotent: the same release
    hook.acquire(MANUAL, ttl_s=60, wait_s=0)
    with pytest.raises(ProductionLeaseNotHeldError):  # the lease is another run's now
        hook.release(GATE, by="assert_production")
    assert hook.read(1) == done


def test_a_run_reenters_its_own_lease(tmp_path: Path) -> None:
    hook = ProductionLeaseHook(str(tmp_path), PROD)
    first = hook.acquire(GATE, ttl_s=60, wait_s=0)
    resume = GATE.model_copy(update={"task_id": "resume_production", "try_number": 2})
    again = hook.acquire(resume, ttl_s=60, wait_s=0, job_id="j9")
    assert again.generation == first.generation and again.holder == resume and again.job_id == "j9"
    assert again.acquired_at == first.acquired_at and again.expires_at >= first.expires_at


def test_the_heartbeat_renews_and_notices_a_lost_lease(tmp_path: Path) -> None:
    hook = ProductionLeaseHook(str(tmp_path), PROD)
    first = hook.acquire(GATE, ttl_s=1.0, wait_s=0)
    with hook.heartbeat(GATE, ttl_s=1.0, every_s=0.1) as beat:
        time.sleep(1.5)  # longer than the TTL: only the renewals keep it
        assert not beat.lost.is_set() and hook.current().expires_at > first.expires_at  # type: ignore[union-attr]
        with pytest.raises(ProductionLeaseHeldError):
            hook.acquire(MANUAL, ttl_s=60, wait_s=0)
    time.sleep(1.1)  # no heartbeat any more: it expires, another run takes it over
    taken = hook.acquire(MANUAL, ttl_s=60, wait_s=0)
    assert taken.took_over == GATE
    with pytest.raises(ProductionLeaseNotHeldError), hook.heartbeat(GATE, ttl_s=1.0):
        pass
    # a holder whose lease another run takes over while it beats (a clock far ahead): the beat says so
    hook.release(MANUAL, by="quiesce")
    mine = hook.acquire(GATE, ttl_s=60, wait_s=0)
    with hook.heartbeat(GATE, ttl_s=60, every_s=0.05) as beat:
        assert hook._create(new_generation(mine.model_copy(update={"expires_at": mine.acquired_at}), PROD, MANUAL,
                                           ttl_s=60, now=mine.expires_at))  # fmt: skip
        assert beat.lost.wait(5) and "held by run flink_agents_replay/manual__1" in beat.reason


def test_an_unreadable_lease_file_is_named_with_the_fix(tmp_path: Path) -> None:
    hook = ProductionLeaseHook(str(tmp_path), PROD)
    (tmp_path / PROD.key).mkdir()
    (tmp_path / PROD.key / "000000000003.json").write_text("{not json")
    with pytest.raises(ProductionLeaseError, match=r"000000000003\.json is unreadable .*Fix: check that no replay run"):
        hook.acquire(GATE, ttl_s=60, wait_s=0)


def test_old_generations_are_pruned(tmp_path: Path) -> None:
    hook = ProductionLeaseHook(str(tmp_path), PROD, keep=3)
    for _ in range(6):
        hook.acquire(GATE, ttl_s=60, wait_s=0)
        hook.release(GATE, by="quiesce")
        hook.acquire(MANUAL, ttl_s=60, wait_s=0)
        hook.release(MANUAL, by="quiesce")
    assert hook.generations() == [10, 11, 12]


def test_an_object_store_creates_generations_exclusively() -> None:
    import uuid

    hook = ProductionLeaseHook(f"memory://afr-lease-{uuid.uuid4().hex[:8]}/runs/_leases", PROD)
    held = hook.acquire(GATE, ttl_s=60, wait_s=0)
    assert not hook._create(held)  # the generation exists: a second create loses
    with pytest.raises(ProductionLeaseHeldError):
        hook.acquire(MANUAL, ttl_s=60, wait_s=0)
    hook.release(GATE, by="quiesce")
    assert hook.acquire(MANUAL, ttl_s=60, wait_s=0).generation == 2

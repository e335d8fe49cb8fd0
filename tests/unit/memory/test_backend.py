"""The Mem0 backend seam (``memory/backend.py``): the rules both backends share — verify-untouched
classification, a fork into a taken target, which namespace a drop may delete — and that both backends
implement the protocol."""

from __future__ import annotations

import pytest

from airflow_flink_replay.core.memory_fork import (
    FORK_ID_FIELD,
    ForkManifest,
    Mem0Namespace,
    combine_digests,
    memory_digest,
)
from airflow_flink_replay.memory.backend import (
    ForkBaseline,
    Mem0Backend,
    completed_fork,
    fork_id_to_drop,
    refuse_foreign,
    untouched_report,
)
from airflow_flink_replay.memory.hosted import HostedMem0Backend
from airflow_flink_replay.memory.oss import OssMem0Backend
from airflow_flink_replay.memory.stores import ForkConflictError, NotAForkError

PROD = Mem0Namespace(user_id="prod-job")
REPLAY = Mem0Namespace(user_id="replay-1")


def test_untouched_report_classifies_replay_leaks_and_production_changes() -> None:
    before_payloads = {f"p{i}": {"hash": f"h{i}", "updated_at": "t"} for i in range(4)}
    before = {k: memory_digest(k, p, None) for k, p in before_payloads.items()}
    snapshot = {k: d[:8].hex() for k, d in before.items()}
    fingerprint = combine_digests(before.values())
    baseline = ForkBaseline(
        fork_id="run-9", source=PROD, target=REPLAY, count=4, fingerprint=fingerprint, snapshot=snapshot
    )

    same = untouched_report(baseline, now=before, payloads=before_payloads, production_writes_expected=True)
    assert same.ok and same.unchanged and not (same.added or same.removed or same.changed)
    assert (same.fork_id, same.source, same.target, same.count_at_fork) == ("run-9", PROD, REPLAY, 4)
    assert same.fingerprint_at_fork == same.fingerprint_now == fingerprint
    assert same.reason == "production namespace unchanged since the fork"

    payloads = dict(before_payloads)
    payloads["p1"] = {"hash": "h1-new", "updated_at": "t2"}  # production updated a memory
    payloads["leak"] = {"hash": "x", "updated_at": "t2", FORK_ID_FIELD: "run-9"}  # a fork copy in production
    payloads["prod-new"] = {"hash": "y", "updated_at": "t2"}  # production added one
    del payloads["p3"]  # production deleted one
    now = {k: memory_digest(k, p, None) for k, p in payloads.items()}
    report = untouched_report(baseline, now=now, payloads=payloads, production_writes_expected=True)
    assert not report.ok and not report.unchanged and report.count_now == 5
    assert (report.added, report.removed, report.changed) == (["leak", "prod-new"], ["p3"], ["p1"])
    assert report.replay_leak_ids == ["leak"] and report.production_change_ids == ["p1", "p3", "prod-new"]
    assert report.reason.startswith("1 change(s) to production namespace user_id=prod-job attributed to the replay")
    assert "3 other change(s) by production itself" in report.reason

    del payloads["leak"], now["leak"]
    own = untouched_report(baseline, now=now, payloads=payloads, production_writes_expected=True)
    assert own.ok and own.production_change_ids == ["p1", "p3", "prod-new"] and not own.replay_leak_ids
    assert own.reason == "3 change(s) by production itself since the fork; none from the replay"
    strict = untouched_report(baseline, now=now, payloads=payloads, production_writes_expected=False)
    assert not strict.ok and strict.replay_leak_ids == ["p1", "p3", "prod-new"] and not strict.production_change_ids
    assert "(production declared stopped)" in strict.reason

    # a partial baseline (hosted: copies the replay deleted) says so in the reason
    noted = ForkBaseline(**{**baseline.__dict__, "note": "1 fork copies missing from user_id=replay-1"})
    got = untouched_report(noted, now=before, payloads=before_payloads, production_writes_expected=True)
    assert got.ok and got.reason.endswith("unchanged since the fork (1 fork copies missing from user_id=replay-1)")


def _manifest(fork_id: str = "run-1", source: Mem0Namespace = PROD) -> ForkManifest:
    return ForkManifest(
        fork_id=fork_id, source=source, target=REPLAY, count=3, source_fingerprint="f" * 64, history_rows=2,
        forked_at="2026-11-29T00:00:00+00:00", snapshot_parts=1, store="chroma", collection="c",
    )  # fmt: skip


def test_a_complete_fork_of_this_run_is_a_noop_anything_else_a_conflict() -> None:
    done = completed_fork(_manifest(), PROD, REPLAY, "run-1", 0.5)
    assert done.noop and (done.fork_id, done.count, done.history_rows, done.duration_s) == ("run-1", 3, 2, 0.5)
    assert (done.source, done.target, done.store, done.collection) == (PROD, REPLAY, "chroma", "c")
    with pytest.raises(ForkConflictError, match=r"already holds fork 'run-0' of user_id=prod-job\. Fix: drop it first"):
        completed_fork(_manifest("run-0"), PROD, REPLAY, "run-1", 0.5)
    other = Mem0Namespace(user_id="other-job")
    with pytest.raises(ForkConflictError, match="already holds fork 'run-1' of user_id=other-job"):
        completed_fork(_manifest(source=other), PROD, REPLAY, "run-1", 0.5)


def test_only_leftovers_of_the_same_fork_may_be_overwritten() -> None:
    refuse_foreign(REPLAY, "run-1", {})
    refuse_foreign(REPLAY, "run-1", {"a": {FORK_ID_FIELD: "run-1"}})
    taken = r"holds 2 memories that are not from fork 'run-1' \(e\.g\. b\).* Fix: choose another target"
    with pytest.raises(ForkConflictError, match=taken):
        refuse_foreign(REPLAY, "run-1", {"a": {FORK_ID_FIELD: "run-1"}, "b": {}, "c": {FORK_ID_FIELD: "run-0"}})


def test_drop_deletes_forks_and_interrupted_forks_only() -> None:
    assert fork_id_to_drop(REPLAY, None, {}) is None  # nothing there: a no-op
    assert fork_id_to_drop(REPLAY, "run-1", {}) == "run-1"  # complete (empty) fork: its markers go
    assert fork_id_to_drop(REPLAY, "run-1", {"own": {"data": "the replay's own write"}}) == "run-1"
    assert fork_id_to_drop(REPLAY, None, {"a": {FORK_ID_FIELD: "run-2"}}) == "run-2"  # interrupted fork
    with pytest.raises(NotAForkError, match=r"not a fork made by airflow-flink-replay \(1 memories .*Fix: "):
        fork_id_to_drop(PROD, None, {"a": {FORK_ID_FIELD: "run-2"}, "p": {"data": "production's"}})


def test_both_backends_implement_the_protocol() -> None:
    assert isinstance(OssMem0Backend({}), Mem0Backend)
    assert isinstance(HostedMem0Backend(host="https://mem0.example"), Mem0Backend)  # nothing contacted
    with pytest.raises(ValueError, match=r"extra\.offline_embedder: use hashing, minilm or config, not 'bert'"):
        OssMem0Backend({}, embedder="bert")

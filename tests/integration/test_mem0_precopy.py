"""Pre-copy + delta memory fork on real mem0 (offline) and the stack's Chroma server (issue 16).

Production writes memories — adds, updates, deletes through mem0, plus the writes a timestamp-based
delta would miss (a vector rewritten in place, a text changed with ``updated_at`` left as it was) — while
the pre-copy runs and right up to the cut; the delta round runs at the cut. The fork then holds exactly
production's memory at that instant: the fork's fingerprint equals production's, every copy carries the
source's payload, document and vector bit for bit, every history row is there, and only the changes were
written in the window. A retry after the delta is a no-op; a delta that fails restores the pre-copy (the
retry then completes it); a process killed mid-delta leaves a marker-less fork the retry copies in full.

Only Chroma is used (no Flink): the module reads where the running stack's Chroma listens and skips when
the stack is down, and does not ask for the TaskManager housekeeping the Flink modules need.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.memory_fork import (
    FORK_SOURCE_ID_FIELD,
    FORKED_AT_FIELD,
    PROVENANCE_FIELDS,
    Mem0Namespace,
    combine_digests,
    fork_memory_id,
    memory_digest,
)
from airflow_flink_replay.hooks.mem0 import ForkConflictError, Mem0Hook
from airflow_flink_replay.memory.offline import build_offline_memory, hashing_embed
from tests.integration.mem0_fixtures import drop_collection, seed, store_config

PROD = {"user_id": "prod-job-16"}
FORK = {"user_id": "replay-16-baseline"}
N = 1000


@pytest.fixture(autouse=True, scope="module")
def _fresh_taskmanager_when_metaspace_fills() -> None:
    """This module uses Chroma only: the Flink TaskManager housekeeping of tests/conftest.py is not needed."""


@pytest.fixture(scope="module")
def chroma() -> tuple[str, int]:
    """Host and port of the running local stack's Chroma (the module skips when the stack is down)."""
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    info = LocalStack(StackConfig()).info()
    if info is None:
        pytest.skip("the local stack is not up (flink-replay stack up)")
    return info.chroma_host, info.chroma_port


@pytest.fixture
def hook(chroma: tuple[str, int], tmp_path: Path) -> Iterator[Mem0Hook]:
    """A Mem0Hook on a fresh Chroma collection seeded with ``N`` production memories."""
    h = Mem0Hook(config=store_config("chroma", tmp_path, *chroma), batch_size=300)
    seed(h.get_memory(), PROD["user_id"], N, via_add=60)
    yield h
    drop_collection(h.get_memory())


def production(hook: Mem0Hook) -> Any:
    """Production's own mem0 Memory: another client on the same collection and history db."""
    return build_offline_memory(hook.get_config())


def records(hook: Mem0Hook, namespace: dict[str, str]) -> dict[str, Any]:
    """``{id: StoredMemory}`` of a namespace, vectors included."""
    return {r.id: r for r in hook.list_memories(namespace, with_vectors=True)}


def history(hook: Mem0Hook) -> dict[str, list[tuple[Any, ...]]]:
    """mem0's history rows by memory id (the row's own id left out: the fork derives its own)."""
    with contextlib.closing(sqlite3.connect(hook.get_config()["history_db_path"])) as conn:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(history)")]
        out: dict[str, list[tuple[Any, ...]]] = {}
        for row in conn.execute(f"SELECT {', '.join(cols)} FROM history"):
            rec = dict(zip(cols, row, strict=True))
            out.setdefault(rec.pop("memory_id"), []).append(
                tuple(sorted((k, str(v)) for k, v in rec.items() if k != "id"))
            )
        return {k: sorted(v) for k, v in out.items()}


def assert_fork_is(hook: Mem0Hook, prod: dict[str, Any], prod_history: dict[str, list[Any]]) -> None:
    """The fork holds exactly ``prod``: one copy per memory, same payload (scope and provenance aside),
    document and vector bit for bit, same history; its fingerprint under the source ids equals production's."""
    fork = records(hook, FORK)
    by_source = {r.payload[FORK_SOURCE_ID_FIELD]: r for r in fork.values()}
    assert len(by_source) == len(fork) == len(prod)
    assert set(by_source) == set(prod)
    fork_history = history(hook)
    for sid, src in prod.items():
        copy = by_source[sid]
        assert {k: v for k, v in copy.payload.items() if k not in PROVENANCE_FIELDS} == {**src.payload, **FORK}, sid
        assert copy.document == src.document
        assert copy.dense() == src.dense(), sid  # float32 bits: both read back from the store
        assert fork_history.get(copy.id, []) == prod_history.get(sid, []), sid
    as_source = combine_digests(memory_digest(sid, c.payload, c.dense()) for sid, c in by_source.items())
    assert as_source == hook.fingerprint(PROD).digest


class ProductionWriter(threading.Thread):
    """Production's agent writing its memory until told to stop: adds, updates and deletes through mem0,
    and the two writes an ``updated_at`` diff would miss, straight into the store — a vector rewritten in
    place (same payload) and a text changed with the same ``updated_at``."""

    def __init__(self, hook: Mem0Hook, seed_: int) -> None:
        super().__init__(daemon=True)
        self.memory = production(hook)
        self.col = hook.get_store().col
        self.rng = random.Random(seed_)
        self.stop = threading.Event()
        self.writes = 0
        self.error: BaseException | None = None

    def _ids(self) -> list[str]:
        return list(self.col.get(where={"user_id": PROD["user_id"]}, include=[])["ids"])

    def step(self, i: int) -> None:
        kind = i % 5
        ids = self._ids()
        mid = self.rng.choice(ids)
        if kind == 0:
            self.memory.add(f"new fact {i} about espresso", user_id=PROD["user_id"], agent_id=f"key-{i % 7}",
                            run_id="ltm", infer=False)  # fmt: skip
        elif kind == 1:
            self.memory.update(mid, f"updated fact {i} about window seats")
        elif kind == 2:
            self.memory.delete(mid)
        elif kind == 3:  # the stored vector changes, the payload (hash, updated_at) does not
            self.col.update(ids=[mid], embeddings=[hashing_embed(f"re-embedded {i}")])
        else:  # the text changes, updated_at stays: a same-tick write
            meta = self.col.get(ids=[mid], include=["metadatas"])["metadatas"][0]
            self.col.update(ids=[mid], metadatas=[{**meta, "data": f"same-tick text {i}"}])
        self.writes += 1

    def run(self) -> None:
        try:
            i = 0
            while not self.stop.is_set():
                self.step(i)
                i += 1
        except BaseException as exc:  # reported by the test
            self.error = exc

    def halt(self) -> None:
        """Stop writing (production stopped at its savepoint) and wait for the write in flight."""
        self.stop.set()
        self.join(timeout=60)
        assert not self.is_alive() and self.error is None, self.error


def change(hook: Mem0Hook, memory: Any, tag: str) -> dict[str, int]:
    """A fixed set of production changes: 3 adds, 2 updates, 2 deletes (through mem0)."""
    ids = sorted(r.id for r in hook.list_memories(PROD))
    for i in range(3):
        memory.add(f"{tag} new memory {i}", user_id=PROD["user_id"], agent_id="key-1", run_id="ltm", infer=False)
    for mid in ids[:2]:
        memory.update(mid, f"{tag} updated text of {mid}")
    for mid in ids[2:4]:
        memory.delete(mid)
    return {"added": 3, "updated": 2, "removed": 2}


def test_production_writing_up_to_the_cut(hook: Mem0Hook) -> None:
    writer = ProductionWriter(hook, seed_=16)
    writer.start()
    try:
        time.sleep(0.5)
        pre = hook.precopy(PROD, FORK, fork_id="run-16")
        assert pre.kind == "precopy" and not pre.delta and pre.count > 0
        assert hook.read_manifest(FORK) is None  # a pre-copy is not a fork yet
        writes_at_precopy = writer.writes
        time.sleep(1.0)  # production keeps writing after the pre-copy, right up to the cut
    finally:
        writer.halt()
    assert writer.writes - writes_at_precopy >= 5, writer.writes  # every kind of write after the pre-copy

    # the cut: production is stopped; what the fork must equal
    at_cut = hook.fingerprint(PROD)
    prod, prod_history = records(hook, PROD), history(hook)
    result = hook.fork(PROD, FORK, fork_id="run-16")

    assert result.kind == "fork" and result.delta and not result.noop
    assert result.source_fingerprint == at_cut.digest and result.count == at_cut.count == len(prod)
    assert result.precopied_at == pre.forked_at
    changed = result.added + result.updated + result.removed
    assert 0 < changed <= writer.writes  # only what changed since the pre-copy was written
    # the copies the delta did not rewrite still carry the pre-copy's stamp
    stamps = [r.payload[FORKED_AT_FIELD] for r in hook.list_memories(FORK)]
    assert stamps.count(result.forked_at) == result.added + result.updated
    assert stamps.count(pre.forked_at) == result.count - result.added - result.updated
    assert_fork_is(hook, prod, prod_history)
    # a full fork of the same instant agrees
    full = hook.fork(PROD, {"user_id": "replay-16-full"}, fork_id="run-16-full")
    assert not full.delta and full.source_fingerprint == result.source_fingerprint
    report = hook.verify_untouched(FORK, production_writes_expected=False)
    assert report.ok and report.unchanged, report.reason


def test_retry_after_the_delta_is_a_noop(hook: Mem0Hook) -> None:
    hook.precopy(PROD, FORK, fork_id="run-16")
    change(hook, production(hook), "retry")
    first = hook.fork(PROD, FORK, fork_id="run-16")
    assert (first.added, first.updated, first.removed) == (3, 2, 2)
    before = records(hook, FORK)
    again = hook.fork(PROD, FORK, fork_id="run-16")
    assert again.noop and again.source_fingerprint == first.source_fingerprint and again.count == first.count
    after = records(hook, FORK)
    assert {k: (r.payload, r.dense()) for k, r in after.items()} == {
        k: (r.payload, r.dense()) for k, r in before.items()
    }
    # a pre-copy after the fork is complete is a no-op too (a re-run of the pre-copy task)
    assert hook.precopy(PROD, FORK, fork_id="run-16").noop
    with pytest.raises(ForkConflictError):
        hook.precopy(PROD, FORK, fork_id="another-run")


def test_precopy_rounds_and_drop(hook: Mem0Hook) -> None:
    hook.precopy(PROD, FORK, fork_id="run-16")
    change(hook, production(hook), "round")
    second = hook.precopy(PROD, FORK, fork_id="run-16")  # one more round while production runs
    assert second.kind == "precopy" and second.delta and (second.added, second.updated, second.removed) == (3, 2, 2)
    cut = hook.fork(PROD, FORK, fork_id="run-16")
    assert cut.delta and (cut.added, cut.updated, cut.removed) == (0, 0, 0)
    assert_fork_is(hook, records(hook, PROD), history(hook))
    other = Mem0Namespace(user_id="replay-16-other")
    hook.precopy(PROD, other, fork_id="x")
    with pytest.raises(ForkConflictError, match="pre-copy of fork 'x'"):  # another run's pre-copy is refused
        hook.fork(PROD, other, fork_id="y")
    dropped = hook.drop(other)  # a pre-copy that never became a fork is dropped, markers included
    assert dropped.existed and dropped.fork_id == "x" and dropped.dropped == cut.count
    assert hook.count(other) == 0 and not hook.get_store().ids_where({"afr_marker": other.key()})


def _fail_on(hook: Mem0Hook, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Make the delta fail once: at its first copy write (``copy``) or at the fork's manifest (``manifest``)."""
    store = hook.get_store()
    original = store.insert
    failed: list[str] = []

    def write(recs: Any) -> None:
        is_manifest = any(r.payload.get("afr_marker_kind") == "manifest" for r in recs)
        is_copy = any(FORK_SOURCE_ID_FIELD in r.payload for r in recs)
        if not failed and ((where == "manifest" and is_manifest) or (where == "copy" and is_copy)):
            failed.append(where)  # once: the store is back for the rollback
            original(recs[: len(recs) // 2])  # half of it lands, then the store fails
            raise ConnectionError(f"injected failure at {where}")
        original(recs)

    monkeypatch.setattr(store, "insert", write)


@pytest.mark.parametrize("where", ["copy", "manifest"])
def test_failed_delta_restores_the_precopy_and_the_retry_completes(
    hook: Mem0Hook, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    pre = hook.precopy(PROD, FORK, fork_id="run-16")
    precopied = {k: (r.payload, r.dense()) for k, r in records(hook, FORK).items()}
    precopied_history = history(hook)
    change(hook, production(hook), "fail")
    prod_now = records(hook, PROD)
    with monkeypatch.context() as patch:
        _fail_on(hook, patch, where)
        with pytest.raises(ConnectionError, match="injected"):
            hook.fork(PROD, FORK, fork_id="run-16")
    # nothing half-applied: the target is the pre-copy again (copies, their history, its marker), not a fork
    assert {k: (r.payload, r.dense()) for k, r in records(hook, FORK).items()} == precopied
    after = history(hook)
    assert {k: after.get(k) for k in precopied} == {k: precopied_history.get(k) for k in precopied}
    copy_ids = {fork_memory_id("run-16", Mem0Namespace(**FORK).key(), sid) for sid in set(after) | set(prod_now)}
    assert not (set(after) - set(precopied_history)) & copy_ids  # new rows: production's own, none of a copy
    assert hook.read_manifest(FORK) is None
    restored = hook.get_backend().read_precopy(Mem0Namespace(**FORK))
    assert restored is not None and restored.precopied_at == pre.forked_at
    retry = hook.fork(PROD, FORK, fork_id="run-16")
    assert retry.delta and (retry.added, retry.updated, retry.removed) == (3, 2, 2)
    assert retry.precopied_at == pre.forked_at
    assert_fork_is(hook, records(hook, PROD), history(hook))


def test_killed_mid_delta_the_retry_copies_in_full(hook: Mem0Hook, monkeypatch: pytest.MonkeyPatch) -> None:
    hook.precopy(PROD, FORK, fork_id="run-16")
    change(hook, production(hook), "killed")
    backend = hook.get_backend()
    with monkeypatch.context() as patch:
        _fail_on(hook, patch, "copy")
        patch.setattr(backend, "_restore_precopy", lambda *a, **k: None)  # the worker died: no rollback ran
        with pytest.raises(ConnectionError):
            hook.fork(PROD, FORK, fork_id="run-16")
    assert hook.read_manifest(FORK) is None
    retry = hook.fork(PROD, FORK, fork_id="run-16")  # leftovers without any marker: removed, copied in full
    assert not retry.delta and retry.count == len(records(hook, PROD))
    assert_fork_is(hook, records(hook, PROD), history(hook))

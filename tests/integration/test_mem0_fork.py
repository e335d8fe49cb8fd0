"""Mem0 namespace fork on real mem0 (offline) with the stack's Chroma server, embedded Qdrant and FAISS.

Acceptance of issue 6: 1,000 memories across keys in a production namespace; fork; same texts, metadata
and vectors — the stored vectors, not re-embedded ones: most seeded vectors differ from what the embedder
gives for their text, and the embedder raises while the fork runs —; search in the fork finds what
search in the source finds; the source fingerprint is unchanged; replay writes stay out of production;
a replay leak into production fails verify-untouched while production's own writes are only reported;
drop removes the fork and refuses a non-fork namespace; a failure mid-fork leaves nothing behind — the
network to the Chroma server cut by a proxy (a real fault), and patched failures where no real fault can
reach (embedded stores, a killed process); a retry after success is a no-op. FAISS goes through mem0's generic
``VectorStoreBase``.
"""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from airflow_flink_replay.core.memory_fork import (
    FORK_ID_FIELD,
    FORK_SOURCE_ID_FIELD,
    MARKER_FIELD,
    PROVENANCE_FIELDS,
    SCOPE_FIELDS,
    Mem0Namespace,
    rewrite_payload,
)
from airflow_flink_replay.hooks.mem0 import ForkConflictError, Mem0Hook, NotAForkError
from airflow_flink_replay.memory.offline import hashing_embed
from airflow_flink_replay.memory.stores import StoredMemory
from tests.integration.mem0_fixtures import (
    TOPICS,
    CuttableTcpProxy,
    drop_collection,
    embedder_forbidden,
    seed,
    store_config,
    text_for,
)

PROD = {"user_id": "prod-job-7"}
OTHER = {"user_id": "other-job"}


@pytest.fixture(params=["chroma", "qdrant", "faiss"])
def hook(request: pytest.FixtureRequest, stack: Any, tmp_path: Path) -> Iterator[Mem0Hook]:
    """A Mem0Hook on a fresh collection of the given store."""
    config = store_config(request.param, tmp_path, stack.chroma_host, stack.chroma_port)
    h = Mem0Hook(config=config, batch_size=400)
    yield h
    drop_collection(h.get_memory())


def history_rows(hook: Mem0Hook, memory_ids: list[str]) -> int:
    path = hook.get_memory().config.history_db_path
    with sqlite3.connect(path) as conn:
        marks = ",".join("?" * len(memory_ids))
        return conn.execute(f"SELECT COUNT(*) FROM history WHERE memory_id IN ({marks})", memory_ids).fetchone()[0]


def content(payload: dict[str, Any]) -> dict[str, Any]:
    """Payload without scope and provenance fields (what must be equal in source and fork)."""
    return {k: v for k, v in payload.items() if k not in PROVENANCE_FIELDS and k not in SCOPE_FIELDS}


def embedder_made(records: list[StoredMemory]) -> int:
    """How many records hold the vector the embedder gives for their text (to float32 precision)."""
    return sum(
        np.allclose(np.asarray(r.dense(), dtype=np.float32), hashing_embed(r.payload["data"]), rtol=0, atol=1e-6)
        for r in records
    )


def assert_vectors_identical(hook: Mem0Hook, src: list[float], fork: list[float]) -> None:
    """Bit-identical (Chroma, FAISS), except where Qdrant's float32 cosine re-normalisation on write rounds
    the last bits."""
    if src == fork:
        return
    provider = hook.get_store().provider
    assert provider == "qdrant", f"{provider} must store the copied vector unchanged"
    a, b = np.asarray(src, dtype=np.float32), np.asarray(fork, dtype=np.float32)
    ulps = np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))
    assert int(ulps.max()) <= 2, f"{int(ulps.max())} ulp apart"
    rewritten = a / np.linalg.norm(a)  # what Qdrant stores for ANY write of ``src`` (float32 cosine)
    assert np.array_equal(rewritten, b), "the fork's vector is not the store's rewrite of the source vector"


def test_fork_1000_memories_roundtrip(hook: Mem0Hook) -> None:
    memory = hook.get_memory()
    seed(memory, PROD["user_id"], 1000, via_add=120)
    seed(memory, OTHER["user_id"], 30, via_add=5)
    assert hook.count(PROD) == 1000
    # only the 120 memories written through Memory.add hold the embedder's vector of their text: a fork
    # that re-embedded instead of copying would change the other 880
    assert embedder_made(hook.list_memories(PROD, with_vectors=True)) == 120
    before = hook.fingerprint(PROD)
    target = {"user_id": "replay-run-1"}

    with embedder_forbidden(memory):  # the fork never embeds
        result = hook.fork(PROD, target, fork_id="run-1")
    assert (result.count, result.noop, result.source_fingerprint) == (1000, False, before.digest)
    assert result.history_rows == 120  # one ADD row per Memory.add, remapped to the fork ids
    assert hook.count(target) == 1000 and hook.count(OTHER) == 30

    # same texts, metadata and vectors, new ids, provenance added
    src = {r.id: r for r in hook.list_memories(PROD, with_vectors=True)}
    fork = hook.list_memories(target, with_vectors=True)
    assert {r.payload[FORK_SOURCE_ID_FIELD] for r in fork} == set(src)
    assert not {r.id for r in fork} & set(src)
    by_agent: dict[str, int] = {}
    for r in fork:
        s = src[r.payload[FORK_SOURCE_ID_FIELD]]
        assert content(r.payload) == content(s.payload)
        assert r.payload["user_id"] == "replay-run-1"
        assert (r.payload["agent_id"], r.payload["run_id"]) == (s.payload["agent_id"], s.payload["run_id"])
        assert r.payload[FORK_ID_FIELD] == "run-1"
        assert_vectors_identical(hook, s.dense(), r.dense())
        by_agent[r.payload["agent_id"]] = by_agent.get(r.payload["agent_id"], 0) + 1
    assert len(by_agent) == 25
    assert embedder_made(fork) == 120  # the stored vectors were copied, not re-embedded

    # mem0's own API sees the same memories (text and metadata) in both namespaces
    got_src = memory.get_all(filters={**PROD, "agent_id": "key-3"}, top_k=500)["results"]
    got_fork = memory.get_all(filters={**target, "agent_id": "key-3"}, top_k=500)["results"]
    assert len(got_src) == len(got_fork) == 40
    assert sorted(m["memory"] for m in got_src) == sorted(m["memory"] for m in got_fork)
    fork_meta = {m["memory"]: {k: v for k, v in (m.get("metadata") or {}).items() if k not in PROVENANCE_FIELDS}
                 for m in got_fork}  # fmt: skip
    assert all(fork_meta[m["memory"]] == (m.get("metadata") or {}) for m in got_src)
    forked_real = [r for r in fork if history_rows(hook, [r.id])]
    assert len(forked_real) == 120
    hist = memory.history(forked_real[0].id)
    assert hist and hist[0]["new_memory"] == forked_real[0].payload["data"]

    # search in the fork finds what search in the source finds (same hits, same scores; near-ties —
    # Qdrant's last-bit rounding — ordered by text, and 4 spare hits so a tie at the cut is not lost).
    # mem0's FAISS store filters AFTER a global nearest-neighbour search of 2 * max(4 * top_k, 60) hits,
    # so a scoped search there needs a top_k that covers the collection.
    search_k = 600 if hook.get_store().provider == "faiss" else 12

    def top(filters: dict[str, str], query: str) -> list[tuple[float, str]]:
        hits = memory.search(query, filters=filters, top_k=search_k)["results"]
        return sorted((-round(m["score"], 5), m["memory"]) for m in hits)[:8]

    for topic in TOPICS[:6]:
        for scope in ({}, {"agent_id": "key-5"}):
            a, b = top({**PROD, **scope}, f"prefers {topic}"), top({**target, **scope}, f"prefers {topic}")
            assert len(a) == 8 and a == b
            assert topic in a[0][1]

    # source unchanged by fork and searches
    assert hook.fingerprint(PROD).digest == before.digest

    # writes through the replay namespace do not reach production
    memory.add(
        "replay-only: customer likes oolong", user_id="replay-run-1", agent_id="key-3", run_id="ltm", infer=False
    )
    assert hook.count(target) == 1001 and hook.count(PROD) == 1000
    assert all("oolong" not in m["memory"] for m in memory.get_all(filters=PROD, top_k=2000)["results"])
    report = hook.verify_untouched(target)
    assert report.ok and report.unchanged and report.fingerprint_now == before.digest

    # production's own write after resume: reported, not a failure
    memory.add("production wrote after resume", user_id=PROD["user_id"], agent_id="key-1", run_id="ltm", infer=False)
    report = hook.verify_untouched(target)
    assert (
        report.ok and not report.unchanged and len(report.added) == 1 and report.production_change_ids == report.added
    )
    strict = hook.verify_untouched(target, production_writes_expected=False)
    assert not strict.ok and strict.replay_leak_ids == report.added

    # a replay leak — a fork copy landing in production's namespace, and a production memory overwritten
    # with a fork payload — fails the check; production's own write next to it stays production's
    store = hook.get_store()
    copy = next(r for r in fork if r.payload["agent_id"] == "key-2")
    landed = StoredMemory(id=str(uuid.uuid4()), payload={**copy.payload, **PROD}, vector=copy.vector,
                          document=copy.document)  # fmt: skip
    victim = next(s for s in src.values() if s.payload["agent_id"] == "key-4")
    text = "the replay rewrote this memory"
    rewritten = rewrite_payload(victim.payload, source_id=victim.id, source="{}", target=PROD, fork_id="run-1",
                                forked_at=datetime.now(UTC).isoformat())  # fmt: skip
    rewritten.update(data=text, hash=hashlib.md5(text.encode()).hexdigest(), updated_at=datetime.now(UTC).isoformat())
    store.insert([landed, StoredMemory(id=victim.id, payload=rewritten, vector=victim.vector, document=text)])
    leak = hook.verify_untouched(target)
    assert not leak.ok and not leak.unchanged
    assert leak.replay_leak_ids == sorted([landed.id, victim.id])
    assert leak.added == sorted([landed.id, *report.added]) and leak.changed == [victim.id] and not leak.removed
    assert leak.production_change_ids == report.added
    assert "2 change(s) to production namespace user_id=prod-job-7 attributed to the replay" in leak.reason
    store.delete_ids([landed.id])  # undo the leak: production's own write is all that is left
    store.insert([victim])
    undone = hook.verify_untouched(target)
    if store.provider == "qdrant":
        # qdrant-client's local mode normalises an UPDATED point in float64 (a new point in float32): the
        # restored victim's vector may come back a few ulp off. Then it is a production change, not a leak.
        assert undone.ok and not undone.replay_leak_ids and set(undone.changed) <= {victim.id}, undone
        assert undone.added == report.added and not undone.removed
    else:
        assert undone.model_dump(exclude={"reason"}) == report.model_dump(exclude={"reason"})

    # drop refuses production and foreign namespaces, removes the fork (incl. the replay's write)
    with pytest.raises(NotAForkError):
        hook.drop(PROD)
    with pytest.raises(NotAForkError):
        hook.drop(OTHER)
    assert hook.drop(target, keep=True).kept and hook.count(target) == 1001
    dropped = hook.drop(target)
    assert (dropped.dropped, dropped.fork_id, dropped.history_rows) == (1001, "run-1", 121)
    assert hook.count(target) == 0 and hook.read_manifest(target) is None
    assert hook.count(PROD) == 1001 and hook.count(OTHER) == 30
    assert hook.drop(target).existed is False  # cleanup twice is a no-op

    # namespaces are any combination of user_id / agent_id / run_id: fork one key of production
    assert hook.count({**PROD, "agent_id": "key-7"}) == 40
    assert hook.count({"agent_id": "key-3", "run_id": "ltm"}) == 40 + 2  # production + other-job (fork dropped)
    one_key = hook.fork({**PROD, "agent_id": "key-7"}, {"user_id": "replay-k7", "agent_id": "key-7"}, fork_id="k7")
    assert one_key.count == 40 and hook.count({"user_id": "replay-k7"}) == 40
    assert hook.drop({"user_id": "replay-k7", "agent_id": "key-7"}).dropped == 40


def test_fork_failure_leaves_nothing_and_retry_is_noop(hook: Mem0Hook, monkeypatch: pytest.MonkeyPatch) -> None:
    """Failures injected by patching the store, where no real fault can do it; Chroma's real network faults
    are :func:`test_chroma_unreachable_during_the_fork`.

    * A write failing mid-fork and a failing marker write, the store staying reachable (the rollback
      removes everything): patched for the embedded stores (Qdrant, FAISS: in-process, no link to cut);
      on the Chroma server the real-fault test's blip cases check the same.
    * A crash between writes that could not clean up (process killed: no rollback at all), every store:
      the retry removes the leftovers and forks; someone else's leftovers are refused.
    * Retry after success is a no-op; a taken target is refused.
    """
    memory = hook.get_memory()
    seed(memory, PROD["user_id"], 400, via_add=40)
    before = hook.fingerprint(PROD).digest
    target = {"user_id": "replay-run-2"}
    store = hook.get_store()
    backend = hook.get_backend()  # the vector-store backend writes the markers and cleans up
    if store.provider != "chroma":
        _patched_failures_leave_nothing(hook, monkeypatch, target)

    # a crash that could not clean up (process killed): the retry removes the leftovers and forks
    monkeypatch.setattr(backend, "_remove", lambda *a, **k: 0)
    monkeypatch.setattr(backend, "_write_markers", _failing_marker)
    with pytest.raises(RuntimeError):
        hook.fork(PROD, target, fork_id="run-2")
    monkeypatch.undo()
    assert hook.count(target) == 400 and hook.read_manifest(target) is None  # partial: no marker
    with pytest.raises(ForkConflictError, match="not from fork"):
        hook.fork(PROD, target, fork_id="another-run")  # someone else's leftovers are never deleted

    first = hook.fork(PROD, target, fork_id="run-2")
    assert (first.count, first.noop, first.source_fingerprint) == (400, False, before)
    assert hook.count(target) == 400

    # retry after success: no-op, same result
    again = hook.fork(PROD, target, fork_id="run-2")
    assert again.noop and (again.count, again.source_fingerprint, again.forked_at) == (400, before, first.forked_at)
    assert hook.count(target) == 400

    # the target is taken: another run, or a namespace with data, is refused
    with pytest.raises(ForkConflictError, match="already holds fork"):
        hook.fork(PROD, target, fork_id="run-3")
    seed(memory, OTHER["user_id"], 5, via_add=0)
    with pytest.raises(ForkConflictError, match="not from fork"):
        hook.fork(PROD, OTHER, fork_id="run-3")
    with pytest.raises(ValueError, match="equals the source"):
        hook.fork(PROD, PROD, fork_id="run-3")
    assert hook.fingerprint(PROD).digest == before
    hook.drop(target)


def _failing_marker(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("injected: marker write failed")


def _patched_failures_leave_nothing(hook: Mem0Hook, monkeypatch: pytest.MonkeyPatch, target: dict[str, str]) -> None:
    """A write failing mid-fork, then a failing marker write, the store reachable: nothing is left."""
    memory, store, backend = hook.get_memory(), hook.get_store(), hook.get_backend()
    store.batch_size = 100  # read pages of 100: the fork writes in 4 batches
    real_insert = store.insert
    calls = {"n": 0}

    def failing_insert(records: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # the second batch: 100 memories already written
            real_insert(records[:50])  # and part of this one
            raise RuntimeError("injected: store went away mid-fork")
        real_insert(records)

    monkeypatch.setattr(store, "insert", failing_insert)
    with pytest.raises(RuntimeError, match="injected"):
        hook.fork(PROD, target, fork_id="run-2")
    monkeypatch.setattr(store, "insert", real_insert)
    assert hook.count(target) == 0 and hook.read_manifest(target) is None
    fork_tagged = [r for r in hook.list_memories(target) if r.payload.get(FORK_ID_FIELD)]
    assert not fork_tagged
    with sqlite3.connect(memory.config.history_db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM history").fetchone()[0] == 40  # only production's rows

    # failure while writing the completion marker (every memory already copied): also nothing left
    monkeypatch.setattr(backend, "_write_markers", _failing_marker)
    with pytest.raises(RuntimeError, match="marker"):
        hook.fork(PROD, target, fork_id="run-2")
    monkeypatch.undo()
    assert hook.count(target) == 0 and hook.read_manifest(target) is None


@pytest.fixture
def chroma_behind_proxy(stack: Any, tmp_path: Path) -> Iterator[tuple[Mem0Hook, CuttableTcpProxy, dict[str, Any]]]:
    """A hook straight on the stack's Chroma (seeding, checks), a proxy in front of that server, and the
    config of the same collection reached through the proxy (what the fork uses)."""
    config = store_config("chroma", tmp_path, stack.chroma_host, stack.chroma_port)
    direct = Mem0Hook(config=config, batch_size=100)
    proxy = CuttableTcpProxy(stack.chroma_host, stack.chroma_port)
    vs = config["vector_store"]
    through_proxy = {**config, "vector_store": {**vs, "config": {**vs["config"], "port": proxy.port}}}
    yield direct, proxy, through_proxy
    proxy.close()
    drop_collection(direct.get_memory())


# 400 memories read in 4 batches of 100, each written as 2 concurrent upserts of 50 (ChromaAdapter's
# write_workers), then one upsert of the snapshot part(s), then the manifest's: upsert 3 is mid-copy
# (100 memories written), upsert 10 the completion marker (every memory and the snapshot written).
@pytest.mark.parametrize(
    ("cut_at", "stay_down"),
    [(3, True), (10, True), (3, False), (10, False)],
    ids=["outage-mid-copy", "outage-at-the-manifest", "blip-mid-copy", "blip-at-the-manifest"],
)
def test_chroma_unreachable_during_the_fork(
    chroma_behind_proxy: tuple[Mem0Hook, CuttableTcpProxy, dict[str, Any]], cut_at: int, stay_down: bool
) -> None:
    """Real fault, no mock: the network to the Chroma server fails while the fork writes.

    A blip (one connection reset): the fork fails and its own rollback leaves nothing. An outage (every
    connection closed, new ones refused, then the link comes back): the rollback cannot reach Chroma
    either, so the fork fails with its own error (not the rollback's) plus a note naming what it left
    and what removes it; the leftovers are tagged and carry no completion marker, and once Chroma is
    reachable the fork's retry (mid-copy) or the DAG's cleanup, a drop (at the manifest: snapshot parts
    already written), leaves the target without memories or markers. Production's namespace and its
    history rows are untouched throughout.
    """
    direct, proxy, through_proxy = chroma_behind_proxy
    memory = direct.get_memory()
    seed(memory, PROD["user_id"], 400, via_add=40)
    before = direct.fingerprint(PROD).digest
    target = {"user_id": "replay-run-cut"}
    markers = {MARKER_FIELD: Mem0Namespace.coerce(target).key()}
    fork_hook = Mem0Hook(config=through_proxy, batch_size=100)
    fork_hook.get_store()  # the collection opened through the proxy before the fault is armed
    proxy.cut_at, proxy.stay_down = cut_at, stay_down

    with pytest.raises(httpx.TransportError) as err:
        fork_hook.fork(PROD, target, fork_id="run-cut")
    assert proxy.seen >= cut_at and proxy.forwarded == (cut_at - 1 if stay_down else proxy.seen - 1)
    assert all(entry.name != "_remove" for entry in err.traceback), "the rollback's error hid the fork's"
    note = " ".join(getattr(err.value, "__notes__", []))
    assert direct.fingerprint(PROD).digest == before
    assert history_rows_total(memory) == 40  # only production's: the rollback removed the copied rows
    assert direct.read_manifest(target) is None  # no completion marker: never used as a fork
    if not stay_down:  # the rollback reached Chroma: nothing left
        assert not proxy.is_cut and not note
        assert direct.count(target) == 0 and direct.get_store().count(markers) == 0
        assert fork_hook.fork(PROD, target, fork_id="run-cut").source_fingerprint == before
        assert direct.drop(target).dropped == 400
        return

    assert proxy.is_cut
    assert "fork 'run-cut' into user_id=replay-run-cut: the rollback could not remove" in note, note
    assert "a retry of this fork removes them first" in note and "DropMem0ForkOperator" in note
    proxy.restore()  # the network comes back
    left = direct.list_memories(target)
    assert left and all(r.payload[FORK_ID_FIELD] == "run-cut" for r in left)  # tagged leftovers only
    assert direct.read_manifest(target) is None
    if cut_at == 3:
        assert len(left) == 100 and direct.get_store().count(markers) == 0
        # the fork task's retry, in a new worker: removes the leftovers, then forks
        retried = Mem0Hook(config=through_proxy, batch_size=100).fork(PROD, target, fork_id="run-cut")
        assert (retried.count, retried.noop, retried.source_fingerprint) == (400, False, before)
        assert direct.count(target) == 400 and direct.read_manifest(target) is not None
        assert direct.verify_untouched(target).unchanged
    else:
        assert len(left) == 400 and direct.get_store().count(markers) >= 1  # snapshot part(s), no manifest
    assert Mem0Hook(config=through_proxy).drop(target).dropped == 400  # the DAG's cleanup task
    assert direct.count(target) == 0 and direct.get_store().count(markers) == 0  # no orphaned snapshot part
    assert direct.read_manifest(target) is None
    assert direct.count(PROD) == 400 and direct.fingerprint(PROD).digest == before
    assert history_rows_total(memory) == 40


def history_rows_total(memory: Any) -> int:
    with sqlite3.connect(memory.config.history_db_path) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM history").fetchone()[0])


def test_generic_fallback_through_mem0_interface(tmp_path: Path, stack: Any) -> None:
    """A store without a dedicated adapter goes through mem0's VectorStoreBase (here: Qdrant, forced)."""
    config = store_config("qdrant", tmp_path, stack.chroma_host, stack.chroma_port)
    strict = Mem0Hook(config={**config, "store_adapter": "generic"})
    memory = strict.get_memory()
    seed(memory, PROD["user_id"], 200, via_add=20)
    # mem0's list() hides Qdrant's vectors: without reembed the fork is refused, and leaves nothing
    with pytest.raises(NotImplementedError, match="reembed=True"):
        strict.fork(PROD, "replay-generic", fork_id="g1")
    assert strict.count("replay-generic") == 0

    hook = Mem0Hook(config={**config, "store_adapter": "generic", "reembed": True})
    hook.get_backend().memory = memory  # one embedded Qdrant client per path
    assert not hook.get_store().exact_vectors
    result = hook.fork(PROD, "replay-generic", fork_id="g1")
    assert result.count == 200 and result.history_rows == 20
    assert hook.fork(PROD, "replay-generic", fork_id="g1").noop
    texts = {r.payload["data"] for r in hook.list_memories(PROD)}
    assert {r.payload["data"] for r in hook.list_memories("replay-generic")} == texts
    hits = memory.search("prefers espresso", filters={"user_id": "replay-generic"}, top_k=3)["results"]
    assert hits and "espresso" in hits[0]["memory"]
    assert hook.verify_untouched("replay-generic").unchanged
    # reembed=True is what the name says: the copies hold the embedder's vectors, not the stored ones
    exact = Mem0Hook(config=config)
    exact.get_backend().memory = memory
    assert embedder_made(exact.list_memories(PROD, with_vectors=True)) == 20
    assert embedder_made(exact.list_memories("replay-generic", with_vectors=True)) == 200
    with pytest.raises(NotAForkError):
        hook.drop(PROD)
    assert hook.drop("replay-generic").dropped == 200
    assert hook.count("replay-generic") == 0 and hook.count(PROD) == 200


_FORK_IN_A_FRESH_PROCESS = """
import json, sys
from airflow_flink_replay.hooks.mem0 import Mem0Hook
hook = Mem0Hook(config=json.loads(sys.argv[1]))
result = hook.fork({"user_id": sys.argv[2]}, {"user_id": sys.argv[3]}, fork_id="light-1")
fingerprint = hook.fingerprint({"user_id": sys.argv[3]})
print(json.dumps({"mem0_imported": "mem0" in sys.modules, "count": result.count, "history": result.history_rows,
                  "source": result.source_fingerprint, "fork_count": fingerprint.count}))
"""


def test_a_task_process_forks_on_the_chroma_server_without_importing_mem0(tmp_path: Path, stack: Any) -> None:
    """A Mem0 task in a process of its own (as under a real executor) forks on chromadb alone — importing
    mem0 and building a Memory would cost it 3-5 s — and the fork is the one mem0's own client sees."""
    import json
    import subprocess
    import sys

    config = store_config("chroma", tmp_path, stack.chroma_host, stack.chroma_port)
    seeding = Mem0Hook(config=config)
    memory = seeding.get_memory()
    try:
        seed(memory, PROD["user_id"], 300, via_add=12)
        before = seeding.fingerprint(PROD)
        done = subprocess.run([sys.executable, "-c", _FORK_IN_A_FRESH_PROCESS, json.dumps(config), PROD["user_id"],
                               "replay-light"], capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["mem0_imported"] is False, out
        assert (out["count"], out["history"], out["source"], out["fork_count"]) == (300, 12, before.digest, 300)
        # through mem0 (this process's Memory): the same texts in the fork, found by search, source untouched
        assert {r.payload["data"] for r in seeding.list_memories("replay-light")} == {
            r.payload["data"] for r in seeding.list_memories(PROD)}
        hits = memory.search(text_for(3), filters={"user_id": "replay-light"}, top_k=1)["results"]
        assert hits and hits[0]["memory"] == text_for(3), hits
        assert seeding.fingerprint(PROD).digest == before.digest
        assert seeding.drop("replay-light").dropped == 300
    finally:
        drop_collection(memory)

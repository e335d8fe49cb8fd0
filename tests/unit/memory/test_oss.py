"""The vector-store fork backend (``memory/oss.py``) on a real local ``mem0.Memory``: the offline hashing embedder
and an embedded Qdrant in a temporary folder (one for the module; each test forks namespaces of its own).

What a copy carries (payload, stored vector, history rows, id), the markers mem0 never returns, the targets a fork
refuses, what a failed fork leaves (nothing, or a note naming the leftovers a retry removes), a failed delta that
restores its pre-copy, a pre-copy that no longer matches its record, and drops. Through the hook:
tests/unit/hooks/test_mem0.py; the journal cut: tests/unit/memory/test_journal.py; on the stack's Chroma:
tests/integration/test_mem0_fork.py and test_mem0_precopy.py.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.memory_fork import (
    FORK_ID_FIELD,
    FORK_SOURCE_ID_FIELD,
    MARKER_FIELD,
    MARKER_KIND_FIELD,
    PROVENANCE_FIELDS,
    Mem0Namespace,
    fork_history_id,
    fork_memory_id,
    marker_id,
)
from airflow_flink_replay.exceptions import ForkConflictError, NoForkError, NotAForkError
from airflow_flink_replay.memory.oss import OssMem0Backend
from airflow_flink_replay.memory.stores import StoredMemory


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OssMem0Backend]:
    folder = tmp_path_factory.mktemp("oss")
    config = {
        "vector_store": {"provider": "qdrant", "config": {"path": str(folder / "qdrant"), "collection_name": "unit"}},
        "history_db_path": str(folder / "history.db"),
    }
    built = OssMem0Backend(config)
    built.memory  # noqa: B018 - builds the Memory once for the module
    yield built


@pytest.fixture
def names() -> tuple[Mem0Namespace, Mem0Namespace]:
    """A production namespace and a fork target of this test's own."""
    tag = uuid.uuid4().hex[:8]
    return Mem0Namespace(user_id=f"prod-{tag}"), Mem0Namespace(user_id=f"replay-{tag}")


def seed(backend: OssMem0Backend, source: Mem0Namespace, n: int = 6) -> list[str]:
    """``n`` memories written by production through mem0 (each with its history row)."""
    return [
        str(
            backend.memory.add(
                f"customer {i} prefers green tea",
                user_id=source.user_id,
                agent_id=f"key-{i % 2}",
                run_id="ltm",
                infer=False,
            )["results"][0]["id"]
        )
        for i in range(n)
    ]


def stored(backend: OssMem0Backend, namespace: Mem0Namespace) -> dict[str, StoredMemory]:
    return {r.id: r for r in backend.list_memories(namespace, with_vectors=True)}


def vector(backend: OssMem0Backend, record: StoredMemory) -> tuple[float, ...]:
    """The stored vector as the fork compares it: Qdrant re-normalises what it stores, and float32
    re-normalisation can land one bit apart (the store adapter's canonical vector is the same for both)."""
    return tuple(backend.store.canonical_vector(record.dense()))


def markers(backend: OssMem0Backend, target: Mem0Namespace) -> set[str]:
    return backend.store.ids_where({MARKER_FIELD: target.key()})


def history(backend: OssMem0Backend) -> dict[str, list[tuple[Any, ...]]]:
    """mem0's history rows by memory id, each without its own id and memory id."""
    with closing(sqlite3.connect(backend.config["history_db_path"])) as conn:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(history)")]
        out: dict[str, list[tuple[Any, ...]]] = {}
        for row in conn.execute(f"SELECT {', '.join(cols)} FROM history"):
            rec = dict(zip(cols, row, strict=True))
            out.setdefault(rec.pop("memory_id"), []).append(tuple(v for k, v in sorted(rec.items()) if k != "id"))
        return out


def history_ids(backend: OssMem0Backend) -> set[str]:
    with closing(sqlite3.connect(backend.config["history_db_path"])) as conn:
        return {r[0] for r in conn.execute("SELECT id FROM history")}


def fail_once(
    backend: OssMem0Backend, monkeypatch: pytest.MonkeyPatch, when: Callable[[list[StoredMemory]], bool]
) -> None:
    """The store's next write that ``when`` picks lands half, then fails (the store went away mid-request)."""
    store = backend.store
    original = store.insert
    failed: list[bool] = []

    def insert(records: list[StoredMemory]) -> None:
        if not failed and when(records):
            failed.append(True)
            original(records[: len(records) // 2])
            raise ConnectionError("injected: the store went away")
        original(records)

    monkeypatch.setattr(store, "insert", insert)


def is_manifest(records: list[StoredMemory]) -> bool:
    return any(r.payload.get(MARKER_KIND_FIELD) == "manifest" for r in records)


# ------------------------------------------------------------------------------------------- the copies
def test_a_fork_copies_each_memory_with_its_payload_vector_and_history(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]
) -> None:
    source, target = names
    seed(backend, source)
    before = stored(backend, source)
    result = backend.fork(source, target, fork_id="run-1")
    assert (result.kind, result.count, result.history_rows, result.noop, result.delta) == ("fork", 6, 6, False, False)
    assert (result.store, result.collection) == ("qdrant", "unit")

    copies = stored(backend, target)
    assert set(copies) == {fork_memory_id("run-1", target.key(), sid) for sid in before}
    rows = history(backend)
    for cid, copy in copies.items():
        src = before[copy.payload[FORK_SOURCE_ID_FIELD]]
        assert {k: v for k, v in copy.payload.items() if k not in PROVENANCE_FIELDS} == {
            **src.payload,
            **target.fields(),
        }
        assert copy.payload[FORK_ID_FIELD] == "run-1" and vector(backend, copy) == vector(backend, src)
        assert rows[cid] == rows[src.id]  # the same history, under the copy's id
    assert stored(backend, source) == before  # production untouched


def test_the_copies_history_rows_get_ids_derived_from_the_sources(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]
) -> None:
    """Stable ids (the same fork writes the same rows again on a retry), never the source rows' own."""
    source, target = names
    seed(backend, source, 2)
    ids_before, sources = history_ids(backend), set(stored(backend, source))
    with closing(sqlite3.connect(backend.config["history_db_path"])) as conn:
        source_rows = [r[0] for r in conn.execute("SELECT id, memory_id FROM history") if r[1] in sources]
    backend.fork(source, target, fork_id="run-1")
    assert len(source_rows) == 2
    assert history_ids(backend) - ids_before == {fork_history_id("run-1", target, row) for row in source_rows}


def test_mem0_sees_the_copies_but_never_the_forks_markers(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]
) -> None:
    source, target = names
    seed(backend, source, 3)
    backend.fork(source, target, fork_id="run-1")
    assert markers(backend, target)  # the manifest and its snapshot part are in the collection
    texts = sorted(m["memory"] for m in backend.memory.get_all(filters=target.fields())["results"])
    assert texts == [f"customer {i} prefers green tea" for i in range(3)]
    assert backend.count(target) == 3


def test_the_forks_baseline_records_the_source_as_it_was(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]
) -> None:
    source, target = names
    ids = seed(backend, source, 4)
    result = backend.fork(source, target, fork_id="run-1")
    baseline = backend.fork_baseline(target)
    assert (baseline.fork_id, baseline.source, baseline.target, baseline.count) == ("run-1", source, target, 4)
    assert baseline.fingerprint == result.source_fingerprint and set(baseline.snapshot) == set(ids)
    with pytest.raises(NoForkError) as err:
        backend.fork_baseline(source)
    assert str(err.value).startswith(f"no complete fork in {source}: nothing to compare against. Fix: run the fork")


def test_a_snapshot_with_a_missing_part_is_an_error_not_a_smaller_snapshot(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]
) -> None:
    source, target = names
    seed(backend, source, 2)
    backend.fork(source, target, fork_id="run-1")
    manifest = backend.read_manifest(target)
    assert manifest is not None and manifest.snapshot_parts == 1
    parts = markers(backend, target) - {marker_id(target)}
    assert len(parts) == 1
    backend.store.delete_ids(sorted(parts))
    with pytest.raises(RuntimeError, match=r"^fork run-1: 1 snapshot part\(s\) missing$"):
        backend.read_snapshot(manifest)


# ------------------------------------------------------------------------------------- refused targets
def test_the_same_fork_again_is_a_no_op_and_another_fork_into_it_is_refused(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]
) -> None:
    source, target = names
    seed(backend, source, 3)
    first = backend.fork(source, target, fork_id="run-1")
    backend.memory.add("written after the fork", user_id=source.user_id, agent_id="key-0", run_id="ltm", infer=False)
    again = backend.fork(source, target, fork_id="run-1")
    assert again.noop and again.source_fingerprint == first.source_fingerprint and backend.count(target) == 3
    assert backend.precopy(source, target, fork_id="run-1").noop
    with pytest.raises(ForkConflictError, match=r"already holds fork 'run-1'"):
        backend.fork(source, target, fork_id="run-2")


def test_a_target_holding_memories_of_its_own_is_refused_and_left_alone(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]
) -> None:
    source, target = names
    seed(backend, source, 2)
    own = seed(backend, target, 1)  # someone's memories already live there
    with pytest.raises(ForkConflictError) as err:
        backend.fork(source, target, fork_id="run-1")
    assert str(err.value) == (
        f"target {target} already holds 1 memories that are not from fork 'run-1' (e.g. {own[0]}): refusing to "
        "write into a namespace in use. Fix: choose another target namespace (the replay's own, e.g. replay-<run id>)"
    )
    assert set(stored(backend, target)) == set(own) and not markers(backend, target)


def test_a_target_holding_another_forks_pre_copy_is_refused(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]
) -> None:
    source, target = names
    seed(backend, source, 2)
    backend.precopy(source, target, fork_id="run-a")
    for fork_id, from_ in (("run-b", source), ("run-a", Mem0Namespace(user_id="someone-else"))):
        with pytest.raises(ForkConflictError) as err:
            backend.fork(from_, target, fork_id=fork_id)
        assert str(err.value) == (
            f"target {target} holds a pre-copy of fork 'run-a' of {source}. Fix: drop it first "
            "(DropMem0ForkOperator) or choose another target namespace"
        )


# --------------------------------------------------------------------------------------- failed forks
def test_a_fork_that_fails_leaves_nothing_behind_and_a_retry_completes(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = names
    seed(backend, source, 5)
    rows_before = history_ids(backend)
    with monkeypatch.context() as patch:
        fail_once(backend, patch, is_manifest)  # every copy and its history written, then the last write fails
        with pytest.raises(ConnectionError, match="injected"):
            backend.fork(source, target, fork_id="run-1")
    assert backend.count(target) == 0 and not markers(backend, target)
    assert history_ids(backend) == rows_before and backend.read_manifest(target) is None
    retry = backend.fork(source, target, fork_id="run-1")
    assert (retry.count, retry.noop) == (5, False) and backend.count(target) == 5


def test_a_rollback_that_cannot_reach_the_store_says_what_is_left_and_the_retry_removes_it(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = names
    seed(backend, source, 4)
    with monkeypatch.context() as patch:
        fail_once(backend, patch, is_manifest)

        def unreachable(ids: Any) -> None:
            raise ConnectionError("still unreachable")

        patch.setattr(backend.store, "delete_ids", unreachable)
        with pytest.raises(ConnectionError, match="injected") as err:  # the fork's own error stays the one raised
            backend.fork(source, target, fork_id="run-1")
    [note] = err.value.__notes__
    assert note.startswith(f"fork 'run-1' into {target}: the rollback could not remove the up to 4 memories it wrote")
    assert "a retry of this fork removes them first" in note
    assert backend.count(target) == 4 and markers(backend, target)  # the copies and the snapshot part are left
    retry = backend.fork(source, target, fork_id="run-1")
    assert (retry.count, retry.noop) == (4, False)
    assert backend.count(target) == 4 and len(markers(backend, target)) == 2  # one manifest, one snapshot part


def test_a_failed_delta_restores_the_pre_copy_and_the_retry_copies_only_the_changes(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = names
    ids = seed(backend, source, 4)
    pre = backend.precopy(source, target, fork_id="run-1")
    assert pre.kind == "precopy" and backend.read_manifest(target) is None
    precopied = {k: (r.payload, vector(backend, r)) for k, r in stored(backend, target).items()}
    backend.memory.update(ids[0], "customer 0 switched to coffee")
    backend.memory.delete(ids[1])
    with monkeypatch.context() as patch:
        fail_once(backend, patch, lambda records: any(FORK_SOURCE_ID_FIELD in r.payload for r in records))
        with pytest.raises(ConnectionError, match="injected"):
            backend.fork(source, target, fork_id="run-1")
    assert {k: (r.payload, vector(backend, r)) for k, r in stored(backend, target).items()} == precopied
    restored = backend.read_precopy(target)
    assert restored is not None and restored.precopied_at == pre.forked_at and backend.read_manifest(target) is None
    done = backend.fork(source, target, fork_id="run-1")
    assert (done.delta, done.added, done.updated, done.removed, done.count) == (True, 0, 1, 1, 3)
    assert (
        done.source_fingerprint
        == backend.fork(
            source, Mem0Namespace(user_id=f"{target.user_id}-full"), fork_id="run-1-full"
        ).source_fingerprint
    )


def test_a_pre_copy_that_no_longer_matches_its_record_is_copied_again_in_full(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]
) -> None:
    source, target = names
    seed(backend, source, 3)
    backend.precopy(source, target, fork_id="run-1")
    backend.store.delete_ids([next(iter(stored(backend, target)))])  # a copy went missing since
    done = backend.fork(source, target, fork_id="run-1")
    assert (done.delta, done.count) == (False, 3) and backend.count(target) == 3
    assert {r.payload[FORK_SOURCE_ID_FIELD] for r in stored(backend, target).values()} == set(stored(backend, source))


# ---------------------------------------------------------------------------------------------- drops
def test_a_drop_removes_the_fork_its_history_and_its_markers(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]
) -> None:
    source, target = names
    seed(backend, source, 3)
    rows_before = history_ids(backend)
    backend.fork(source, target, fork_id="run-1")
    backend.memory.add("the replay wrote this", user_id=target.user_id, agent_id="key-0", run_id="ltm", infer=False)
    kept = backend.drop(target, keep=True)
    assert (kept.kept, kept.existed, kept.dropped, kept.fork_id) == (True, True, 0, "run-1")
    assert backend.count(target) == 4
    dropped = backend.drop(target)
    assert (dropped.dropped, dropped.history_rows, dropped.fork_id, dropped.existed) == (4, 4, "run-1", True)
    assert backend.count(target) == 0 and not markers(backend, target) and history_ids(backend) == rows_before
    assert backend.count(source) == 3
    gone = backend.drop(target)
    assert (gone.existed, gone.fork_id, gone.dropped) == (False, None, 0)


def test_a_pre_copy_that_never_became_a_fork_is_dropped_markers_and_all(
    backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]
) -> None:
    source, target = names
    seed(backend, source, 2)
    backend.precopy(source, target, fork_id="run-1")
    dropped = backend.drop(target)
    assert (dropped.fork_id, dropped.dropped) == ("run-1", 2)
    assert not markers(backend, target) and backend.read_precopy(target) is None


def test_production_is_never_dropped(backend: OssMem0Backend, names: tuple[Mem0Namespace, Mem0Namespace]) -> None:
    source, _ = names
    seed(backend, source, 2)
    with pytest.raises(NotAForkError, match=r"is not a fork made by airflow-flink-replay \(2 memories without fork"):
        backend.drop(source)
    assert backend.count(source) == 2


def test_an_unknown_embedder_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^extra\.offline_embedder: use hashing, minilm or config, not 'bert'$"):
        OssMem0Backend({"history_db_path": str(tmp_path / "h.db")}, embedder="bert")

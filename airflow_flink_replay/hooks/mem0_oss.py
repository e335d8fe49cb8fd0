"""Open-source Mem0 as a fork backend: a local ``mem0.Memory`` over a vector store, forked at vector level.

The default backend of :class:`~.mem0.Mem0Hook` (connection extra without ``"backend": "hosted"``). A fork
copies payloads and stored vectors through the store adapters of :mod:`.mem0_stores` (no embedding, no
LLM), copies mem0's history rows (sqlite) remapped to the new ids, and writes a completion marker last:
a record in the same collection without scope fields (mem0's ``get_all``/``search`` never return it)
holding the :class:`~airflow_flink_replay.core.memory.ForkManifest` and, in snapshot parts, the
fork-time digest of every source memory (what verify-untouched compares with). Without the marker a
namespace holding provenance-tagged memories is a partial fork and is cleaned up. See
``docs/memory-fork.md``.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, suppress
from datetime import UTC, datetime
from typing import Any

from airflow_flink_replay.core.memory import (
    MARKER_FIELD,
    MARKER_FORK_ID_FIELD,
    MARKER_KIND_FIELD,
    MARKER_KIND_MANIFEST,
    MARKER_KIND_SNAPSHOT,
    MARKER_MANIFEST_FIELD,
    MARKER_PART_FIELD,
    MARKER_SNAPSHOT_FIELD,
    DropResult,
    ForkManifest,
    ForkResult,
    Mem0Namespace,
    combine_digests,
    decode_snapshot,
    encode_snapshot,
    fork_history_id,
    fork_memory_id,
    marker_id,
    memory_digest,
    rewrite_payload,
    split_chunks,
)
from airflow_flink_replay.hooks.mem0_backend import ForkBaseline, completed_fork, fork_id_to_drop, refuse_foreign
from airflow_flink_replay.hooks.mem0_stores import DEFAULT_BATCH, StoreAdapter, StoredMemory, adapter_for
from airflow_flink_replay.memory.offline import EmbedderChoice

log = logging.getLogger(__name__)

EMBEDDERS: tuple[EmbedderChoice, ...] = ("hashing", "minilm", "config")


class OssMem0Backend:
    """Namespace operations on a local ``mem0.Memory`` (the :class:`~.mem0_backend.Mem0Backend` protocol).

    :param config: the mem0 config (``vector_store``, ``history_db_path``, optionally ``embedder``).
    :param embedder: ``hashing``, ``minilm`` or ``config`` (see :mod:`airflow_flink_replay.memory.offline`).
    :param batch_size: records per read/write batch.
    :param store_adapter: ``auto``, ``generic`` or a provider name (see :func:`.mem0_stores.adapter_for`).
    :param reembed: allow the generic adapter to re-embed texts of stores that hide their vectors.
    :param memory: an already built ``mem0.Memory`` (else built from ``config`` on first use).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        embedder: str = "hashing",
        batch_size: int = DEFAULT_BATCH,
        store_adapter: str = "auto",
        reembed: bool = False,
        memory: Any = None,
    ) -> None:
        if embedder not in EMBEDDERS:
            raise ValueError(f"extra.offline_embedder: use hashing, minilm or config, not {embedder!r}")
        self.config = dict(config)
        self.embedder: EmbedderChoice = embedder  # type: ignore[assignment]  # checked above
        self.batch_size = batch_size
        self.store_adapter = store_adapter
        self.reembed = reembed
        self._memory = memory
        self._store: StoreAdapter | None = None

    @property
    def memory(self) -> Any:
        """The offline ``mem0.Memory`` (built once, on first use)."""
        if self._memory is None:
            from airflow_flink_replay.memory.offline import build_offline_memory

            self._memory = build_offline_memory(self.config, embedder=self.embedder)
        return self._memory

    @memory.setter
    def memory(self, memory: Any) -> None:
        """Use an already built Memory (e.g. one embedded Qdrant client per path); resets the adapter."""
        self._memory = memory
        self._store = None

    @property
    def store(self) -> StoreAdapter:
        """The vector-store adapter for the Memory's collection."""
        if self._store is None:
            self._store = adapter_for(
                self.memory, batch_size=self.batch_size, adapter=self.store_adapter, reembed=self.reembed
            )
        return self._store

    def check(self) -> str:
        """Build the Memory and count the collection's fork markers (reachability)."""
        store = self.store
        store.count({MARKER_KIND_FIELD: MARKER_KIND_MANIFEST})
        return f"mem0 {store.provider} collection {store.collection!r} reachable"

    # -------------------------------------------------------------------------------------- reads
    def count(self, namespace: Mem0Namespace) -> int:
        """Number of memories in a namespace."""
        return self.store.count(namespace.fields())

    def list_memories(self, namespace: Mem0Namespace, *, with_vectors: bool = False) -> list[StoredMemory]:
        """Every memory of a namespace as stored (id, payload, optionally the vector)."""
        return [r for b in self.store.iter_where(namespace.fields(), with_vectors=with_vectors) for r in b]

    def digests(self, namespace: Mem0Namespace) -> tuple[dict[str, bytes], dict[str, dict[str, Any]]]:
        """Per-memory digests over id, hash, ``updated_at`` and the stored vector, and the payloads."""
        store = self.store
        now: dict[str, bytes] = {}
        payloads: dict[str, dict[str, Any]] = {}
        for batch in store.iter_where(namespace.fields(), with_vectors=True):
            for rec in batch:
                now[rec.id] = memory_digest(rec.id, rec.payload, store.canonical_vector(rec.dense()))
                payloads[rec.id] = rec.payload
        return now, payloads

    def read_manifest(self, target: Mem0Namespace) -> ForkManifest | None:
        """The completion marker of a fork into ``target``, or None when there is no complete fork."""
        recs = self.store.get_ids([marker_id(target)])
        if not recs:
            return None
        payload = recs[0].payload
        if payload.get(MARKER_FIELD) != target.key() or payload.get(MARKER_KIND_FIELD) != MARKER_KIND_MANIFEST:
            return None
        return ForkManifest.model_validate_json(payload[MARKER_MANIFEST_FIELD])

    def read_snapshot(self, manifest: ForkManifest) -> dict[str, str]:
        """The fork-time ``{source memory id: digest}`` snapshot recorded with the manifest."""
        ids = [marker_id(manifest.target, i) for i in range(manifest.snapshot_parts)]
        parts = {int(r.payload[MARKER_PART_FIELD]): r.payload[MARKER_SNAPSHOT_FIELD] for r in self.store.get_ids(ids)}
        if sorted(parts) != list(range(manifest.snapshot_parts)):
            raise RuntimeError(f"fork {manifest.fork_id}: snapshot parts missing for {manifest.target}")
        return decode_snapshot("".join(parts[i] for i in range(manifest.snapshot_parts)))

    def fork_baseline(self, target: Mem0Namespace) -> ForkBaseline:
        """The manifest and snapshot of the fork in ``target``."""
        manifest = self.read_manifest(target)
        if manifest is None:
            raise RuntimeError(
                f"no complete fork in {target}: nothing to compare against. Fix: run the fork first "
                "(ForkMem0NamespaceOperator), or name the namespace the fork wrote into"
            )
        return ForkBaseline(
            fork_id=manifest.fork_id,
            source=manifest.source,
            target=target,
            count=manifest.count,
            fingerprint=manifest.source_fingerprint,
            snapshot=self.read_snapshot(manifest),
        )

    # ------------------------------------------------------------------------------------- history
    def _history_conn(self) -> sqlite3.Connection | None:
        path = getattr(self.memory.config, "history_db_path", None)
        if not path:
            return None
        conn = sqlite3.connect(str(path), timeout=30)
        has_table = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='history'").fetchone()
        if not has_table:
            conn.close()
            return None
        return conn

    def _copy_history(self, id_map: Mapping[str, str], fork_id: str, target: Mem0Namespace) -> int:
        """Copy history rows of the source memories, remapped to the forked ids (idempotent)."""
        conn = self._history_conn()
        if conn is None or not id_map:
            return 0
        copied = 0
        with closing(conn), conn:
            cols = [r[1] for r in conn.execute("PRAGMA table_info(history)")]
            sel = ", ".join(cols)
            ids = list(id_map)
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                rows = conn.execute(
                    f"SELECT {sel} FROM history WHERE memory_id IN ({','.join('?' * len(chunk))})", chunk
                ).fetchall()
                out = []
                for row in rows:
                    rec = dict(zip(cols, row, strict=True))
                    rec["id"] = fork_history_id(fork_id, target, str(rec["id"]))
                    rec["memory_id"] = id_map[rec["memory_id"]]
                    out.append(tuple(rec[c] for c in cols))
                conn.executemany(f"INSERT OR REPLACE INTO history ({sel}) VALUES ({','.join('?' * len(cols))})", out)
                copied += len(out)
        return copied

    def _delete_history(self, memory_ids: Sequence[str]) -> int:
        conn = self._history_conn()
        if conn is None or not memory_ids:
            return 0
        deleted = 0
        with closing(conn), conn:
            ids = list(memory_ids)
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                cur = conn.execute(f"DELETE FROM history WHERE memory_id IN ({','.join('?' * len(chunk))})", chunk)
                deleted += cur.rowcount
        return deleted

    # ---------------------------------------------------------------------------------------- fork
    def fork(self, source: Mem0Namespace, target: Mem0Namespace, *, fork_id: str) -> ForkResult:
        """Copy every memory of ``source`` into ``target`` (payloads and stored vectors, no embedding).

        Leftovers of an interrupted fork of the same ``fork_id`` are removed first; on any error what this
        call wrote is removed and the error re-raised.
        """
        started = time.monotonic()
        store = self.store
        manifest = self.read_manifest(target)
        if manifest is not None:
            done = completed_fork(manifest, source, target, fork_id, time.monotonic() - started)
            log.info("fork %s into %s already complete: nothing to do", fork_id, target)
            return done
        leftovers = {r.id: r.payload for b in store.iter_where(target.fields(), with_vectors=False) for r in b}
        if leftovers:
            refuse_foreign(target, fork_id, leftovers)
            log.warning("removing %d leftovers of an interrupted fork %s in %s", len(leftovers), fork_id, target)
            self._remove(target, list(leftovers), parts=0)

        forked_at = datetime.now(UTC).isoformat()
        written: list[str] = []
        parts = 0
        timings = {"check": time.monotonic() - started, "read": 0.0, "write": 0.0, "history": 0.0, "marker": 0.0}
        try:
            id_map, digests = self._copy(source, target, fork_id, forked_at, written, timings)
            mark = time.monotonic()
            history_rows = self._copy_history(id_map, fork_id, target)
            timings["history"] = time.monotonic() - mark
            mark = time.monotonic()
            snapshot_chunks = split_chunks(encode_snapshot(digests))
            parts = len(snapshot_chunks)
            manifest = ForkManifest(
                fork_id=fork_id,
                source=source,
                target=target,
                count=len(digests),
                source_fingerprint=combine_digests(digests.values()),
                history_rows=history_rows,
                forked_at=forked_at,
                snapshot_parts=parts,
                store=store.provider,
                collection=store.collection,
            )
            self._write_markers(store, target, manifest, snapshot_chunks)
            timings["marker"] = time.monotonic() - mark
        except BaseException as exc:
            log.error("fork %s into %s failed after %d memories: removing what it wrote", fork_id, target, len(written))
            self._roll_back(exc, target, fork_id, written, parts)
            raise
        return ForkResult(
            **manifest.model_dump(exclude={"snapshot_parts"}),
            duration_s=time.monotonic() - started,
            noop=False,
            timings_s={k: round(v, 6) for k, v in timings.items()},
        )

    def _copy(
        self,
        source: Mem0Namespace,
        target: Mem0Namespace,
        fork_id: str,
        forked_at: str,
        written: list[str],
        timings: dict[str, float],
    ) -> tuple[dict[str, str], dict[str, bytes]]:
        """Read the source batch by batch and write the rewritten copies; return ``(id map, digests)``.

        Appends every id it writes to ``written`` before writing it (the caller's cleanup list) and adds
        its read/write seconds to ``timings``. Writes of batch k overlap the read of batch k+1 where the
        client allows concurrent use; at most one batch is in flight, and leaving the ``with`` waits for
        it (so a cleanup sees it).
        """
        store = self.store
        id_map: dict[str, str] = {}
        digests: dict[str, bytes] = {}
        src_key, tgt_key, tgt_fields = source.key(), target.key(), target.fields()
        with ThreadPoolExecutor(1) as writer:
            pending: Future[None] | None = None
            mark = time.monotonic()
            for batch in store.iter_where(source.fields(), with_vectors=True):
                out = []
                for rec in batch:
                    digests[rec.id] = memory_digest(rec.id, rec.payload, store.canonical_vector(rec.dense()))
                    new_id = fork_memory_id(fork_id, tgt_key, rec.id)
                    id_map[rec.id] = new_id
                    payload = rewrite_payload(
                        rec.payload,
                        source_id=rec.id,
                        source=src_key,
                        target=tgt_fields,
                        fork_id=fork_id,
                        forked_at=forked_at,
                    )
                    out.append(StoredMemory(id=new_id, payload=payload, vector=rec.vector, document=rec.document))
                written.extend(r.id for r in out)
                timings["read"] += time.monotonic() - mark
                mark = time.monotonic()
                if pending is not None:
                    pending.result()
                if store.concurrent_io:
                    pending = writer.submit(store.insert, out)
                else:
                    store.insert(out)
                timings["write"] += time.monotonic() - mark
                mark = time.monotonic()
            timings["read"] += time.monotonic() - mark
            mark = time.monotonic()
            if pending is not None:
                pending.result()
            timings["write"] += time.monotonic() - mark
        return id_map, digests

    def _write_markers(
        self, store: StoreAdapter, tgt: Mem0Namespace, manifest: ForkManifest, chunks: list[str]
    ) -> None:
        """Snapshot parts first, the manifest last: its presence means the fork is complete."""
        vector = store.make_vector([1.0] + [0.0] * (store.dims() - 1))
        base = {MARKER_FIELD: tgt.key(), MARKER_FORK_ID_FIELD: manifest.fork_id}
        parts = [
            StoredMemory(
                id=marker_id(tgt, i),
                payload={
                    **base,
                    MARKER_KIND_FIELD: MARKER_KIND_SNAPSHOT,
                    MARKER_PART_FIELD: i,
                    MARKER_SNAPSHOT_FIELD: c,
                },
                vector=vector,
            )
            for i, c in enumerate(chunks)
        ]
        store.insert(parts)
        manifest_payload = {
            **base,
            MARKER_KIND_FIELD: MARKER_KIND_MANIFEST,
            MARKER_MANIFEST_FIELD: manifest.model_dump_json(),
        }
        store.insert([StoredMemory(id=marker_id(tgt), payload=manifest_payload, vector=vector)])

    def _roll_back(self, exc: BaseException, tgt: Mem0Namespace, fork_id: str, written: list[str], parts: int) -> None:
        """Remove what a failed fork wrote. When the store cannot be reached (the failure is often that very
        outage) the fork's own error stays the one raised, with a note naming the leftovers and what removes
        them: they carry the fork's provenance and no completion marker, so a retry of the same fork removes
        them before it copies, and a drop of the namespace (the replay DAG's cleanup) removes them."""
        try:
            self._remove(tgt, written, parts=parts)
        except Exception as cleanup:
            log.error("fork %s: rollback could not reach the store: %s", fork_id, cleanup)
            exc.add_note(
                f"fork {fork_id!r} into {tgt}: the rollback could not remove the up to {len(written)} memories "
                f"it wrote ({type(cleanup).__name__}: {cleanup}). Once the store is reachable, a retry of this "
                "fork removes them first, and dropping the namespace (DropMem0ForkOperator, the replay DAG's "
                "cleanup) removes them."
            )

    def _remove(self, tgt: Mem0Namespace, memory_ids: Sequence[str], *, parts: int) -> int:
        """Delete memories, their history rows and the markers of ``tgt`` (best effort on every part).

        Markers: the manifest, snapshot parts ``0..parts-1`` and any other marker record naming ``tgt``
        (snapshot parts an interrupted fork wrote before its manifest, when its own rollback could not
        reach the store: a later drop does not know how many there were)."""
        history = 0
        with suppress(Exception):
            history = self._delete_history(memory_ids)
        self.store.delete_ids(list(memory_ids))
        markers = {marker_id(tgt)} | {marker_id(tgt, i) for i in range(parts)}
        markers.update(r.id for b in self.store.iter_where({MARKER_FIELD: tgt.key()}, with_vectors=False) for r in b)
        self.store.delete_ids(sorted(markers))
        return history

    # ---------------------------------------------------------------------------------------- drop
    def drop(self, namespace: Mem0Namespace, *, keep: bool = False) -> DropResult:
        """Delete every memory of a fork namespace (forked or written by the replay), its history rows and
        its markers; refuse a namespace that is not a fork."""
        manifest = self.read_manifest(namespace)
        payloads = {r.id: r.payload for b in self.store.iter_where(namespace.fields(), with_vectors=False) for r in b}
        fork_id = fork_id_to_drop(namespace, manifest.fork_id if manifest else None, payloads)
        if fork_id is None:
            return DropResult(namespace=namespace, fork_id=None, dropped=0, history_rows=0, existed=False)
        if keep:
            log.info("keeping fork %s in %s (%d memories) for debugging", fork_id, namespace, len(payloads))
            return DropResult(namespace=namespace, fork_id=fork_id, dropped=0, history_rows=0, kept=True, existed=True)
        history = self._remove(namespace, list(payloads), parts=manifest.snapshot_parts if manifest else 0)
        return DropResult(
            namespace=namespace, fork_id=fork_id, dropped=len(payloads), history_rows=history, existed=True
        )

"""Open-source Mem0 as a fork backend: a local ``mem0.Memory`` over a vector store, forked at vector level.

The default backend of :class:`~airflow_flink_replay.hooks.mem0.Mem0Hook` (connection extra without
``"backend": "hosted"``). A fork copies payloads and stored vectors through the store adapters of
:mod:`.stores` (no embedding, no LLM), copies mem0's history rows (sqlite) remapped to the new ids, and writes
a completion marker last: a record in the same collection without scope fields (mem0's ``get_all``/``search``
never return it) holding the :class:`~airflow_flink_replay.core.memory_fork.ForkManifest` and, in snapshot
parts, the fork-time digest of every source memory (what verify-untouched compares with). Without the marker a
namespace holding provenance-tagged memories is a partial fork and is cleaned up. See
``docs/memory-fork.md``.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_flink_replay.core.memory_fork import (
    CONTENT_DIGEST_BYTES,
    FORK_SOURCE_ID_FIELD,
    MARKER_FIELD,
    MARKER_FORK_ID_FIELD,
    MARKER_KIND_FIELD,
    MARKER_KIND_MANIFEST,
    MARKER_KIND_PRECOPY,
    MARKER_KIND_PRECOPY_SNAPSHOT,
    MARKER_KIND_SNAPSHOT,
    MARKER_MANIFEST_FIELD,
    MARKER_PART_FIELD,
    MARKER_SNAPSHOT_FIELD,
    PRECOPY_ENTRY_BYTES,
    SNAPSHOT_DIGEST_BYTES,
    DropResult,
    ForkManifest,
    ForkResult,
    JournalPosition,
    Mem0Namespace,
    PrecopyManifest,
    combine_digests,
    content_digest,
    decode_snapshot,
    digest_sum,
    encode_snapshot,
    fingerprint_of,
    fork_history_id,
    fork_memory_id,
    marker_id,
    memory_digest,
    precopy_marker_id,
    rewrite_payload,
    split_chunks,
)
from airflow_flink_replay.core.secrets import call_scrubbed
from airflow_flink_replay.exceptions import ForkConflictError, NoForkError
from airflow_flink_replay.memory.backend import (
    ForkBaseline,
    MemoryJournalReader,
    completed_fork,
    fork_id_to_drop,
    refuse_foreign,
)
from airflow_flink_replay.memory.offline import EmbedderChoice
from airflow_flink_replay.memory.stores import (
    DEFAULT_BATCH,
    StoreAdapter,
    StoredMemory,
    adapter_for,
    chroma_server_view,
)

log = logging.getLogger(__name__)

EMBEDDERS: tuple[EmbedderChoice, ...] = ("hashing", "minilm", "config")



@dataclass(frozen=True)
class _DeltaFound:
    """What a delta round found since the pre-copy."""

    changed: list[StoredMemory]  #: source records new or changed
    digests: dict[str, bytes]  #: fingerprint digest per source id at the cut
    contents: dict[str, bytes]  #: content digest per source id at the cut
    removed: list[str]  #: source ids gone
    touched: list[str]  #: the fork ids of the updated and removed memories
    saved: list[StoredMemory]  #: the pre-copy's copies of those (to restore them)
    fingerprint: str | None  #: the source's fingerprint, when the journal gave the changes


class OssMem0Backend:
    """Namespace operations on a local ``mem0.Memory`` (the :class:`~.backend.Mem0Backend` protocol).

    :param config: the mem0 config (``vector_store``, ``history_db_path``, optionally ``embedder``).
    :param embedder: ``hashing``, ``minilm`` or ``config`` (see :mod:`airflow_flink_replay.memory.offline`).
    :param batch_size: records per read/write batch.
    :param store_adapter: ``auto``, ``generic`` or a provider name (see :func:`.stores.adapter_for`).
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
        self._snapshot_cache: tuple[str, dict[str, str]] | None = None

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
                self._store_source(), batch_size=self.batch_size, adapter=self.store_adapter, reembed=self.reembed
            )
        return self._store

    def _store_source(self) -> Any:
        """The Memory — or, for a Chroma server when nothing needs mem0's embedder (no re-embedding, not the
        generic adapter), only the client and collection mem0 would build (:func:`.chroma_server_view`)."""
        if self._memory is None and not self.reembed and self.store_adapter in ("auto", "chroma"):
            from airflow_flink_replay.memory.offline import offline_memory_config

            cfg, dims = offline_memory_config(self.config, embedder=self.embedder, store_dims=False)
            view = call_scrubbed(self.config, chroma_server_view, cfg, dims)  # cfg holds resolved references
            if view is not None:
                return view
        return self.memory

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
        found = self._marker_json(marker_id(target), target, MARKER_KIND_MANIFEST)
        return ForkManifest.model_validate_json(found) if found is not None else None

    def read_snapshot(self, manifest: ForkManifest) -> dict[str, str]:
        """The fork-time ``{source memory id: digest}`` snapshot recorded with the manifest."""
        return self._read_parts(
            [marker_id(manifest.target, i) for i in range(manifest.snapshot_parts)], manifest.fork_id
        )

    def _read_parts(self, ids: Sequence[str], fork_id: str) -> dict[str, str]:
        """Decode a snapshot stored in the marker records ``ids`` (its parts, in order)."""
        parts = {int(r.payload[MARKER_PART_FIELD]): r.payload[MARKER_SNAPSHOT_FIELD] for r in self.store.get_ids(ids)}
        if sorted(parts) != list(range(len(ids))):
            raise RuntimeError(f"fork {fork_id}: {len(ids) - len(parts)} snapshot part(s) missing")
        return decode_snapshot("".join(parts[i] for i in range(len(ids))))

    def fork_baseline(self, target: Mem0Namespace) -> ForkBaseline:
        """The manifest and snapshot of the fork in ``target``."""
        manifest = self.read_manifest(target)
        if manifest is None:
            raise NoForkError(
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
        path = getattr(self.store.memory.config, "history_db_path", None)
        if not path:
            return None
        conn = sqlite3.connect(str(path), timeout=30)
        has_table = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='history'").fetchone()
        if not has_table:
            conn.close()
            return None
        return conn

    def _copy_history(
        self,
        id_map: Mapping[str, str],
        fork_id: str,
        target: Mem0Namespace,
        source_rows: tuple[list[str], list[tuple[Any, ...]]] | None = None,
    ) -> int:
        """Copy history rows of the source memories, remapped to the forked ids (idempotent). ``source_rows``: the
        rows as :meth:`_history_rows` read them earlier (the stop window's cut reads them before its fence), else
        read now."""
        if not id_map:
            return 0
        cols, rows = source_rows if source_rows is not None else self._history_rows(list(id_map))
        out = []
        for row in rows:
            rec = dict(zip(cols, row, strict=True))
            if rec["memory_id"] not in id_map:
                continue
            rec["id"] = fork_history_id(fork_id, target, str(rec["id"]))
            rec["memory_id"] = id_map[rec["memory_id"]]
            out.append(tuple(rec[c] for c in cols))
        self._put_history(cols, out)
        return len(out)

    def _history_rows(self, memory_ids: Sequence[str]) -> tuple[list[str], list[tuple[Any, ...]]]:
        """``(columns, rows)`` of the history rows of these memories (kept to restore them)."""
        conn = self._history_conn()
        if conn is None or not memory_ids:
            return [], []
        with closing(conn):
            cols = [r[1] for r in conn.execute("PRAGMA table_info(history)")]
            rows: list[tuple[Any, ...]] = []
            for i in range(0, len(memory_ids), 500):
                chunk = list(memory_ids[i : i + 500])
                rows += conn.execute(
                    f"SELECT {', '.join(cols)} FROM history WHERE memory_id IN ({','.join('?' * len(chunk))})", chunk
                ).fetchall()
        return cols, rows

    def _put_history(self, cols: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        """Write history rows back (``INSERT OR REPLACE``)."""
        conn = self._history_conn()
        if conn is None or not rows:
            return
        with closing(conn), conn:
            conn.executemany(
                f"INSERT OR REPLACE INTO history ({', '.join(cols)}) VALUES ({','.join('?' * len(cols))})", rows
            )

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
    def fork(
        self,
        source: Mem0Namespace,
        target: Mem0Namespace,
        *,
        fork_id: str,
        journal: MemoryJournalReader | None = None,
        on_source_read: Callable[[], None] | None = None,
    ) -> ForkResult:
        """Copy every memory of ``source`` into ``target`` (payloads and stored vectors, no embedding).

        When ``target`` holds a pre-copy of this fork (:meth:`precopy`) only the changes since it are
        copied (:meth:`_delta`); otherwise everything. With ``journal`` (production's memory journal, trusted
        by the caller: no failover of production since the pre-copy) and a pre-copy that noted its position,
        the changes are the memories the journal names since (:meth:`_journal_changes`), not a read of the
        whole source. ``on_source_read`` is called once the source was read for the last time. Leftovers of an
        interrupted fork of the same ``fork_id`` are removed first; on any error what this call wrote is removed
        (a delta: the pre-copy is restored) and the error re-raised.
        """
        return self._fork(source, target, fork_id, precopy=False, journal=journal, on_source_read=on_source_read)

    def precopy(
        self,
        source: Mem0Namespace,
        target: Mem0Namespace,
        *,
        fork_id: str,
        journal: MemoryJournalReader | None = None,
    ) -> ForkResult:
        """Pre-copy ``source`` into ``target`` while production runs, so that :meth:`fork` at the cut copies
        only what changed since (added, updated, deleted memories) — a live migration's last round.

        Writes the copies and a pre-copy marker (no manifest: the target is not a fork yet) recording one
        :func:`~airflow_flink_replay.core.memory_fork.content_digest` per source memory as read. Called again
        on the same pre-copy it runs one more delta round and records the new state (rounds shrink the
        last one). A complete fork in ``target`` makes it a no-op. With ``journal`` the journal's position is
        noted before the source is read (what a journal cut reads from).
        """
        return self._fork(source, target, fork_id, precopy=True, journal=journal)

    def read_precopy(self, target: Mem0Namespace) -> PrecopyManifest | None:
        """The pre-copy marker in ``target``, or None."""
        found = self._marker_json(precopy_marker_id(target), target, MARKER_KIND_PRECOPY)
        return PrecopyManifest.model_validate_json(found) if found is not None else None

    def precopy_snapshot(self, pre: PrecopyManifest) -> Mapping[str, str]:
        """The pre-copy's per-memory record (content digest + fingerprint digest, hex), read from its marker parts
        once and kept for this pre-copy (the stop window reads it before the stop, so the cut does not)."""
        key = pre.model_dump_json()
        if self._snapshot_cache is None or self._snapshot_cache[0] != key:
            ids = [precopy_marker_id(pre.target, i) for i in range(pre.snapshot_parts)]
            self._snapshot_cache = (key, self._read_parts(ids, pre.fork_id))
        return self._snapshot_cache[1]

    def _marker_json(self, record_id: str, target: Mem0Namespace, kind: str) -> str | None:
        """The JSON a marker record of ``kind`` for ``target`` holds, or None when there is none."""
        recs = self.store.get_ids([record_id])
        if not recs:
            return None
        payload = recs[0].payload
        if payload.get(MARKER_FIELD) != target.key() or payload.get(MARKER_KIND_FIELD) != kind:
            return None
        return payload[MARKER_MANIFEST_FIELD]

    def _fork(
        self,
        source: Mem0Namespace,
        target: Mem0Namespace,
        fork_id: str,
        *,
        precopy: bool,
        journal: MemoryJournalReader | None = None,
        on_source_read: Callable[[], None] | None = None,
    ) -> ForkResult:
        started = time.monotonic()
        store = self.store
        manifest = self.read_manifest(target)
        if manifest is not None:
            done = completed_fork(manifest, source, target, fork_id, time.monotonic() - started)
            log.info("fork %s into %s already complete: nothing to do", fork_id, target)
            return done
        pre = self.read_precopy(target)
        if pre is not None:
            if pre.fork_id != fork_id or pre.source != source:
                raise ForkConflictError(
                    f"target {target} holds a pre-copy of fork {pre.fork_id!r} of {pre.source}. "
                    "Fix: drop it first (DropMem0ForkOperator) or choose another target namespace"
                )
            position = journal.position() if precopy and journal is not None else None
            result = self._delta(pre, started, precopy=precopy, journal=None if precopy else journal, position=position,
                                 on_source_read=on_source_read)
            if result is not None:
                return result
        leftovers = {r.id: r.payload for b in store.iter_where(target.fields(), with_vectors=False) for r in b}
        if leftovers:
            refuse_foreign(target, fork_id, leftovers)
            log.warning("removing %d leftovers of an interrupted fork %s in %s", len(leftovers), fork_id, target)
            self._remove(target, list(leftovers), parts=0)
        position = journal.position() if precopy and journal is not None else None
        return self._full_copy(source, target, fork_id, started, precopy=precopy, position=position,
                               on_source_read=on_source_read)

    def _full_copy(
        self,
        source: Mem0Namespace,
        target: Mem0Namespace,
        fork_id: str,
        started: float,
        *,
        precopy: bool,
        position: JournalPosition | None = None,
        on_source_read: Callable[[], None] | None = None,
    ) -> ForkResult:
        """Copy everything, then write the marker (the fork's manifest, or the pre-copy's); ``on_source_read``
        once the source was read for the last time."""
        store = self.store
        forked_at = datetime.now(UTC).isoformat()
        written: list[str] = []
        timings = {"check": time.monotonic() - started, "read": 0.0, "write": 0.0, "history": 0.0, "marker": 0.0}
        try:
            page = min(store.copy_read_page or store.batch_size, store.batch_size)
            pages = store.iter_where(source.fields(), with_vectors=True, page_size=page)
            id_map, digests, contents = self._copy(pages, source, target, fork_id, forked_at, written, timings)
            mark = time.monotonic()
            source_history = self._history_rows(list(id_map))  # production's rows, read before the fence
            if on_source_read is not None:
                on_source_read()
            history_rows = self._copy_history(id_map, fork_id, target, source_history)
            timings["history"] = time.monotonic() - mark
            mark = time.monotonic()
            record = self._finish(
                source, target, fork_id, forked_at, digests, contents, history_rows, precopy=precopy, position=position
            )
            timings["marker"] = time.monotonic() - mark
        except BaseException as exc:
            log.error("fork %s into %s failed after %d memories: removing what it wrote", fork_id, target, len(written))
            self._roll_back(exc, target, fork_id, written, 0)
            raise
        return self._result(record, digests, started, timings)

    def _result(
        self,
        record: ForkManifest | PrecopyManifest,
        digests: Mapping[str, bytes],
        started: float,
        timings: Mapping[str, float],
        **delta: Any,
    ) -> ForkResult:
        common = {
            "duration_s": time.monotonic() - started,
            "noop": False,
            "timings_s": {k: round(v, 6) for k, v in timings.items()},
            **delta,
        }
        if isinstance(record, ForkManifest):
            return ForkResult(**record.model_dump(exclude={"snapshot_parts"}), **common)
        return ForkResult(
            **record.model_dump(exclude={"snapshot_parts", "precopied_at", "digest_sum", "journal"}),
            source_fingerprint=combine_digests(digests.values()),
            forked_at=record.precopied_at,
            kind="precopy",
            **common,
        )

    def _copy(
        self,
        pages: Iterable[Sequence[StoredMemory]],
        source: Mem0Namespace,
        target: Mem0Namespace,
        fork_id: str,
        forked_at: str,
        written: list[str],
        timings: dict[str, float],
    ) -> tuple[dict[str, str], dict[str, bytes], dict[str, bytes]]:
        """Write rewritten copies of the source records in ``pages``; return ``(id map, digests, content
        digests)``, both digests keyed by source id.

        A pipeline: the records of each page read are cut into write requests of ``copy_write_chunk``
        and up to ``copy_write_workers`` requests are in flight while the next page is read (where the
        client allows concurrent use; else each request is written before the next read). Every id is
        appended to ``written`` before its request is sent (the caller's cleanup list), and leaving the
        ``with`` waits for the requests in flight (so a cleanup sees them). Read/write seconds are added
        to ``timings`` (write = time blocked on writes).
        """
        store = self.store
        id_map: dict[str, str] = {}
        digests: dict[str, bytes] = {}
        contents: dict[str, bytes] = {}
        src_key, tgt_key, tgt_fields = source.key(), target.key(), target.fields()
        workers = max(1, store.copy_write_workers) if store.concurrent_io else 0
        page_size = min(store.copy_read_page or store.batch_size, store.batch_size)
        chunk = max(1, min(store.copy_write_chunk or page_size, store.batch_size))
        first = min(chunk, page_size)
        written_here: list[int] = []
        buffer: list[StoredMemory] = []
        in_flight: deque[Future[None]] = deque()
        with ThreadPoolExecutor(max(1, workers)) as pool:

            def send(everything: bool) -> None:
                # the first request goes out after one page: the store's write path (what bounds a copy)
                # starts working while the rest is read
                size = chunk if written_here else first
                while len(buffer) >= size or (everything and buffer):
                    request = buffer[:size]
                    del buffer[:size]
                    size = chunk
                    written_here.append(len(request))
                    written.extend(r.id for r in request)
                    if not workers:
                        store.insert(request)
                        continue
                    while len(in_flight) >= workers:
                        in_flight.popleft().result()
                    in_flight.append(pool.submit(store.insert, request))

            mark = time.monotonic()
            for page in pages:
                for rec in page:
                    digests[rec.id] = memory_digest(rec.id, rec.payload, store.canonical_vector(rec.dense()))
                    contents[rec.id] = content_digest(rec.id, rec.payload, rec.vector, rec.document)
                    new_id = id_map[rec.id] = fork_memory_id(fork_id, tgt_key, rec.id)
                    payload = rewrite_payload(
                        rec.payload, source_id=rec.id, source=src_key, target=tgt_fields, fork_id=fork_id,
                        forked_at=forked_at,
                    )  # fmt: skip
                    buffer.append(StoredMemory(id=new_id, payload=payload, vector=rec.vector, document=rec.document))
                timings["read"] += time.monotonic() - mark
                mark = time.monotonic()
                send(False)
                timings["write"] += time.monotonic() - mark
                mark = time.monotonic()
            timings["read"] += time.monotonic() - mark
            mark = time.monotonic()
            send(True)
            while in_flight:
                in_flight.popleft().result()
            timings["write"] += time.monotonic() - mark
        return id_map, digests, contents

    # -------------------------------------------------------------------------------------- delta
    def _delta(
        self,
        pre: PrecopyManifest,
        started: float,
        *,
        precopy: bool,
        journal: MemoryJournalReader | None = None,
        position: JournalPosition | None = None,
        on_source_read: Callable[[], None] | None = None,
    ) -> ForkResult | None:
        """Copy only what changed in the source since the pre-copy ``pre``; None when the target no longer
        holds what ``pre`` recorded (the caller then copies in full).

        **Change detection: a per-record content digest diff.** The pre-copy recorded, per source memory,
        SHA-256 (first 128 bits) over everything a copy carries — id, whole payload, document, every
        stored vector (:func:`~airflow_flink_replay.core.memory_fork.content_digest`). Here the source is read
        once more (production stopped: one consistent state) and each record's digest compared: a new id
        is *added*, a different digest *updated*, a recorded id now absent *removed*. Exact — any change to
        any copied byte changes the digest — where ``updated_at`` and mem0's history db are not
        (docs/memory-fork.md). Only the changes are written.

        With production's memory journal (``journal``, and ``pre`` noted its position) only the memories it
        names are read and diffed (:meth:`_journal_changes`). ``on_source_read``: after the last read of the source.

        **Nothing half-applied.** The target's ids are checked against ``pre`` first (a journal cut checks the
        copies it touches). The pre-copy's copies of the updated and removed memories (and their history
        rows) are kept, then the pre-copy marker is deleted *before* the first write: an error restores the
        pre-copy exactly (:meth:`_restore_precopy`); a process killed mid-round leaves copies without any
        marker, which the next attempt removes before copying in full.
        """
        store = self.store
        source, target, fork_id = pre.source, pre.target, pre.fork_id
        tgt_key, timings = target.key(), {"check": 0.0, "read": 0.0, "write": 0.0, "history": 0.0, "marker": 0.0}
        before = self.precopy_snapshot(pre)
        found = self._delta_changes(pre, before, journal, started, timings)
        if found is None:
            return None
        changed, digests, contents, removed = found.changed, found.digests, found.contents, found.removed
        source_history = self._history_rows([r.id for r in changed])  # production's rows, read before the fence
        if on_source_read is not None:
            on_source_read()  # before anything is written: a fence that fails leaves the pre-copy as it was
        journaled = found.fingerprint is not None
        added = [r.id for r in changed if r.id not in before]
        updated = [r.id for r in changed if r.id in before]
        mark = time.monotonic()
        saved_history = self._history_rows(found.touched)
        timings["read"] += time.monotonic() - mark
        forked_at = datetime.now(UTC).isoformat()
        written: list[str] = []
        store.delete_ids([precopy_marker_id(target)])  # from here a killed process leaves no marker at all
        try:
            id_map, _, _ = self._copy([changed], source, target, fork_id, forked_at, written, timings)
            mark = time.monotonic()
            store.delete_ids([fork_memory_id(fork_id, tgt_key, s) for s in removed])
            timings["write"] += time.monotonic() - mark
            mark = time.monotonic()
            history = pre.history_rows - self._delete_history(found.touched)  # the pre-copy's rows, then the new
            history += self._copy_history(id_map, fork_id, target, source_history)
            timings["history"] = time.monotonic() - mark
            mark = time.monotonic()
            record = self._finish(
                source, target, fork_id, forked_at, digests, contents, history, precopy=precopy, pre=pre,
                position=position, fingerprint=found.fingerprint,
            )  # fmt: skip
            timings["marker"] = time.monotonic() - mark
        except BaseException as exc:
            log.error("delta of fork %s into %s failed: restoring the pre-copy", fork_id, target)
            self._restore_precopy(exc, pre, before, written, found.saved, saved_history)
            raise
        log.info(
            "fork %s into %s: %d added, %d updated, %d removed since the pre-copy of %s%s",
            fork_id, target, len(added), len(updated), len(removed), pre.precopied_at,
            " (found in production's memory journal)" if journaled else "",
        )  # fmt: skip
        return self._result(
            record, digests, started, timings,
            delta=True, added=len(added), updated=len(updated), removed=len(removed), precopied_at=pre.precopied_at,
            journal=journaled,
        )  # fmt: skip

    def _delta_changes(
        self,
        pre: PrecopyManifest,
        before: Mapping[str, str],
        journal: MemoryJournalReader | None,
        started: float,
        timings: dict[str, float],
    ) -> _DeltaFound | None:
        """What changed since the pre-copy; None when the target no longer holds what the pre-copy recorded (the
        caller copies in full)."""
        store, target, fork_id = self.store, pre.target, pre.fork_id
        tgt_key = target.key()
        timings["check"] = time.monotonic() - started
        mark = time.monotonic()
        from_journal = None
        if journal is not None and pre.journal is not None and self._journal_usable(pre, before):
            named = journal.ids_since(pre.journal)
            if self._journal_complete(pre, before, named):
                from_journal = self._journal_changes(pre.source, before, named)
        journaled = from_journal is not None
        if not journaled and store.ids_where(target.fields()) != {fork_memory_id(fork_id, tgt_key, s) for s in before}:
            log.warning("pre-copy %s in %s no longer matches its record: copying in full", fork_id, target)
            return None
        if from_journal is not None:
            changed, digests, contents, removed = from_journal
        else:
            changed, digests, contents = self._changes(pre.source, before)
            removed = sorted(set(before) - set(contents))
        touched = [fork_memory_id(fork_id, tgt_key, r.id) for r in changed if r.id in before]
        touched += [fork_memory_id(fork_id, tgt_key, s) for s in removed]
        saved = store.get_ids(touched, with_vectors=True)
        if journaled and len(saved) != len(touched):
            log.warning("pre-copy %s in %s lacks copies the journal cut needs: copying in full", fork_id, target)
            return None
        fingerprint = self._journal_fingerprint(pre, saved, changed, digests) if journaled else None
        timings["read"] = time.monotonic() - mark
        return _DeltaFound(changed, digests, contents, removed, touched, saved, fingerprint)

    def _journal_complete(self, pre: PrecopyManifest, before: Mapping[str, str], named: set[str]) -> bool:
        """Whether every memory of production's namespace the journal does not name (``named``) is one the pre-copy
        recorded (``before``), and every recorded one it does not name is still there (one ids-only query): then
        the namespace's ids are the pre-copy's plus the journal's adds minus its deletes. A memory added or removed
        by a writer that does not journal (a program that names the journal but does not wrap its memory, another
        process) breaks this: the cut then reads the whole namespace. An update made around the journal keeps the
        ids and is not seen (docs/memory-fork.md)."""
        listed = self.store.ids_where(pre.source.fields())
        unnamed = len(listed - named - before.keys())
        vanished = len(before.keys() - named - listed)
        if not unnamed and not vanished:
            return True
        log.warning(
            "production's memory journal does not name every write since the pre-copy of %s: %d memories in %s "
            "it did not journal as added, %d gone it did not journal as deleted (a writer around the journal). "
            "The cut reads the whole namespace instead. Fix: build production's memory with the journal "
            "(journal_memory, or production_job.py --memory-journal-topic) in every process that writes it",
            pre.fork_id, unnamed, pre.source, vanished,
        )  # fmt: skip
        return False

    @staticmethod
    def _journal_usable(pre: PrecopyManifest, before: Mapping[str, str]) -> bool:
        """Whether the pre-copy recorded what a journal cut needs: the journal's position, the digest sum and
        each memory's fingerprint digest (a pre-copy written without a journal, or by an older version, did not)."""
        if pre.journal is None or pre.digest_sum is None:
            log.info("pre-copy %s noted no journal position: the cut reads the whole source", pre.fork_id)
            return False
        return all(len(v) == 2 * PRECOPY_ENTRY_BYTES for v in before.values())

    def _changes(
        self, source: Mem0Namespace, before: Mapping[str, str]
    ) -> tuple[list[StoredMemory], dict[str, bytes], dict[str, bytes]]:
        """Read the source; return the records whose content digest differs from ``before`` (new or
        changed), and every record's digest and content digest."""
        store = self.store
        changed: list[StoredMemory] = []
        digests: dict[str, bytes] = {}
        contents: dict[str, bytes] = {}
        for page in store.iter_where(source.fields(), with_vectors=True):
            for rec in page:
                digests[rec.id] = memory_digest(rec.id, rec.payload, store.canonical_vector(rec.dense()))
                contents[rec.id] = content = content_digest(rec.id, rec.payload, rec.vector, rec.document)
                if before.get(rec.id, "")[: 2 * CONTENT_DIGEST_BYTES] != content[:CONTENT_DIGEST_BYTES].hex():
                    changed.append(rec)
        return changed, digests, contents

    def _journal_changes(
        self, source: Mem0Namespace, before: Mapping[str, str], named: set[str]
    ) -> tuple[list[StoredMemory], dict[str, bytes], dict[str, bytes], list[str]]:
        """The changes among the memories the journal names: ``(changed records, digests, content digests,
        removed ids)``, the digests of the unchanged memories taken from the pre-copy's record (``before``:
        content digest + fingerprint digest per id).

        Every write production made after the pre-copy began reading is named in the journal
        (:mod:`airflow_flink_replay.memory.journal` says why), so the memories it does not name are unchanged;
        those it names are read and diffed by content digest as in the full read. The fingerprint is the
        pre-copy's digest sum updated by the changes (:meth:`_journal_fingerprint`).
        """
        store = self.store
        fields = source.fields()
        found = [r for r in store.get_ids(sorted(named), with_vectors=True)
                 if all(r.payload.get(k) == v for k, v in fields.items())]  # fmt: skip
        digests = {k: bytes.fromhex(v[2 * CONTENT_DIGEST_BYTES :]) for k, v in before.items()}
        contents = {k: bytes.fromhex(v[: 2 * CONTENT_DIGEST_BYTES]) for k, v in before.items()}
        changed: list[StoredMemory] = []
        for rec in found:
            content = content_digest(rec.id, rec.payload, rec.vector, rec.document)
            if contents.get(rec.id) != content[:CONTENT_DIGEST_BYTES]:
                changed.append(rec)
                contents[rec.id] = content
                digests[rec.id] = memory_digest(rec.id, rec.payload, store.canonical_vector(rec.dense()))
        present = {r.id for r in found}
        removed = sorted(i for i in named if i in before and i not in present)
        for gone in removed:
            del digests[gone], contents[gone]
        return changed, digests, contents, removed

    def _journal_fingerprint(
        self,
        pre: PrecopyManifest,
        saved: Sequence[StoredMemory],
        changed: Sequence[StoredMemory],
        digests: Mapping[str, bytes],
    ) -> str:
        """The source's fingerprint at the cut: the pre-copy's digest sum, minus the digests of the memories
        updated or removed since (recomputed from their pre-copy copies, which carry the source's id, payload
        fields and vector), plus the new digests of the changed ones."""
        store = self.store
        total = int(pre.digest_sum or "0", 16)
        for copy in saved:
            source_id = str(copy.payload[FORK_SOURCE_ID_FIELD])
            total -= int.from_bytes(memory_digest(source_id, copy.payload, store.canonical_vector(copy.dense())), "big")
        total += digest_sum(digests[r.id] for r in changed)
        return fingerprint_of(total, len(digests))

    def _restore_precopy(
        self,
        exc: BaseException,
        pre: PrecopyManifest,
        before: Mapping[str, str],
        written: Sequence[str],
        saved: Sequence[StoredMemory],
        saved_history: tuple[list[str], list[tuple[Any, ...]]],
    ) -> None:
        """Undo a failed delta round: the copies it wrote go, the pre-copy's copies and history rows it
        replaced or deleted come back, the fork markers it wrote go, and the pre-copy marker is written
        again. If the store cannot be reached the target keeps no marker (the next attempt copies in full)."""
        store, target = self.store, pre.target
        try:
            with suppress(Exception):
                self._delete_history(list(written) + [r.id for r in saved])
                self._put_history(*saved_history)
            store.delete_ids(list(written))
            store.insert(saved)
            store.delete_ids(sorted(store.ids_where({MARKER_FIELD: target.key()})))
            entries = {k: bytes.fromhex(v) for k, v in before.items()}
            width = max((len(v) for v in entries.values()), default=PRECOPY_ENTRY_BYTES)
            self._write_precopy_marker(target, pre, split_chunks(encode_snapshot(entries, width)))
        except Exception as cleanup:
            log.error("fork %s: could not restore the pre-copy: %s", pre.fork_id, cleanup)
            exc.add_note(
                f"fork {pre.fork_id!r} into {target}: the pre-copy could not be restored ({type(cleanup).__name__}: "
                f"{cleanup}); the target holds no marker, so the next attempt removes its copies and copies in full"
            )

    # ------------------------------------------------------------------------------------- markers
    def _finish(
        self,
        source: Mem0Namespace,
        target: Mem0Namespace,
        fork_id: str,
        forked_at: str,
        digests: Mapping[str, bytes],
        contents: Mapping[str, bytes],
        history_rows: int,
        *,
        precopy: bool,
        pre: PrecopyManifest | None = None,
        position: JournalPosition | None = None,
        fingerprint: str | None = None,
    ) -> ForkManifest | PrecopyManifest:
        """Write the marker that makes the target a fork (manifest + digest snapshot; ``fingerprint`` when the
        caller has it, else computed from ``digests``) or a pre-copy (pre-copy marker + content-digest snapshot,
        the digest sum and the journal ``position``), then remove the previous pre-copy's parts it no longer
        needs."""
        store = self.store
        fields: dict[str, Any] = {"fork_id": fork_id, "source": source, "target": target, "count": len(digests)}
        fields.update(history_rows=history_rows, store=store.provider, collection=store.collection)
        chunks = self._snapshot_chunks(digests, contents, precopy=precopy)
        record: ForkManifest | PrecopyManifest
        if precopy:
            pre_record = PrecopyManifest(
                **fields, precopied_at=forked_at, snapshot_parts=len(chunks),
                digest_sum=f"{digest_sum(digests.values()):064x}", journal=position,
            )  # fmt: skip
            self._write_precopy_marker(target, pre_record, chunks)
            record = pre_record
            stale = range(len(chunks), pre.snapshot_parts if pre else 0)
        else:
            manifest = ForkManifest(
                **fields, source_fingerprint=fingerprint or combine_digests(digests.values()), forked_at=forked_at,
                snapshot_parts=len(chunks),
            )  # fmt: skip
            self._write_markers(store, target, manifest, chunks)
            record = manifest
            stale = range(pre.snapshot_parts if pre else 0)
        if stale:
            with suppress(Exception):  # marker records mem0 never returns; a drop removes them too
                store.delete_ids([precopy_marker_id(target, i) for i in stale])
        return record

    @staticmethod
    def _snapshot_chunks(digests: Mapping[str, bytes], contents: Mapping[str, bytes], *, precopy: bool) -> list[str]:
        """The snapshot a marker records, in parts: a pre-copy's content digests, or a fork's digests."""
        if precopy:
            entries = {k: c[:CONTENT_DIGEST_BYTES] + digests[k][:SNAPSHOT_DIGEST_BYTES] for k, c in contents.items()}
            return split_chunks(encode_snapshot(entries, PRECOPY_ENTRY_BYTES))
        return split_chunks(encode_snapshot(digests))

    def _marker_vector(self) -> Any:
        store = self.store
        return store.make_vector([1.0] + [0.0] * (store.dims() - 1))

    def _write_parts(self, tgt: Mem0Namespace, fork_id: str, chunks: list[str], *, precopy: bool) -> None:
        """The snapshot parts of a fork's manifest or a pre-copy's marker (before that marker)."""
        kind, part_id = (
            (MARKER_KIND_PRECOPY_SNAPSHOT, precopy_marker_id) if precopy else (MARKER_KIND_SNAPSHOT, marker_id)
        )
        base = {MARKER_FIELD: tgt.key(), MARKER_FORK_ID_FIELD: fork_id, MARKER_KIND_FIELD: kind}
        vector = self._marker_vector()
        self.store.insert([
            StoredMemory(
                id=part_id(tgt, i), payload={**base, MARKER_PART_FIELD: i, MARKER_SNAPSHOT_FIELD: c}, vector=vector
            )
            for i, c in enumerate(chunks)
        ])  # fmt: skip

    def _write_precopy_marker(self, tgt: Mem0Namespace, pre: PrecopyManifest, chunks: list[str]) -> None:
        """Content-digest parts first, the pre-copy marker last (its presence: the pre-copy is complete)."""
        self._write_parts(tgt, pre.fork_id, chunks, precopy=True)
        head = {
            MARKER_FIELD: tgt.key(),
            MARKER_FORK_ID_FIELD: pre.fork_id,
            MARKER_KIND_FIELD: MARKER_KIND_PRECOPY,
            MARKER_MANIFEST_FIELD: pre.model_dump_json(),
        }
        self.store.insert([StoredMemory(id=precopy_marker_id(tgt), payload=head, vector=self._marker_vector())])

    def _write_markers(
        self,
        store: StoreAdapter,
        tgt: Mem0Namespace,
        manifest: ForkManifest,
        chunks: list[str],
    ) -> None:
        """Snapshot parts first, the manifest last: its presence means the fork is complete."""
        self._write_parts(tgt, manifest.fork_id, chunks, precopy=False)
        vector = self._marker_vector()
        base = {MARKER_FIELD: tgt.key(), MARKER_FORK_ID_FIELD: manifest.fork_id}
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
        pre = self.read_precopy(namespace) if manifest is None else None
        payloads = {r.id: r.payload for b in self.store.iter_where(namespace.fields(), with_vectors=False) for r in b}
        recorded = manifest.fork_id if manifest else pre.fork_id if pre else None
        fork_id = fork_id_to_drop(namespace, recorded, payloads)
        if fork_id is None:
            return DropResult(namespace=namespace, fork_id=None, dropped=0, history_rows=0, existed=False)
        if keep:
            log.info("keeping fork %s in %s (%d memories) for debugging", fork_id, namespace, len(payloads))
            return DropResult(namespace=namespace, fork_id=fork_id, dropped=0, history_rows=0, kept=True, existed=True)
        history = self._remove(namespace, list(payloads), parts=manifest.snapshot_parts if manifest else 0)
        return DropResult(
            namespace=namespace, fork_id=fork_id, dropped=len(payloads), history_rows=history, existed=True
        )

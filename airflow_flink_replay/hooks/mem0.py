"""Hook for Mem0 long-term memory (connection type ``mem0``): namespace count/list/fingerprint/fork/drop.

The connection's extra holds the mem0 config as JSON (``{"vector_store": …, "history_db_path": …}``,
optionally under a ``"config"`` key). Extra keys read by this hook besides mem0's own:

* ``offline_embedder``: ``hashing`` (default when the config has no ``embedder``), ``minilm`` or
  ``config`` (use the config's embedder; default when it has one) — see :mod:`airflow_flink_replay.memory.offline`;
* ``store_adapter``: ``auto`` (default), ``generic`` or a provider name — see :mod:`.mem0_stores`;
* ``reembed``: allow the generic adapter to re-embed texts of stores that hide their vectors;
* ``backend``: ``oss`` (default: a local ``mem0.Memory`` over a vector store) or ``hosted`` (the Mem0
  platform through ``MemoryClient``: export + re-add, see :mod:`.mem0_hosted`); for ``hosted`` also
  ``host``, ``page_size``, ``settle_timeout_s`` and the API key (the connection's password, else
  ``api_key`` in the extra, else ``MEM0_API_KEY``).

A fork works at vector-store level (payloads and stored vectors, no embedding, no LLM), see
``docs/memory-fork.md``. The completion marker written last makes a fork atomic for readers of this
hook: without it a namespace holding provenance-tagged memories is a partial fork and is cleaned up.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, suppress
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk.bases.hook import BaseHook

from airflow_flink_replay.core.memory import (
    FORK_ID_FIELD,
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
    MemoryFingerprint,
    UntouchedReport,
    check_fork_pair,
    combine_digests,
    decode_snapshot,
    encode_snapshot,
    fork_history_id,
    fork_memory_id,
    has_provenance,
    marker_id,
    memory_digest,
    rewrite_payload,
    split_chunks,
)
from airflow_flink_replay.hooks.mem0_stores import (
    DEFAULT_BATCH,
    ForkConflictError,
    NotAForkError,
    StoreAdapter,
    StoredMemory,
    adapter_for,
    untouched_report,
)
from airflow_flink_replay.memory.offline import EmbedderChoice

if TYPE_CHECKING:
    from airflow_flink_replay.hooks.mem0_hosted import HostedMem0Backend

__all__ = ["ForkConflictError", "Mem0Hook", "NotAForkError"]

log = logging.getLogger(__name__)

NamespaceLike = Mem0Namespace | Mapping[str, Any] | str
_HOSTED_KEYS = ("backend", "host", "api_key", "page_size", "settle_timeout_s")
_HOOK_KEYS = ("offline_embedder", "store_adapter", "reembed", *_HOSTED_KEYS)
BACKENDS = ("oss", "hosted")


class Mem0Hook(BaseHook):
    """Mem0 namespace operations over the mem0 config stored as JSON in the connection's extra.

    :param mem0_conn_id: connection id (type ``mem0``).
    :param config: a mem0 config dict used instead of the connection (scripts, benchmarks).
    :param batch_size: records per read/write batch.
    """

    conn_name_attr = "mem0_conn_id"
    default_conn_name = "mem0_default"
    conn_type = "mem0"
    hook_name = "Mem0"

    def __init__(
        self,
        mem0_conn_id: str = default_conn_name,
        *,
        config: Mapping[str, Any] | None = None,
        batch_size: int = DEFAULT_BATCH,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.mem0_conn_id = mem0_conn_id
        self._config_override = dict(config) if config is not None else None
        self.batch_size = batch_size
        self._memory: Any = None
        self._store: StoreAdapter | None = None
        self._hosted: HostedMem0Backend | None = None
        self._backend: str | None = None

    # ------------------------------------------------------------------------------------ clients
    def get_extra(self) -> dict[str, Any]:
        """The raw extra (mem0 config plus this hook's keys)."""
        if self._config_override is not None:
            return dict(self._config_override)
        conn = self.get_connection(self.mem0_conn_id)
        extra = conn.extra_dejson if conn.extra else {}
        if not isinstance(extra, dict):
            raise ValueError(f"connection {self.mem0_conn_id!r}: extra must be a JSON object (the mem0 config)")
        return dict(extra)

    def get_config(self) -> dict[str, Any]:
        """Return the mem0 config dict (without this hook's own keys)."""
        extra = self.get_extra()
        config = extra.get("config", extra)
        if isinstance(config, str):
            try:
                config = json.loads(config)
            except json.JSONDecodeError as exc:
                raise ValueError(f"connection {self.mem0_conn_id!r}: extra.config is not JSON ({exc})") from exc
        return {k: v for k, v in dict(config).items() if k not in _HOOK_KEYS}

    def backend(self) -> str:
        """``oss`` (a local ``mem0.Memory`` over a vector store) or ``hosted`` (the Mem0 platform)."""
        if self._backend is None:
            backend = str(self.get_extra().get("backend") or "oss").strip().lower()
            if backend not in BACKENDS:
                raise ValueError(
                    f"connection {self.mem0_conn_id!r}: extra.backend is {backend!r}; use 'oss' (a mem0 "
                    "vector-store config) or 'hosted' (the Mem0 platform, MemoryClient)"
                )
            self._backend = backend
        return self._backend

    def is_hosted(self) -> bool:
        """True when the connection selects the Mem0 platform (``"backend": "hosted"``)."""
        return self.backend() == "hosted"

    def get_hosted(self) -> HostedMem0Backend:
        """The hosted-Mem0 backend (export + re-add; built once, connects on first use)."""
        if not self.is_hosted():
            raise ValueError(f'connection {self.mem0_conn_id!r}: set extra.backend to "hosted" for the Mem0 platform')
        if self._hosted is None:
            from airflow_flink_replay.hooks.mem0_hosted import HostedMem0Backend

            extra = self.get_extra()
            api_key = extra.get("api_key")
            host = extra.get("host")
            if self._config_override is None:
                conn = self.get_connection(self.mem0_conn_id)
                api_key = conn.password or api_key
                host = host or conn.host
            self._hosted = HostedMem0Backend(
                api_key=api_key or None,
                host=host or None,
                page_size=int(extra.get("page_size") or 100),
                settle_timeout_s=float(extra.get("settle_timeout_s") or 120.0),
            )
        return self._hosted

    def get_memory(self) -> Any:
        """The offline ``mem0.Memory`` for this connection (built once per hook; ``oss`` backend only)."""
        if self.is_hosted():
            raise ValueError(
                f"connection {self.mem0_conn_id!r} selects the hosted backend: there is no local mem0.Memory; "
                "use get_hosted().client() for the platform's MemoryClient"
            )
        if self._memory is None:
            from airflow_flink_replay.memory.offline import build_offline_memory

            config = self.get_config()
            extra = self.get_extra()
            embedder = extra.get("offline_embedder") or ("config" if config.get("embedder") else "hashing")
            if embedder not in ("hashing", "minilm", "config"):
                raise ValueError(f"extra.offline_embedder: use hashing, minilm or config, not {embedder!r}")
            self._memory = build_offline_memory(config, embedder=cast(EmbedderChoice, embedder))
        return self._memory

    def get_store(self) -> StoreAdapter:
        """The vector-store adapter for this connection's collection."""
        if self._store is None:
            extra = self.get_extra()
            self._store = adapter_for(
                self.get_memory(),
                batch_size=self.batch_size,
                adapter=str(extra.get("store_adapter", "auto")),
                reembed=bool(extra.get("reembed", False)),
            )
        return self._store

    def test_connection(self) -> tuple[bool, str]:
        """Build the Memory and count the default collection's markers (reachability check)."""
        try:
            if self.is_hosted():
                hosted = self.get_hosted()
                hosted.client()  # MemoryClient pings the platform in its constructor
                return True, f"Mem0 platform {hosted.host} reachable"
            store = self.get_store()
            store.count({MARKER_KIND_FIELD: MARKER_KIND_MANIFEST})
            return True, f"mem0 {store.provider} collection {store.collection!r} reachable"
        except Exception as exc:
            return False, str(exc)

    # --------------------------------------------------------------------------------- namespaces
    def count(self, namespace: NamespaceLike) -> int:
        """Number of memories in a namespace."""
        if self.is_hosted():
            return self.get_hosted().count(Mem0Namespace.coerce(namespace))
        return self.get_store().count(Mem0Namespace.coerce(namespace).fields())

    def list_memories(self, namespace: NamespaceLike, *, with_vectors: bool = False) -> list[StoredMemory]:
        """Every memory of a namespace as stored (id, payload, optionally the vector)."""
        ns = Mem0Namespace.coerce(namespace)
        if self.is_hosted():
            return self.get_hosted().list_memories(ns)
        return [r for b in self.get_store().iter_where(ns.fields(), with_vectors=with_vectors) for r in b]

    def _digests(self, ns: Mem0Namespace) -> Iterator[tuple[StoredMemory, bytes]]:
        store = self.get_store()
        for batch in store.iter_where(ns.fields(), with_vectors=True):
            for rec in batch:
                yield rec, memory_digest(rec.id, rec.payload, store.canonical_vector(rec.dense()))

    def fingerprint(self, namespace: NamespaceLike) -> MemoryFingerprint:
        """Order-independent digest over id, hash, updated_at and vector of every memory."""
        ns = Mem0Namespace.coerce(namespace)
        if self.is_hosted():
            return self.get_hosted().fingerprint(ns)
        digests = [d for _, d in self._digests(ns)]
        return MemoryFingerprint(
            namespace=ns, count=len(digests), digest=combine_digests(digests), computed_at=datetime.now(UTC)
        )

    # ------------------------------------------------------------------------------------- markers
    def read_manifest(self, target: NamespaceLike) -> ForkManifest | None:
        """The completion marker of a fork into ``target``, or None when there is no complete fork."""
        ns = Mem0Namespace.coerce(target)
        if self.is_hosted():
            return self.get_hosted().read_manifest(ns)
        recs = self.get_store().get_ids([marker_id(ns)])
        if not recs:
            return None
        payload = recs[0].payload
        if payload.get(MARKER_FIELD) != ns.key() or payload.get(MARKER_KIND_FIELD) != MARKER_KIND_MANIFEST:
            return None
        return ForkManifest.model_validate_json(payload[MARKER_MANIFEST_FIELD])

    def read_snapshot(self, manifest: ForkManifest) -> dict[str, str]:
        """The fork-time ``{source memory id: digest}`` snapshot recorded with the manifest."""
        ids = [marker_id(manifest.target, i) for i in range(manifest.snapshot_parts)]
        parts = {
            int(r.payload[MARKER_PART_FIELD]): r.payload[MARKER_SNAPSHOT_FIELD] for r in self.get_store().get_ids(ids)
        }
        if sorted(parts) != list(range(manifest.snapshot_parts)):
            raise RuntimeError(f"fork {manifest.fork_id}: snapshot parts missing for {manifest.target}")
        return decode_snapshot("".join(parts[i] for i in range(manifest.snapshot_parts)))

    def _marker_ids(self, ns: Mem0Namespace, parts: int) -> list[str]:
        return [marker_id(ns)] + [marker_id(ns, i) for i in range(parts)]

    # ------------------------------------------------------------------------------------- history
    def _history_path(self) -> str | None:
        path = getattr(self.get_memory().config, "history_db_path", None)
        return str(path) if path else None

    def _history_conn(self) -> sqlite3.Connection | None:
        path = self._history_path()
        if not path:
            return None
        conn = sqlite3.connect(path, timeout=30)
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
    def fork(self, source: NamespaceLike, target: NamespaceLike, *, fork_id: str) -> ForkResult:
        """Copy every memory of ``source`` into ``target`` (payloads and stored vectors, no embedding).

        Refuses (:class:`ForkConflictError`) when ``target`` holds anything but a fork of the same
        ``fork_id``; returns the recorded result with ``noop=True`` when that complete fork exists already.
        Leftovers of an interrupted fork of the same ``fork_id`` are removed first. On any error what this
        call wrote is removed and the error re-raised.
        """
        if not fork_id or not str(fork_id).strip():
            raise ValueError("fork_id: give the replay run's id (e.g. the Airflow run_id)")
        src = Mem0Namespace.coerce(source, what="source")
        tgt = Mem0Namespace.coerce(target, what="target")
        check_fork_pair(src, tgt)
        if self.is_hosted():
            return self.get_hosted().fork(src, tgt, fork_id=str(fork_id))
        started = time.monotonic()
        store = self.get_store()

        manifest = self.read_manifest(tgt)
        if manifest is not None:
            if manifest.fork_id == fork_id and manifest.source == src:
                log.info("fork %s into %s already complete: nothing to do", fork_id, tgt)
                return ForkResult(
                    **manifest.model_dump(exclude={"snapshot_parts"}),
                    duration_s=time.monotonic() - started,
                    noop=True,
                )
            raise ForkConflictError(
                f"target {tgt} already holds fork {manifest.fork_id!r} of {manifest.source}: "
                "drop it first (DropMem0ForkOperator) or choose another target namespace"
            )
        leftovers = [r for b in store.iter_where(tgt.fields(), with_vectors=False) for r in b]
        if leftovers:
            foreign = [r.id for r in leftovers if r.payload.get(FORK_ID_FIELD) != fork_id]
            if foreign:
                raise ForkConflictError(
                    f"target {tgt} already holds {len(foreign)} memories that are not from fork {fork_id!r} "
                    f"(e.g. {foreign[0]}): refusing to write into a namespace in use; choose another target"
                )
            log.warning("removing %d leftovers of an interrupted fork %s in %s", len(leftovers), fork_id, tgt)
            self._remove(tgt, [r.id for r in leftovers], parts=0)

        forked_at = datetime.now(UTC).isoformat()
        written: list[str] = []
        id_map: dict[str, str] = {}
        digests: dict[str, bytes] = {}
        parts = 0
        timings = {"check": time.monotonic() - started, "read": 0.0, "write": 0.0, "history": 0.0, "marker": 0.0}
        try:
            src_key, tgt_key, tgt_fields = src.key(), tgt.key(), tgt.fields()
            # Writes of batch k overlap the read of batch k+1 where the client allows concurrent use; at
            # most one batch is in flight, and leaving the ``with`` waits for it (so cleanup sees it).
            with ThreadPoolExecutor(1) as writer:
                pending: Future[None] | None = None
                mark = time.monotonic()
                for batch in store.iter_where(src.fields(), with_vectors=True):
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
            mark = time.monotonic()
            history_rows = self._copy_history(id_map, fork_id, tgt)
            timings["history"] = time.monotonic() - mark
            mark = time.monotonic()
            snapshot_chunks = split_chunks(encode_snapshot(digests))
            parts = len(snapshot_chunks)
            manifest = ForkManifest(
                fork_id=fork_id,
                source=src,
                target=tgt,
                count=len(digests),
                source_fingerprint=combine_digests(digests.values()),
                history_rows=history_rows,
                forked_at=forked_at,
                snapshot_parts=parts,
                store=store.provider,
                collection=store.collection,
            )
            self._write_markers(store, tgt, manifest, snapshot_chunks)
            timings["marker"] = time.monotonic() - mark
        except BaseException:
            log.error("fork %s into %s failed after %d memories: removing what it wrote", fork_id, tgt, len(written))
            self._remove(tgt, written, parts=parts)
            raise
        return ForkResult(
            **manifest.model_dump(exclude={"snapshot_parts"}),
            duration_s=time.monotonic() - started,
            noop=False,
            timings_s={k: round(v, 6) for k, v in timings.items()},
        )

    def _write_markers(
        self, store: StoreAdapter, tgt: Mem0Namespace, manifest: ForkManifest, chunks: list[str]
    ) -> None:
        """Snapshot parts first, the manifest last: its presence means the fork is complete."""
        unit = [1.0] + [0.0] * (store.dims() - 1)
        vector = store.make_vector(unit)
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
        store.insert(
            [
                StoredMemory(
                    id=marker_id(tgt),
                    payload={
                        **base,
                        MARKER_KIND_FIELD: MARKER_KIND_MANIFEST,
                        MARKER_MANIFEST_FIELD: manifest.model_dump_json(),
                    },
                    vector=vector,
                )
            ]
        )

    def _remove(self, tgt: Mem0Namespace, memory_ids: Sequence[str], *, parts: int) -> int:
        """Delete memories, their history rows and the markers of ``tgt`` (best effort on every part)."""
        store = self.get_store()
        history = 0
        with suppress(Exception):
            history = self._delete_history(memory_ids)
        store.delete_ids(list(memory_ids))
        store.delete_ids(self._marker_ids(tgt, parts))
        return history

    # ---------------------------------------------------------------------------------------- drop
    def drop(self, namespace: NamespaceLike, *, keep: bool = False) -> DropResult:
        """Delete a fork namespace: every memory in it (forked or written by the replay) and its markers.

        Only a namespace with this project's fork marker, or holding nothing but provenance-tagged
        memories (an interrupted fork), is dropped; anything else raises :class:`NotAForkError`. An empty
        namespace without marker is a no-op (cleanup after a fork that never started).
        """
        ns = Mem0Namespace.coerce(namespace)
        if self.is_hosted():
            return self.get_hosted().drop(ns, keep=keep)
        manifest = self.read_manifest(ns)
        ids_payloads = [
            (r.id, r.payload) for b in self.get_store().iter_where(ns.fields(), with_vectors=False) for r in b
        ]
        if manifest is None:
            if not ids_payloads:
                return DropResult(namespace=ns, fork_id=None, dropped=0, history_rows=0, existed=False)
            untagged = [i for i, p in ids_payloads if not has_provenance(p)]
            if untagged:
                raise NotAForkError(
                    f"namespace {ns} is not a fork made by airflow-flink-replay ({len(untagged)} memories without "
                    f"fork provenance, no fork marker): refusing to drop it"
                )
        fork_id = manifest.fork_id if manifest else str(ids_payloads[0][1].get(FORK_ID_FIELD))
        if keep:
            log.info("keeping fork %s in %s (%d memories) for debugging", fork_id, ns, len(ids_payloads))
            return DropResult(namespace=ns, fork_id=fork_id, dropped=0, history_rows=0, kept=True, existed=True)
        ids = [i for i, _ in ids_payloads]
        history = self._remove(ns, ids, parts=manifest.snapshot_parts if manifest else 0)
        return DropResult(namespace=ns, fork_id=fork_id, dropped=len(ids), history_rows=history, existed=True)

    # --------------------------------------------------------------------------------------- verify
    def verify_untouched(self, target: NamespaceLike, *, production_writes_expected: bool = True) -> UntouchedReport:
        """Compare the fork's source namespace now with the snapshot recorded at fork time.

        See :class:`~airflow_flink_replay.core.memory.UntouchedReport` for how changes are classified.
        """
        tgt = Mem0Namespace.coerce(target, what="target")
        if self.is_hosted():
            return self.get_hosted().verify_untouched(tgt, production_writes_expected=production_writes_expected)
        manifest = self.read_manifest(tgt)
        if manifest is None:
            raise RuntimeError(f"no complete fork in {tgt}: run the fork first (nothing to compare against)")
        before = self.read_snapshot(manifest)
        now: dict[str, bytes] = {}
        payloads: dict[str, dict[str, Any]] = {}
        for rec, digest in self._digests(manifest.source):
            now[rec.id] = digest
            payloads[rec.id] = rec.payload
        return untouched_report(
            fork_id=manifest.fork_id,
            source=manifest.source,
            target=tgt,
            fingerprint_at_fork=manifest.source_fingerprint,
            count_at_fork=manifest.count,
            before=before,
            now=now,
            payloads=payloads,
            production_writes_expected=production_writes_expected,
        )

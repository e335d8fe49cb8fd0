"""Hook for Mem0 long-term memory (connection type ``mem0``): namespace count/list/fingerprint/fork/drop.

The connection's extra holds the mem0 config as JSON (``{"vector_store": …, "history_db_path": …}``,
optionally under a ``"config"`` key). Extra keys read by this hook besides mem0's own:

* ``offline_embedder``: ``hashing`` (default when the config has no ``embedder``), ``minilm`` or
  ``config`` (use the config's embedder; default when it has one) — see
  :mod:`airflow_flink_replay.memory.offline`;
* ``store_adapter``: ``auto`` (default), ``generic`` or a provider name — see
  :mod:`airflow_flink_replay.memory.stores`;
* ``reembed``: allow the generic adapter to re-embed texts of stores that hide their vectors;
* ``backend``: ``oss`` (default: a local ``mem0.Memory`` over a vector store) or ``hosted`` (the Mem0
  platform through ``MemoryClient``: export + re-add, see :mod:`airflow_flink_replay.memory.hosted`); for
  ``hosted`` also ``host``, ``page_size``, ``settle_timeout_s`` and the API key (the connection's password,
  else ``api_key`` in the extra, else ``MEM0_API_KEY``).

The hook parses the connection, picks the backend once (:meth:`Mem0Hook.get_backend`: an
:class:`~airflow_flink_replay.memory.oss.OssMem0Backend` — a fork at vector-store level, payloads and stored
vectors, no embedding, no LLM — or a :class:`~airflow_flink_replay.memory.hosted.HostedMem0Backend`), checks
the arguments and delegates (:class:`~airflow_flink_replay.memory.backend.Mem0Backend`). Fingerprints and
verify-untouched are computed here, once, from what either backend returns. It is the memory fork's one module
under ``hooks/``: the backends, production's memory journal (its Airflow-side reader included) and the offline
``mem0.Memory`` builder are in :mod:`airflow_flink_replay.memory`. See ``docs/memory-fork.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from airflow.sdk.bases.hook import BaseHook

from airflow_flink_replay.core.memory_fork import (
    DropResult,
    ForkManifest,
    ForkResult,
    Mem0Namespace,
    MemoryFingerprint,
    PrecopyManifest,
    UntouchedReport,
    check_fork_pair,
    combine_digests,
)
from airflow_flink_replay.exceptions import ForkConflictError, NotAForkError
from airflow_flink_replay.memory.backend import Mem0Backend, MemoryJournalReader, untouched_report
from airflow_flink_replay.memory.hosted import HostedMem0Backend
from airflow_flink_replay.memory.oss import OssMem0Backend
from airflow_flink_replay.memory.stores import (
    DEFAULT_BATCH,
    StoreAdapter,
    StoredMemory,
)

__all__ = ["ForkConflictError", "Mem0Hook", "NotAForkError"]

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
        self._backend_kind: str | None = None
        self._backend: Mem0Backend | None = None

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
        if self._backend_kind is None:
            backend = str(self.get_extra().get("backend") or "oss").strip().lower()
            if backend not in BACKENDS:
                raise ValueError(
                    f"connection {self.mem0_conn_id!r}: extra.backend is {backend!r}; use 'oss' (a mem0 "
                    "vector-store config) or 'hosted' (the Mem0 platform, MemoryClient)"
                )
            self._backend_kind = backend
        return self._backend_kind

    def is_hosted(self) -> bool:
        """True when the connection selects the Mem0 platform (``"backend": "hosted"``)."""
        return self.backend() == "hosted"

    def get_backend(self) -> Mem0Backend:
        """The backend the connection selects, built once per hook (it connects on first use)."""
        if self._backend is None:
            builders: dict[str, Callable[[], Mem0Backend]] = {"oss": self._oss_backend, "hosted": self._hosted_backend}
            self._backend = builders[self.backend()]()
        return self._backend

    def _oss_backend(self) -> OssMem0Backend:
        config = self.get_config()
        extra = self.get_extra()
        return OssMem0Backend(
            config,
            embedder=str(extra.get("offline_embedder") or ("config" if config.get("embedder") else "hashing")),
            batch_size=self.batch_size,
            store_adapter=str(extra.get("store_adapter", "auto")),
            reembed=bool(extra.get("reembed", False)),
        )

    def _hosted_backend(self) -> HostedMem0Backend:
        extra = self.get_extra()
        api_key = extra.get("api_key")
        host = extra.get("host")
        if self._config_override is None:
            conn = self.get_connection(self.mem0_conn_id)
            api_key = conn.password or api_key
            host = host or conn.host
        return HostedMem0Backend(
            api_key=api_key or None,
            host=host or None,
            page_size=int(extra.get("page_size") or 100),
            settle_timeout_s=float(extra.get("settle_timeout_s") or 120.0),
        )

    def get_hosted(self) -> HostedMem0Backend:
        """The hosted-Mem0 backend (export + re-add; connects on first use)."""
        backend = self.get_backend()
        if not isinstance(backend, HostedMem0Backend):
            raise ValueError(f'connection {self.mem0_conn_id!r}: set extra.backend to "hosted" for the Mem0 platform')
        return backend

    def _oss(self) -> OssMem0Backend:
        backend = self.get_backend()
        if not isinstance(backend, OssMem0Backend):
            raise ValueError(
                f"connection {self.mem0_conn_id!r} selects the hosted backend: there is no local mem0.Memory; "
                "use get_hosted().client() for the platform's MemoryClient"
            )
        return backend

    def get_memory(self) -> Any:
        """The offline ``mem0.Memory`` for this connection (built once per hook; ``oss`` backend only)."""
        return self._oss().memory

    def connect(self) -> None:
        """Build the backend and its client now (the vector-store client — with mem0's import and the offline
        ``Memory`` unless the store is a Chroma server — or the platform client), so a later call in a
        time-critical step does not pay for it."""
        backend = self.get_backend()
        if isinstance(backend, OssMem0Backend):
            backend.store  # noqa: B018  (builds the store adapter)
        else:
            self.get_hosted().client()

    def get_store(self) -> StoreAdapter:
        """The vector-store adapter for this connection's collection (``oss`` backend only)."""
        return self._oss().store

    def test_connection(self) -> tuple[bool, str]:
        """Reach the backend (vector store: count the collection's fork markers; platform: ping)."""
        try:
            return True, self.get_backend().check()
        except Exception as exc:
            return False, str(exc)

    # --------------------------------------------------------------------------------- namespaces
    def count(self, namespace: NamespaceLike) -> int:
        """Number of memories in a namespace."""
        return self.get_backend().count(Mem0Namespace.coerce(namespace))

    def list_memories(self, namespace: NamespaceLike, *, with_vectors: bool = False) -> list[StoredMemory]:
        """Every memory of a namespace as stored (id, payload, optionally the vector; hosted: never)."""
        return self.get_backend().list_memories(Mem0Namespace.coerce(namespace), with_vectors=with_vectors)

    def fingerprint(self, namespace: NamespaceLike) -> MemoryFingerprint:
        """Order-independent digest over id, hash, updated_at and vector (hosted: no vector) of every memory."""
        ns = Mem0Namespace.coerce(namespace)
        digests, _ = self.get_backend().digests(ns)
        return MemoryFingerprint(
            namespace=ns, count=len(digests), digest=combine_digests(digests.values()), computed_at=datetime.now(UTC)
        )

    def read_manifest(self, target: NamespaceLike) -> ForkManifest | None:
        """The complete fork in ``target`` (its completion marker; hosted: its copies), or None."""
        return self.get_backend().read_manifest(Mem0Namespace.coerce(target))

    def read_snapshot(self, manifest: ForkManifest) -> dict[str, str]:
        """The fork-time ``{source memory id: digest}`` snapshot of the fork in ``manifest.target``."""
        return self.get_backend().fork_baseline(manifest.target).snapshot

    # ----------------------------------------------------------------------------- fork/drop/verify
    def fork(
        self,
        source: NamespaceLike,
        target: NamespaceLike,
        *,
        fork_id: str,
        journal: MemoryJournalReader | None = None,
        on_source_read: Callable[[], None] | None = None,
    ) -> ForkResult:
        """Copy every memory of ``source`` into ``target`` (vector store: payloads and stored vectors, no
        embedding; hosted: export + re-add).

        Refuses (:class:`ForkConflictError`) when ``target`` holds anything but a fork of the same
        ``fork_id``; returns the recorded result with ``noop=True`` when that complete fork exists already.
        When ``target`` holds this fork's pre-copy (:meth:`precopy`), only the changes since are copied
        (``delta=True`` in the result) and a failure restores the pre-copy.
        With ``journal`` (production's memory journal,
        :class:`~airflow_flink_replay.memory.journal_reader.MemoryJournalHook`) and a pre-copy that noted its
        position, only the memories the journal names since are read (``journal=True`` in the result); pass it
        only when production did not fail over since the pre-copy (the stop window checks).
        ``on_source_read`` is called once ``source`` was read for the last time, before the fork's markers are
        written (the stop window's fence; an error it raises fails the fork like any other).
        Leftovers of an interrupted fork of the same ``fork_id`` are removed first. On any error what this
        call wrote is removed and the error re-raised.
        """
        src, tgt = _fork_pair(source, target, fork_id)
        return self.get_backend().fork(src, tgt, fork_id=str(fork_id), journal=journal, on_source_read=on_source_read)

    def read_precopy(self, target: NamespaceLike, *, with_snapshot: bool = False) -> PrecopyManifest | None:
        """The pre-copy in ``target`` (how many memories it holds, when it was read, the memory journal's position
        then), or None: no pre-copy there, or a backend without one (hosted). ``with_snapshot``: also read its
        per-memory record now and keep it for the :meth:`fork` that completes it (the stop window does this
        before the stop, so the cut inside does not read it)."""
        backend = self.get_backend()
        if not isinstance(backend, OssMem0Backend):
            return None
        pre = backend.read_precopy(Mem0Namespace.coerce(target, what="target"))
        if pre is not None and with_snapshot:
            backend.precopy_snapshot(pre)
        return pre

    def precopy(
        self, source: NamespaceLike, target: NamespaceLike, *, fork_id: str, journal: MemoryJournalReader | None = None
    ) -> ForkResult:
        """Pre-copy ``source`` into ``target`` while production runs; :meth:`fork` with the same ``fork_id``
        then copies only what changed since (added, updated and deleted memories), so the copy inside
        production's stop window is the delta, not the namespace.

        Vector-store backend: the copies plus a pre-copy marker recording a content digest of every source
        memory as read (not a fork yet: nothing but :meth:`fork` completes it, :meth:`drop` removes it);
        called again it runs one more delta round. Hosted: a no-op (the fork copies in full). Same checks
        and conflicts as :meth:`fork`; a complete fork in ``target`` makes it a no-op. With ``journal`` the
        journal's position is noted before the source is read: the cut then reads only what it names since.
        """
        src, tgt = _fork_pair(source, target, fork_id)
        return self.get_backend().precopy(src, tgt, fork_id=str(fork_id), journal=journal)

    def drop(self, namespace: NamespaceLike, *, keep: bool = False) -> DropResult:
        """Delete a fork namespace: every memory in it (forked or written by the replay) and its markers.

        Only a namespace with this project's complete fork, or holding nothing but provenance-tagged
        memories (an interrupted fork), is dropped; anything else raises :class:`NotAForkError`. An empty
        namespace without fork is a no-op (cleanup after a fork that never started).
        """
        return self.get_backend().drop(Mem0Namespace.coerce(namespace), keep=keep)

    def verify_untouched(self, target: NamespaceLike, *, production_writes_expected: bool = True) -> UntouchedReport:
        """Compare the fork's source namespace now with what the fork recorded about it.

        See :class:`~airflow_flink_replay.core.memory_fork.UntouchedReport` for how changes are classified.
        """
        backend = self.get_backend()
        baseline = backend.fork_baseline(Mem0Namespace.coerce(target, what="target"))
        now, payloads = backend.digests(baseline.source)
        return untouched_report(
            baseline, now=now, payloads=payloads, production_writes_expected=production_writes_expected
        )


def _fork_pair(source: NamespaceLike, target: NamespaceLike, fork_id: str) -> tuple[Mem0Namespace, Mem0Namespace]:
    """The checked (source, target) of a fork or pre-copy; a blank ``fork_id`` is refused naming the fix."""
    if not fork_id or not str(fork_id).strip():
        raise ValueError("fork_id: give the replay run's id (e.g. the Airflow run_id)")
    src = Mem0Namespace.coerce(source, what="source")
    tgt = Mem0Namespace.coerce(target, what="target")
    check_fork_pair(src, tgt)
    return src, tgt

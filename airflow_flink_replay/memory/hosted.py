"""Hosted Mem0 (the platform, ``mem0.MemoryClient``) as a fork backend: export + re-add, no vector access.

Selected by the ``mem0`` connection's extra ``{"backend": "hosted"}`` (see
:class:`~airflow_flink_replay.hooks.mem0.Mem0Hook`). The platform gives no vector-level access, so a fork there is:

1. **export** — paged ``get_all(filters={"AND": [{field: value}, …]}, page=n, page_size=…)`` of the
   source namespace: id, text (``memory``), ``metadata``, ``hash``, ``created_at``/``updated_at`` and the
   entity fields;
2. **re-add** — one ``add([{"role": "user", "content": text}], filters={…target scope…},
   metadata={…original metadata, provenance…}, infer=False, timestamp=<created_at>)`` per memory. The
   platform **re-embeds** the text (vectors cannot be copied, so they cannot be asserted equal) and
   assigns new ids, hash and ``updated_at``; the provenance in ``metadata`` (fork id, source id, source
   namespace, forked_at, the source memory's digest and hash/updated_at, the source fingerprint and
   the fork's count) is what links a copy to its source;
3. **drop** — only a namespace whose memories carry this project's provenance (or that holds a complete
   fork of it) is deleted, id by id through ``batch_delete`` — never ``delete_all`` on a scope;
4. **verify-untouched** — re-export the source and compare with the fingerprint and per-memory digests
   recorded in the fork's metadata. Digests cover id, hash and ``updated_at`` (no vector: the platform
   does not return it).

There is no completion marker record (the platform has no scope-less records, and a marker inside the
replay's namespace would be returned by the agent's own ``search``): a fork is complete when the target
holds as many memories of the fork id as each of them records in ``afr_fork_count``. ``add`` may be
processed asynchronously by the platform, so :meth:`HostedMem0Backend.fork` waits (bounded) until the
target shows every copy; a failed fork deletes the copies it can see, and the next attempt of the same
fork id removes any that arrived later.

``MemoryClient`` pings the API in its constructor, so nothing here runs offline: the module is not
exercised against the platform in this project's tests (only the pure mapping functions are unit-tested).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_flink_replay.core.memory_fork import (
    FORK_ID_FIELD,
    FORK_SOURCE_ID_FIELD,
    FORK_SOURCE_NAMESPACE_FIELD,
    FORKED_AT_FIELD,
    SNAPSHOT_DIGEST_BYTES,
    DropResult,
    ForkManifest,
    ForkResult,
    Mem0Namespace,
    combine_digests,
    has_provenance,
    memory_digest,
    rewrite_payload,
)
from airflow_flink_replay.exceptions import ForkConflictError, NoForkError
from airflow_flink_replay.memory.backend import ForkBaseline, completed_fork, fork_id_to_drop, refuse_foreign
from airflow_flink_replay.memory.stores import StoredMemory

log = logging.getLogger(__name__)

#: ``ForkResult.store`` of a platform fork.
HOSTED_PROVIDER = "mem0-platform"
DEFAULT_HOST = "https://api.mem0.ai"
#: Entity fields the platform scopes memories by (``app_id`` is platform-only; kept as is in a fork).
PLATFORM_SCOPE_FIELDS: tuple[str, ...] = ("user_id", "agent_id", "run_id", "app_id")
#: Extra provenance a platform copy carries in its metadata (besides the four ``afr_fork_*`` fields).
SOURCE_DIGEST_FIELD = "afr_fork_source_digest"
SOURCE_FINGERPRINT_FIELD = "afr_fork_source_fingerprint"
SOURCE_HASH_FIELD = "afr_fork_source_hash"
SOURCE_UPDATED_AT_FIELD = "afr_fork_source_updated_at"
FORK_COUNT_FIELD = "afr_fork_count"
#: Record fields that are not metadata in a mem0 payload.
_CONTENT_FIELDS = ("data", "hash", "created_at", "updated_at")
#: ``batch_delete`` takes at most this many ids per call.
BATCH_DELETE_MAX = 1000


# ----------------------------------------------------------------------------------- pure mapping
def hosted_filters(fields: Mapping[str, str]) -> dict[str, Any]:
    """Platform ``filters`` for equality on every entity field (``{"AND": [{"user_id": …}, …]}``)."""
    if not fields:
        raise ValueError("a platform namespace needs at least one of user_id, agent_id, run_id")
    return {"AND": [{k: v} for k, v in fields.items()]}


def hosted_payload(record: Mapping[str, Any]) -> dict[str, Any]:
    """A platform memory (an item of ``get_all``) as a mem0 payload: metadata flattened, ``data``,
    ``hash`` (md5 of the text when the platform gives none, as mem0 computes it), timestamps, entities."""
    text = str(record.get("memory") or record.get("data") or "")
    payload: dict[str, Any] = dict(record.get("metadata") or {})
    payload["data"] = text
    payload["hash"] = record.get("hash") or hashlib.md5(text.encode("utf-8")).hexdigest()
    payload["created_at"] = record.get("created_at")
    payload["updated_at"] = record.get("updated_at")
    for field in PLATFORM_SCOPE_FIELDS:
        if record.get(field):
            payload[field] = record[field]
    return payload


def hosted_digest(memory_id: str, payload: Mapping[str, Any]) -> bytes:
    """Per-memory digest on the platform: id, hash and ``updated_at`` (no vector is exposed)."""
    return memory_digest(memory_id, payload, None)


def _epoch(value: Any) -> int | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp())


def hosted_add_request(
    memory_id: str,
    payload: Mapping[str, Any],
    *,
    source: Mem0Namespace,
    target: Mem0Namespace,
    fork_id: str,
    forked_at: str,
    source_digest: bytes,
    source_fingerprint: str,
    count: int,
) -> dict[str, Any]:
    """Keyword arguments of ``MemoryClient.add`` re-adding one exported memory into ``target``.

    Entity fields the namespace names are rewritten, the others kept; the text is added verbatim
    (``infer=False``, no LLM); metadata keeps every original key and gains the provenance (see the
    module docstring); ``timestamp`` carries the original ``created_at``.
    """
    scope = {f: payload[f] for f in PLATFORM_SCOPE_FIELDS if payload.get(f)}
    scope.update(target.fields())
    metadata = {k: v for k, v in payload.items() if k not in _CONTENT_FIELDS and k not in PLATFORM_SCOPE_FIELDS}
    metadata = rewrite_payload(
        metadata, source_id=memory_id, source=source, target={}, fork_id=fork_id, forked_at=forked_at
    )
    metadata[SOURCE_DIGEST_FIELD] = source_digest[:SNAPSHOT_DIGEST_BYTES].hex()
    metadata[SOURCE_FINGERPRINT_FIELD] = source_fingerprint
    metadata[SOURCE_HASH_FIELD] = payload.get("hash")
    metadata[SOURCE_UPDATED_AT_FIELD] = payload.get("updated_at")
    metadata[FORK_COUNT_FIELD] = count
    request: dict[str, Any] = {
        "messages": [{"role": "user", "content": str(payload.get("data") or "")}],
        "filters": scope,
        "metadata": metadata,
        "infer": False,
    }
    created = _epoch(payload.get("created_at"))
    if created is not None:
        request["timestamp"] = created
    return request


@dataclass(frozen=True)
class HostedForkState:
    """What a platform fork's copies record about it (the platform's stand-in for the manifest)."""

    fork_id: str
    source: Mem0Namespace
    forked_at: str
    count: int
    source_fingerprint: str
    snapshot: dict[str, str]
    present: int
    memory_ids: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """True when every copy the fork made is in the target."""
        return self.present == self.count


def hosted_fork_states(payloads: Mapping[str, Mapping[str, Any]]) -> dict[str, HostedForkState]:
    """The forks whose copies are in a target namespace, by fork id (from the copies' metadata)."""
    groups: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for mid, payload in payloads.items():
        if has_provenance(payload):
            groups.setdefault(str(payload[FORK_ID_FIELD]), []).append((mid, payload))
    states = {}
    for fork_id, members in groups.items():
        first = members[0][1]
        try:
            count = int(first.get(FORK_COUNT_FIELD) or 0)
        except (TypeError, ValueError):
            count = 0
        states[fork_id] = HostedForkState(
            fork_id=fork_id,
            source=Mem0Namespace.coerce(str(first.get(FORK_SOURCE_NAMESPACE_FIELD) or "{}"), what="fork source"),
            forked_at=str(first.get(FORKED_AT_FIELD) or ""),
            count=count,
            source_fingerprint=str(first.get(SOURCE_FINGERPRINT_FIELD) or ""),
            snapshot={
                str(p[FORK_SOURCE_ID_FIELD]): str(p.get(SOURCE_DIGEST_FIELD) or "")
                for _, p in members
                if p.get(FORK_SOURCE_ID_FIELD)
            },
            present=len(members),
            memory_ids=tuple(sorted(m for m, _ in members)),
        )
    return states


# ------------------------------------------------------------------------------------------ backend
class HostedMem0Backend:
    """Namespace operations on hosted Mem0 (the :class:`~.backend.Mem0Backend` protocol; see the
    module docstring).

    :param api_key: platform API key (``None``: ``MemoryClient`` reads ``MEM0_API_KEY``).
    :param host: API base URL (default ``https://api.mem0.ai``).
    :param page_size: records per ``get_all`` page.
    :param settle_timeout_s: how long a fork waits for the platform to show every copy.
    :param client_kwargs: further ``MemoryClient`` arguments (e.g. ``client=`` an ``httpx.Client``).
    """

    provider = HOSTED_PROVIDER
    exact_vectors = False

    def __init__(
        self,
        api_key: str | None = None,
        host: str | None = None,
        *,
        page_size: int = 100,
        settle_timeout_s: float = 120.0,
        poll_interval_s: float = 2.0,
        **client_kwargs: Any,
    ) -> None:
        self.client_kwargs = {"api_key": api_key, "host": host, **client_kwargs}
        self.host = host or DEFAULT_HOST
        self.page_size = page_size
        self.settle_timeout_s = settle_timeout_s
        self.poll_interval_s = poll_interval_s
        self._client: Any = None

    @property
    def collection(self) -> str:
        """The platform endpoint (``ForkResult.collection``)."""
        return self.host

    def client(self) -> Any:
        """``MemoryClient`` (built once; needs network access to the platform)."""
        if self._client is None:
            from mem0 import MemoryClient

            self._client = MemoryClient(**{k: v for k, v in self.client_kwargs.items() if v is not None})
        return self._client

    def check(self) -> str:
        """Build the ``MemoryClient`` (it pings the platform in its constructor)."""
        self.client()
        return f"Mem0 platform {self.host} reachable"

    # ------------------------------------------------------------------------------------- reads
    def export(self, filters: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        """Yield every memory of a namespace from the platform (paged ``get_all``)."""
        client = self.client()
        page = 1
        while True:
            got = client.get_all(filters=hosted_filters(filters), page=page, page_size=self.page_size)
            results = got.get("results", []) if isinstance(got, dict) else got
            if not results:
                return
            yield from results
            has_next = got.get("next") if isinstance(got, dict) and "next" in got else len(results) >= self.page_size
            if not has_next:
                return
            page += 1

    def payloads(self, namespace: Mem0Namespace) -> dict[str, dict[str, Any]]:
        """``{memory id: payload}`` of a namespace (see :func:`hosted_payload`)."""
        return {str(r["id"]): hosted_payload(r) for r in self.export(namespace.fields())}

    def count(self, namespace: Mem0Namespace) -> int:
        """Number of memories in a namespace."""
        return len(self.payloads(namespace))

    def list_memories(self, namespace: Mem0Namespace, *, with_vectors: bool = False) -> list[StoredMemory]:
        """Every memory of a namespace (never with vectors: the platform does not return them)."""
        return [StoredMemory(id=i, payload=p) for i, p in self.payloads(namespace).items()]

    def digests(self, namespace: Mem0Namespace) -> tuple[dict[str, bytes], dict[str, dict[str, Any]]]:
        """Per-memory digests over id, hash and ``updated_at`` (:func:`hosted_digest`), and the payloads."""
        payloads = self.payloads(namespace)
        return {i: hosted_digest(i, p) for i, p in payloads.items()}, payloads

    def _manifest(self, target: Mem0Namespace, state: HostedForkState) -> ForkManifest:
        return ForkManifest(
            fork_id=state.fork_id,
            source=state.source,
            target=target,
            count=state.count,
            source_fingerprint=state.source_fingerprint,
            history_rows=0,
            forked_at=state.forked_at,
            snapshot_parts=0,
            store=self.provider,
            collection=self.collection,
        )

    def _complete_state(self, payloads: Mapping[str, Mapping[str, Any]]) -> HostedForkState | None:
        complete = [s for s in hosted_fork_states(payloads).values() if s.complete]
        if len(complete) > 1:
            raise ForkConflictError(f"namespace holds {len(complete)} complete forks ({[s.fork_id for s in complete]})")
        return complete[0] if complete else None

    def read_manifest(self, target: Mem0Namespace) -> ForkManifest | None:
        """The fork in ``target`` as a manifest (from its copies' metadata), or None without a complete fork."""
        state = self._complete_state(self.payloads(target))
        return self._manifest(target, state) if state else None

    # ------------------------------------------------------------------------------------ writes
    def _delete(self, memory_ids: Sequence[str]) -> None:
        ids = list(memory_ids)
        for i in range(0, len(ids), BATCH_DELETE_MAX):
            self.client().batch_delete([{"memory_id": m} for m in ids[i : i + BATCH_DELETE_MAX]])

    def _ids_of_fork(self, target: Mem0Namespace, fork_id: str) -> list[str]:
        return sorted(i for i, p in self.payloads(target).items() if p.get(FORK_ID_FIELD) == fork_id)

    def _await_copies(self, target: Mem0Namespace, fork_id: str, count: int) -> None:
        deadline = time.monotonic() + self.settle_timeout_s
        while True:
            present = len(self._ids_of_fork(target, fork_id))
            if present >= count:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"fork {fork_id}: the platform shows {present} of {count} copies in {target} after "
                    f"{self.settle_timeout_s:.0f} s (settle_timeout_s in the connection extra raises the wait)"
                )
            time.sleep(self.poll_interval_s)

    def fork(
        self,
        source: Mem0Namespace,
        target: Mem0Namespace,
        *,
        fork_id: str,
        journal: Any = None,
        on_source_read: Callable[[], None] | None = None,
    ) -> ForkResult:
        """Export ``source`` and re-add every memory into ``target`` (``infer=False``; the platform re-embeds;
        a memory journal is not used: there is no pre-copy to complete).

        Same contract as the vector-store fork: a complete fork of the same ``fork_id`` and source is a
        no-op, a target holding anything else is refused, leftovers of this ``fork_id`` are removed first,
        and on error the copies visible on the platform are deleted before re-raising.
        """
        started = time.monotonic()
        existing = self.payloads(target)
        state = self._complete_state(existing)
        if state is not None:
            return completed_fork(self._manifest(target, state), source, target, fork_id, time.monotonic() - started)
        refuse_foreign(target, fork_id, existing)
        if existing:
            log.warning("removing %d leftovers of an interrupted fork %s in %s", len(existing), fork_id, target)
            self._delete(list(existing))

        timings = {"check": time.monotonic() - started}
        mark = time.monotonic()
        digests, payloads = self.digests(source)
        if on_source_read is not None:
            on_source_read()
        fingerprint = combine_digests(digests.values())
        forked_at = datetime.now(UTC).isoformat()
        timings["read"] = time.monotonic() - mark
        try:
            mark = time.monotonic()
            client = self.client()
            for mid, payload in payloads.items():
                client.add(
                    **hosted_add_request(
                        mid,
                        payload,
                        source=source,
                        target=target,
                        fork_id=fork_id,
                        forked_at=forked_at,
                        source_digest=digests[mid],
                        source_fingerprint=fingerprint,
                        count=len(payloads),
                    )
                )
            timings["write"] = time.monotonic() - mark
            mark = time.monotonic()
            self._await_copies(target, fork_id, len(payloads))
            timings["marker"] = time.monotonic() - mark
        except BaseException:
            log.error("fork %s into %s failed: deleting the copies the platform shows", fork_id, target)
            try:
                self._delete(self._ids_of_fork(target, fork_id))
            except Exception as exc:  # the original error matters more; the retry removes leftovers
                log.error("cleanup of fork %s in %s failed: %s", fork_id, target, exc)
            raise
        return ForkResult(
            fork_id=fork_id,
            source=source,
            target=target,
            count=len(payloads),
            source_fingerprint=fingerprint,
            history_rows=0,
            forked_at=forked_at,
            duration_s=time.monotonic() - started,
            noop=False,
            store=self.provider,
            collection=self.collection,
            timings_s={k: round(v, 6) for k, v in timings.items()},
        )

    def precopy(
        self, source: Mem0Namespace, target: Mem0Namespace, *, fork_id: str, journal: Any = None
    ) -> ForkResult:
        """No pre-copy on the platform: it exposes no content digest a delta could trust (it re-embeds and
        assigns its own ids and hashes), so the fork at the cut copies in full. Returns a no-op result."""
        log.warning("hosted Mem0: no pre-copy of %s; the fork %s copies in full at the cut", source, fork_id)
        return ForkResult(
            fork_id=fork_id,
            source=source,
            target=target,
            count=0,
            source_fingerprint="",
            history_rows=0,
            forked_at=datetime.now(UTC).isoformat(),
            duration_s=0.0,
            noop=True,
            store=self.provider,
            collection=self.collection,
            kind="precopy",
        )

    def drop(self, namespace: Mem0Namespace, *, keep: bool = False) -> DropResult:
        """Delete a fork namespace on the platform, by id; refuses a namespace that is not a fork."""
        payloads = self.payloads(namespace)
        state = self._complete_state(payloads)
        fork_id = fork_id_to_drop(namespace, state.fork_id if state else None, payloads)
        if fork_id is None:
            return DropResult(namespace=namespace, fork_id=None, dropped=0, history_rows=0, existed=False)
        if keep:
            return DropResult(namespace=namespace, fork_id=fork_id, dropped=0, history_rows=0, kept=True, existed=True)
        self._delete(list(payloads))
        return DropResult(namespace=namespace, fork_id=fork_id, dropped=len(payloads), history_rows=0, existed=True)

    def fork_baseline(self, target: Mem0Namespace) -> ForkBaseline:
        """What the fork's copies in ``target`` recorded about the source (digests, fingerprint, count).

        Copies the replay deleted leave a partial record: the source memories they stood for then show
        as added, and the baseline's note says so.
        """
        states = hosted_fork_states(self.payloads(target))
        complete = [s for s in states.values() if s.complete]
        if len(complete) == 1:
            state: HostedForkState | None = complete[0]
        else:  # copies deleted by the replay: compare with what is left (and say so)
            state = max(states.values(), key=lambda s: s.present) if states else None
        if state is None:
            raise NoForkError(
                f"no fork copies in {target}: the fork never ran, or it copied an empty source namespace (on "
                "the hosted backend an empty fork leaves no record naming its source, so there is nothing to "
                "verify against; the fork task's XCom shows count=0)"
            )
        return ForkBaseline(
            fork_id=state.fork_id,
            source=state.source,
            target=target,
            count=state.count,
            fingerprint=state.source_fingerprint,
            snapshot=state.snapshot,
            note=""
            if state.complete
            else f"{state.count - state.present} fork copies missing from {target}: their sources may show as added",
        )

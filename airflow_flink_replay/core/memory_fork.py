"""Pure model of a Mem0 namespace fork: namespaces, fingerprints, provenance, ids and results.

No airflow, no pyflink, no mem0 import: the memory fork's backends (:mod:`airflow_flink_replay.memory.oss`,
:mod:`airflow_flink_replay.memory.hosted`) read and write the stores and call these functions; the hook and the
operators check arguments with it and push the result models to XCom.

Flink Agents keeps long-term memory in Mem0 with ``user_id`` = the job identifier, ``agent_id`` = the
key text and ``run_id`` = the memory-set name, all in one collection. A *namespace* is any combination
of those three fields; a fork copies every memory of a source namespace into a target namespace by
rewriting the fields the namespace names (usually ``user_id`` only) and adding provenance fields.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import uuid
import zlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: mem0's scope fields, in the order Flink Agents uses them.
SCOPE_FIELDS: tuple[str, ...] = ("user_id", "agent_id", "run_id")

#: Provenance fields added to every forked memory's payload (flat scalars: Chroma metadata is flat).
FORK_ID_FIELD = "afr_fork_id"
FORK_SOURCE_ID_FIELD = "afr_fork_source_id"
FORK_SOURCE_NAMESPACE_FIELD = "afr_fork_source_namespace"
FORKED_AT_FIELD = "afr_forked_at"
PROVENANCE_FIELDS: tuple[str, ...] = (
    FORK_ID_FIELD,
    FORK_SOURCE_ID_FIELD,
    FORK_SOURCE_NAMESPACE_FIELD,
    FORKED_AT_FIELD,
)

#: Fields of the fork's completion marker (a record in the same collection WITHOUT user_id/agent_id/
#: run_id, so mem0's get_all/search never return it). ``afr_marker`` holds the target namespace key.
MARKER_FIELD = "afr_marker"
MARKER_KIND_FIELD = "afr_marker_kind"
MARKER_KIND_MANIFEST = "manifest"
MARKER_KIND_SNAPSHOT = "snapshot"
MARKER_MANIFEST_FIELD = "afr_manifest"
MARKER_SNAPSHOT_FIELD = "afr_snapshot"
MARKER_PART_FIELD = "afr_part"
MARKER_FORK_ID_FIELD = "afr_marker_fork_id"
#: A pre-copy's marker (:class:`PrecopyManifest` in ``afr_manifest``) and its content-digest snapshot parts.
MARKER_KIND_PRECOPY = "precopy"
MARKER_KIND_PRECOPY_SNAPSHOT = "precopy_snapshot"

#: Namespace for uuid5 ids derived by the fork (stable across processes and retries).
_ID_NAMESPACE = uuid.UUID("6f1c3a52-9a57-4c1e-9d0e-4f0b8d9e2a61")
#: Snapshot chunk size in characters (one marker record each; Chroma accepts ~1 MB per metadata value).
SNAPSHOT_CHUNK_CHARS = 400_000
#: Bytes of each memory's digest kept in the fork-time snapshot (64 bits: collisions are negligible).
SNAPSHOT_DIGEST_BYTES = 8
#: Bytes of each memory's content digest kept by a pre-copy (128 bits: the delta trusts equal digests).
CONTENT_DIGEST_BYTES = 16
#: A pre-copy records per memory its content digest followed by the first bytes of its fingerprint digest.
PRECOPY_ENTRY_BYTES = CONTENT_DIGEST_BYTES + SNAPSHOT_DIGEST_BYTES


class Mem0Namespace(BaseModel):
    """A Mem0 scope: any non-empty combination of ``user_id``, ``agent_id`` and ``run_id``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None

    @field_validator("user_id", "agent_id", "run_id")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank: give a value or leave the field out")
        return value

    @model_validator(mode="after")
    def _at_least_one(self) -> Mem0Namespace:
        if not self.fields():
            raise ValueError(
                "a Mem0 namespace needs at least one of user_id, agent_id, run_id "
                "(Flink Agents: user_id = the job identifier)"
            )
        return self

    @classmethod
    def coerce(cls, value: Mem0Namespace | Mapping[str, Any] | str, *, what: str = "namespace") -> Mem0Namespace:
        """Accept a model, a mapping, a JSON object string, or a bare string (taken as ``user_id``)."""
        if isinstance(value, Mem0Namespace):
            return value
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("{"):
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{what}: not valid JSON ({exc})") from exc
            else:
                value = {"user_id": text}
        if not isinstance(value, Mapping):
            raise ValueError(f"{what}: expected a mapping with user_id/agent_id/run_id, got {type(value).__name__}")
        unknown = sorted(set(value) - set(SCOPE_FIELDS))
        if unknown:
            raise ValueError(f"{what}: unknown field(s) {unknown}: a Mem0 namespace takes {list(SCOPE_FIELDS)}")
        try:
            return cls(**dict(value))
        except ValueError as exc:
            errors = getattr(exc, "errors", None)
            detail = (
                "; ".join(
                    (f"{e['loc'][0]}: " if e["loc"] else "") + str(e["msg"]).removeprefix("Value error, ")
                    for e in errors()
                )
                if errors
                else exc
            )
            raise ValueError(f"{what}: {detail}") from exc

    def fields(self) -> dict[str, str]:
        """The set scope fields, e.g. ``{"user_id": "job-1"}`` (also mem0's ``filters=``)."""
        return {k: v for k in SCOPE_FIELDS if (v := getattr(self, k)) is not None}

    def key(self) -> str:
        """Canonical string of the namespace (sorted JSON), used in markers and ids."""
        return json.dumps(self.fields(), sort_keys=True, separators=(",", ":"))

    def matches(self, payload: Mapping[str, Any]) -> bool:
        """True when a memory payload belongs to this namespace."""
        return all(payload.get(k) == v for k, v in self.fields().items())

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.fields().items())


def check_fork_pair(source: Mem0Namespace, target: Mem0Namespace) -> None:
    """Refuse a fork whose target cannot be a rewrite of the source (clear error naming the fix)."""
    if set(source.fields()) != set(target.fields()):
        raise ValueError(
            f"target namespace must set the same fields as the source ({sorted(source.fields())}), "
            f"got {sorted(target.fields())}: e.g. source user_id=<job id> → target user_id=replay-<run>"
        )
    if source == target:
        raise ValueError(f"target namespace equals the source ({source}): choose a replay namespace")


# --------------------------------------------------------------------------------------------- ids
def _key(ns: Mem0Namespace | str) -> str:
    return ns if isinstance(ns, str) else ns.key()


def fork_memory_id(fork_id: str, target: Mem0Namespace | str, source_memory_id: str) -> str:
    """The forked memory's id: uuid5 of (fork id, target, source id) — never a source id, stable on retry.

    ``target`` is the namespace or its :meth:`Mem0Namespace.key` (precomputed in loops).
    """
    return str(uuid.uuid5(_ID_NAMESPACE, f"memory\x1f{fork_id}\x1f{_key(target)}\x1f{source_memory_id}"))


def fork_history_id(fork_id: str, target: Mem0Namespace | str, source_history_id: str) -> str:
    """The copied history row's id (stable on retry)."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"history\x1f{fork_id}\x1f{_key(target)}\x1f{source_history_id}"))


def marker_id(target: Mem0Namespace, part: int | None = None) -> str:
    """Id of the completion marker of a fork into ``target`` (``part`` for snapshot chunks)."""
    suffix = "" if part is None else f"\x1fpart{part}"
    return str(uuid.uuid5(_ID_NAMESPACE, f"marker\x1f{target.key()}{suffix}"))


def precopy_marker_id(target: Mem0Namespace, part: int | None = None) -> str:
    """Id of the pre-copy marker of a fork into ``target`` (``part`` for its content-digest chunks)."""
    suffix = "" if part is None else f"\x1fpart{part}"
    return str(uuid.uuid5(_ID_NAMESPACE, f"precopy\x1f{target.key()}{suffix}"))


# ------------------------------------------------------------------------------------ fingerprints
def _vector_bytes(vector: Sequence[float] | None) -> bytes:
    """Vector as little-endian float32 (stores keep float32; doubles read back compare equal)."""
    if vector is None:
        return b""
    values = [float(v) for v in vector]
    return struct.pack(f"<{len(values)}f", *values)


def memory_digest(memory_id: str, payload: Mapping[str, Any], vector: Sequence[float] | None) -> bytes:
    """SHA-256 over a memory's id, text hash, ``updated_at`` and stored vector."""
    h = hashlib.sha256()
    for part in (memory_id, payload.get("hash") or "", payload.get("updated_at") or ""):
        h.update(str(part).encode("utf-8"))
        h.update(b"\x1f")
    h.update(_vector_bytes(vector))
    return h.digest()


def _vector_part(vector: Any) -> bytes:
    """Every vector a record carries, canonically: a dense list as float32, named vectors by name, sparse
    vectors (``indices``/``values``) as both."""
    if vector is None:
        return b"-"
    if isinstance(vector, Mapping):
        return b"".join(b"%s\x1e%s\x1d" % (str(k).encode(), _vector_part(v)) for k, v in sorted(vector.items()))
    indices, values = getattr(vector, "indices", None), getattr(vector, "values", None)
    if indices is not None and values is not None:
        ints = [int(i) for i in indices]
        return b"sparse" + struct.pack(f"<{len(ints)}q", *ints) + _vector_bytes(list(values))
    return b"dense" + _vector_bytes(vector.tolist() if hasattr(vector, "tolist") else vector)


def content_digest(memory_id: str, payload: Mapping[str, Any], vector: Any, document: str | None = None) -> bytes:
    """SHA-256 over **everything** a fork copies of one record: id, the whole payload (canonical JSON),
    the document and every stored vector (bit for bit as float32).

    A pre-copy records it per source memory and the delta round compares it with the source at the cut:
    any change to any copied byte changes it, whatever the clocks say (unlike ``updated_at``, which two
    writers with skewed clocks or two writes in one timestamp tick can leave equal).
    """
    h = hashlib.sha256()
    h.update(str(memory_id).encode("utf-8"))
    h.update(b"\x1f")
    h.update(json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode("utf-8"))
    h.update(b"\x1f" + (b"-" if document is None else b"d" + document.encode("utf-8")) + b"\x1f")
    h.update(_vector_part(vector))
    return h.digest()


#: The digest sum is taken modulo 2**256 (a SHA-256 digest's range).
_SUM_MODULUS = 1 << 256


def digest_sum(digests: Iterable[bytes]) -> int:
    """The sum of the per-memory digests (as big-endian integers) modulo 2**256: order-independent and
    updatable — a changed memory is its old digest taken out and its new one added, without the others."""
    return sum(int.from_bytes(d, "big") for d in digests) % _SUM_MODULUS


def fingerprint_of(total: int, count: int) -> str:
    """The namespace fingerprint of a :func:`digest_sum` over ``count`` memories (hex SHA-256)."""
    return hashlib.sha256((total % _SUM_MODULUS).to_bytes(32, "big") + f"n={count}".encode()).hexdigest()


def combine_digests(digests: Iterable[bytes]) -> str:
    """Order-independent fingerprint of a namespace: :func:`fingerprint_of` the :func:`digest_sum` of its
    per-memory digests (an additive multiset hash over SHA-256 digests, so a delta can update it)."""
    listed = list(digests)
    return fingerprint_of(digest_sum(listed), len(listed))


class MemoryFingerprint(BaseModel):
    """Fingerprint of one namespace at one instant."""

    namespace: Mem0Namespace
    count: int
    digest: str = Field(description="order-independent SHA-256 over id, hash, updated_at and vector")
    computed_at: datetime


def encode_snapshot(digests: Mapping[str, bytes], digest_bytes: int = SNAPSHOT_DIGEST_BYTES) -> str:
    """Compact text form of ``{memory id: digest}`` (digests truncated to ``digest_bytes``, zlib, base64)."""
    raw = json.dumps({k: v[:digest_bytes].hex() for k, v in sorted(digests.items())}, separators=(",", ":")).encode()
    return base64.b64encode(zlib.compress(raw, 1)).decode("ascii")


def decode_snapshot(text: str) -> dict[str, str]:
    """Inverse of :func:`encode_snapshot`: ``{memory id: truncated digest hex}``."""
    return json.loads(zlib.decompress(base64.b64decode(text)))


def split_chunks(text: str, size: int = SNAPSHOT_CHUNK_CHARS) -> list[str]:
    """Split ``text`` into chunks of at most ``size`` characters (at least one chunk)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def diff_snapshots(before: Mapping[str, str], after: Mapping[str, bytes]) -> tuple[list[str], list[str], list[str]]:
    """Compare the fork-time snapshot with current digests: ``(added, removed, changed)`` ids, sorted."""
    now = {k: v[:SNAPSHOT_DIGEST_BYTES].hex() for k, v in after.items()}
    added = sorted(set(now) - set(before))
    removed = sorted(set(before) - set(now))
    changed = sorted(k for k in set(now) & set(before) if now[k] != before[k])
    return added, removed, changed


# -------------------------------------------------------------------------------------- rewriting
def has_provenance(payload: Mapping[str, Any]) -> bool:
    """True when the payload was written by a fork of this project."""
    return bool(payload.get(FORK_ID_FIELD))


def rewrite_payload(
    payload: Mapping[str, Any],
    *,
    source_id: str,
    source: Mem0Namespace | str,
    target: Mem0Namespace | Mapping[str, str],
    fork_id: str,
    forked_at: str,
) -> dict[str, Any]:
    """Forked payload: scope fields rewritten to ``target``, everything else kept, provenance added.

    ``source`` may be given as its key and ``target`` as its fields (precomputed in loops).
    """
    out = dict(payload)
    out.update(target.fields() if isinstance(target, Mem0Namespace) else target)
    out[FORK_ID_FIELD] = fork_id
    out[FORK_SOURCE_ID_FIELD] = source_id
    out[FORK_SOURCE_NAMESPACE_FIELD] = _key(source)
    out[FORKED_AT_FIELD] = forked_at
    return out


def strip_provenance(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Payload without this project's provenance fields."""
    return {k: v for k, v in payload.items() if k not in PROVENANCE_FIELDS}


# ------------------------------------------------------------------------------------------ results
class ForkManifest(BaseModel):
    """What the completion marker of a fork records (stored as JSON in the marker's payload)."""

    fork_id: str
    source: Mem0Namespace
    target: Mem0Namespace
    count: int
    source_fingerprint: str
    history_rows: int
    forked_at: str
    snapshot_parts: int
    store: str
    collection: str


class JournalPosition(BaseModel):
    """Where a memory journal (:mod:`airflow_flink_replay.memory.journal`) stood: its topic's end offsets."""

    topic: str
    offsets: dict[int, int]
    noted_at: str = Field(description="when the position was noted (ISO 8601, UTC), before the source was read")


class PrecopyManifest(BaseModel):
    """What a pre-copy's marker records: the copies in ``target`` are ``source`` as read at ``precopied_at``,
    one :func:`content_digest` per source memory in the snapshot parts (what the delta round diffs against)."""

    fork_id: str
    source: Mem0Namespace
    target: Mem0Namespace
    count: int
    history_rows: int
    precopied_at: str
    snapshot_parts: int
    store: str
    collection: str
    digest_sum: str | None = Field(
        default=None, description="hex :func:`digest_sum` of the source's fingerprint digests as read (a journal cut "
        "updates it instead of reading every memory)"
    )
    journal: JournalPosition | None = Field(
        default=None, description="the memory journal's end offsets noted before the source was read (the journal "
        "cut re-reads the memories named after them)"
    )


class ForkResult(BaseModel):
    """Result of a fork (pushed to XCom as ``model_dump(mode="json")``)."""

    fork_id: str
    source: Mem0Namespace
    target: Mem0Namespace
    count: int
    source_fingerprint: str
    history_rows: int
    forked_at: str
    duration_s: float
    noop: bool = Field(default=False, description="True when a complete fork of the same run already existed")
    store: str
    collection: str
    timings_s: dict[str, float] = Field(
        default_factory=dict,
        description="seconds per phase: check, read (incl. digests), write (time blocked on writes), history, marker",
    )
    kind: Literal["fork", "precopy"] = Field(
        default="fork", description="fork: a complete fork (manifest written); precopy: a pre-copy of the source"
    )
    delta: bool = Field(default=False, description="True when only the changes since a pre-copy were copied")
    added: int = Field(default=0, description="delta: source memories new since the pre-copy (copied)")
    updated: int = Field(default=0, description="delta: source memories changed since the pre-copy (copied again)")
    removed: int = Field(default=0, description="delta: source memories gone since the pre-copy (copies deleted)")
    precopied_at: str | None = Field(default=None, description="delta: when the pre-copy it completed was read")
    journal: bool = Field(
        default=False, description="delta: the changes were found in production's memory journal (only the memories "
        "it names were read), not by reading the whole namespace"
    )


class DropResult(BaseModel):
    """Result of dropping a fork namespace."""

    namespace: Mem0Namespace
    fork_id: str | None
    dropped: int = Field(description="memories deleted (forked and written by the replay)")
    history_rows: int
    kept: bool = Field(default=False, description="True when keep=True left the fork in place for debugging")
    existed: bool


class UntouchedReport(BaseModel):
    """Post-replay check of the source (production) namespace against the fork-time snapshot.

    Every change since the fork is listed. A change is a **replay leak** when the changed memory carries
    fork provenance (a fork's payload landed in production) or when production was declared stopped
    (``production_writes_expected=False``: then nothing but the replay could have written). Otherwise
    changes are attributed to **production** itself (it resumed after the savepoint and keeps writing)
    and reported, not failed.
    """

    fork_id: str
    source: Mem0Namespace
    target: Mem0Namespace
    fingerprint_at_fork: str
    fingerprint_now: str
    count_at_fork: int
    count_now: int
    unchanged: bool
    added: list[str]
    removed: list[str]
    changed: list[str]
    replay_leak_ids: list[str]
    production_change_ids: list[str]
    production_writes_expected: bool
    ok: bool
    reason: str

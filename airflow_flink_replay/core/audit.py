"""Audit records of resource calls attempted by a replayed agent (one JSON line each).

Written inside Flink by the resource proxies (:mod:`airflow_flink_replay.flink.proxies`) and the
unmediated-call guard (:mod:`airflow_flink_replay.flink.unmediated`) through :func:`append_audit`, and read
by the comparison step. Pure: pydantic only.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "PREVIEW_CHARS",
    "REPLAY_NAMESPACE",
    "AuditRecord",
    "append_audit",
    "args_digest",
    "args_preview",
    "hash_names",
    "is_key_hash",
    "java_bytes_hash",
    "java_string_hash",
    "key_hashes",
    "key_text_of",
    "masked",
    "name_hashed_keys",
    "read_audit",
    "typed_key_hashes",
]

#: Length of ``args_preview`` (long enough to show a tool's arguments whole, so a change can be shown as a diff).
PREVIEW_CHARS = 600

#: What a replay's own namespace (its job identifier, Mem0's ``user_id``) reads as in audited arguments: each
#: variant has its own fork, so the name differs between variants although the call is the same.
REPLAY_NAMESPACE = "<replay-namespace>"

#: Argument names whose values are masked in previews (Airflow's sensitive field names, without the bare
#: substring ``token``, which would hide a chat model's ``max_tokens``).
_SENSITIVE = re.compile(
    r"password|passwd|passphrase|secret|api[_-]?key|access[_-]?token|auth[_-]?token|^token$|authorization"
    r"|private[_-]?key|credential|keyfile_dict|service_account",
    re.I,
)
_MASK = "***"

ResourceTypeName = Literal["chat_model", "tool", "vector_store", "embedding_model", "unmediated"]
DecisionName = Literal["allow", "record", "replay", "block"]
#: ``replayed``: production's recorded result was served (decision ``replay``); an unmatched ``replay`` call has
#: the outcome of its :attr:`AuditRecord.fallback` decision.
OutcomeName = Literal["ok", "error", "recorded", "replayed", "blocked"]


def masked(value: Any) -> Any:
    """``value`` with the value of every mapping entry whose name looks secret (password, token, api_key, ...)
    replaced by ``***``, at any depth."""
    if isinstance(value, Mapping):
        return {k: _MASK if isinstance(k, str) and _SENSITIVE.search(k) else masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [masked(v) for v in value]
    return value


def _canonical(args: Any, kwargs: Any, replace: Mapping[str, str] | None = None) -> str:
    text = json.dumps({"args": args, "kwargs": kwargs}, sort_keys=True, default=str, ensure_ascii=False)
    for token, placeholder in (replace or {}).items():
        if token:
            text = text.replace(json.dumps(token, ensure_ascii=False)[1:-1], placeholder)
    return text


def args_digest(args: Any = (), kwargs: Any = None, replace: Mapping[str, str] | None = None) -> str:
    """SHA-256 hex of the canonical JSON of the call arguments (objects by ``str``), with each ``replace`` key
    (e.g. the replay's own namespace) read as its value, so the same call digests the same in every variant."""
    return hashlib.sha256(_canonical(list(args), kwargs or {}, replace).encode("utf-8")).hexdigest()


def args_preview(
    args: Any = (), kwargs: Any = None, limit: int = PREVIEW_CHARS, replace: Mapping[str, str] | None = None
) -> str:
    """Truncated canonical JSON of the call arguments, secrets masked (:func:`masked`), ``replace`` applied."""
    text = _canonical(masked(list(args)), masked(kwargs or {}), replace)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class AuditRecord(BaseModel):
    """One attempted resource call in a replay."""

    variant: str
    key: str = Field(description="The agent key the call was made for ('' when unknown).")
    stage: str | None = Field(
        default=None, description="the pipeline stage whose agent made the call (None: a job of one agent)"
    )
    resource_type: ResourceTypeName
    resource_name: str
    method: str
    args_digest: str
    args_preview: str
    decision: DecisionName
    outcome: OutcomeName
    error: str | None = None
    fallback: DecisionName | None = Field(
        default=None,
        description="decision 'replay' with no recorded call matching: the decision applied instead (unmatched)",
    )
    changed: bool = Field(
        default=False,
        description="the candidate changed this resource (the agent check's fingerprints): its call was never "
        "served production's cassette",
    )
    matched: Literal["exact", "arguments"] | None = Field(
        default=None,
        description="how a replayed call matched production's recorded call: 'exact' (the same arguments) or "
        "'arguments' (the same identifying arguments, free text scored: similarity); None: not served a recording",
    )
    similarity: float | None = Field(
        default=None, description="matched 'arguments': how alike the free text was to production's (0..1)"
    )
    identity_digest: str | None = Field(
        default=None,
        description="when some arguments of this resource are free text (core.call_match): the digest of the "
        "identifying ones, which the side-effect comparison compares exactly (free text apart)",
    )
    ts: float = Field(default_factory=time.time)
    id: str = Field(
        default_factory=lambda: uuid.uuid4().hex,
        description="unique to this record: a copy written twice (a producer's retry) is dropped when read back",
    )

    @property
    def unmatched(self) -> bool:
        """A ``replay`` call production's cassette had no result for."""
        return self.fallback is not None

    @classmethod
    def for_call(
        cls,
        *,
        variant: str,
        key: str,
        resource_type: str,
        resource_name: str,
        method: str,
        args: Any,
        kwargs: Any,
        decision: str,
        outcome: str,
        error: str | None = None,
        replace: Mapping[str, str] | None = None,
        fallback: str | None = None,
        changed: bool = False,
        matched: str | None = None,
        similarity: float | None = None,
        identity_digest: str | None = None,
        stage: str | None = None,
    ) -> AuditRecord:
        """Build a record, digesting and previewing the arguments (``replace``: see :func:`args_digest`)."""
        return cls(
            variant=variant,
            key=key,
            stage=stage or None,
            resource_type=resource_type,  # type: ignore[arg-type]
            resource_name=resource_name,
            method=method,
            args_digest=args_digest(args, kwargs, replace),
            args_preview=args_preview(args, kwargs, replace=replace),
            decision=decision,  # type: ignore[arg-type]
            outcome=outcome,  # type: ignore[arg-type]
            error=error,
            fallback=fallback,  # type: ignore[arg-type]
            changed=changed,
            matched=matched,  # type: ignore[arg-type]
            similarity=similarity,
            identity_digest=identity_digest,
        )


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (32-bit signed) of ``text``."""
    data = text.encode("utf-16-le")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "little")) & 0xFFFFFFFF
    return _int32(h)


def java_bytes_hash(data: bytes) -> int:
    """Java's ``Arrays.hashCode(byte[])`` (32-bit signed) of ``data`` (Java bytes are signed)."""
    h = 1
    for b in data:
        h = (31 * h + (b - 256 if b > 127 else b)) & 0xFFFFFFFF
    return _int32(h)


def key_text_of(key: Any) -> str:
    """The text a key is shown by — in audit records, cassette entries and (UTF-8 encoded) the capture topic's
    record keys: text as is, bytes decoded as UTF-8 (undecodable bytes escaped), numbers as their decimal text,
    anything else as sorted JSON (objects by ``str``)."""
    if isinstance(key, str):
        return key
    if isinstance(key, bytes | bytearray):
        return bytes(key).decode("utf-8", "backslashreplace")
    if isinstance(key, bool | int | float):
        return str(key)
    return json.dumps(key, sort_keys=True, default=str)


#: What the Flink Agents 0.2.0 runtime passes to the per-action context switch instead of the key: the
#: ``hashCode`` of the key as a one-field ``Row`` (PyFlink's ``key_by`` keys by ``Row(key)``), which is the
#: hash of the key's Flink value + 62 (checked on Flink 2.2's ``Row``). The value is the key pickled
#: (``Types.PICKLED_BYTE_ARRAY``, PyFlink's default and Flink Agents' own: cloudpickle, protocol 5) for
#: ``key_type`` None, a Java ``String`` / ``Long`` / ``Integer`` for ``"string"`` / ``"long"`` / ``"int"``.
#: The offsets 0 and 31 (the value's own hash, and that of an earlier reading of the row) are kept as well:
#: a hash only names a key the task learnt, so an extra candidate costs nothing.
_ROW_OFFSETS = (0, 31, 62)


def _row_hashes(value_hashes: Iterable[int]) -> tuple[int, ...]:
    out: dict[int, None] = {}
    for h in value_hashes:
        for offset in _ROW_OFFSETS:
            out[_int32(h + offset)] = None
    return tuple(out)


def key_hashes(text: str) -> tuple[int, ...]:
    """The key hashes the Flink Agents runtime may pass for a text key ``text`` instead of the key: of the
    key as a Java ``String`` (``key_type="string"``, the factory form) and as pickled text (``key_type`` None),
    each as the one-field key row's hash and two other offsets (:data:`_ROW_OFFSETS`); the ``String`` ones
    first."""
    return _row_hashes((java_string_hash(text), java_bytes_hash(pickle.dumps(text, protocol=5))))


def typed_key_hashes(key: Any, pickled: bytes | None = None) -> tuple[int, ...]:
    """The key hashes the runtime may pass for the typed key ``key`` (what a job's key selector returned), for
    any of the key types a job definition may declare: pickled (``pickled``, the key's bytes as PyFlink
    pickles it; else ``pickle`` protocol 5), and for text a ``String``, for an integer a ``Long`` and an
    ``Integer``, for bytes a ``byte[]``."""
    values: list[int] = []
    if pickled is None:
        try:
            pickled = pickle.dumps(key, protocol=5)
        except Exception:  # an unpicklable key cannot be a pickled Flink key either
            pickled = None
    if pickled is not None:
        values.append(java_bytes_hash(pickled))
    if isinstance(key, str):
        values.append(java_string_hash(key))
    elif isinstance(key, int) and not isinstance(key, bool):
        if -(1 << 63) <= key < (1 << 63):
            values.append(_int32(key ^ ((key & 0xFFFFFFFFFFFFFFFF) >> 32)))  # Long.hashCode
        if -(1 << 31) <= key < (1 << 31):
            values.append(key)  # Integer.hashCode
    elif isinstance(key, bytes | bytearray):
        values.append(java_bytes_hash(bytes(key)))
    return _row_hashes(values)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= (1 << 31) else value


def name_hashed_keys(keys: set[str]) -> dict[str, str]:
    """For the keys of ``keys`` that are a key hash as text (an action restored in flight from a savepoint runs
    before its key's next input, so its audit names the hash), the key text among ``keys`` with that hash —
    when exactly one has it. Which calls get the hash depends on timing (did the task see the key's input
    first?); naming them after the fact makes the audits of variants replayed from one savepoint comparable."""
    names = hash_names(keys)
    return {text: names[int(text)] for text in keys if is_key_hash(text) and int(text) in names}


def hash_names(keys: Iterable[str]) -> dict[int, str]:
    """Key hash -> the one text key of ``keys`` with that hash (:func:`key_hashes`; a hash two keys have names
    neither). Keys that read as numbers are left out: an integer key's hashes are integers close to it, so
    they would name other integer keys."""
    found: dict[int, set[str]] = {}
    for text in keys:
        if not is_key_hash(text):
            for h in key_hashes(text):
                found.setdefault(h, set()).add(text)
    return {h: next(iter(texts)) for h, texts in found.items() if len(texts) == 1}


def is_key_hash(text: str) -> bool:
    """Whether ``text`` reads as a key hash (an integer), i.e. a key whose text the job side did not know."""
    return text.lstrip("-").isdigit()


#: One writer at a time per process. Reentrant: writing opens a file, which the unmediated-call guard's
#: audit hook sees on the same thread.
_WRITE_LOCK = threading.RLock()


def append_audit(audit_dir: str | Path, record: AuditRecord) -> None:
    """Append ``record`` to ``<audit_dir>/audit-<variant>-<pid>.jsonl`` (one file per variant and process)."""
    path = Path(audit_dir) / f"audit-{record.variant}-{os.getpid()}.jsonl"
    line = record.model_dump_json() + "\n"
    with _WRITE_LOCK:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()


def read_audit(path: str | Path) -> Iterator[AuditRecord]:
    """Records of one audit JSONL file, or of every ``*.jsonl`` file in a directory."""
    p = Path(path)
    files = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
    for f in files:
        with f.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    yield AuditRecord.model_validate_json(line)

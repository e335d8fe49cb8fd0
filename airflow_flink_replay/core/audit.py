"""Audit records of resource calls attempted by a replayed agent (one JSON line each).

Written inside Flink by the resource proxies (:mod:`airflow_flink_replay.flink.proxies`) and the
unmediated-call guard (:mod:`airflow_flink_replay.flink.unmediated`) through :func:`append_audit`, and read
by the comparison step. Pure: pydantic only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
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
    "masked",
    "read_audit",
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
    ) -> AuditRecord:
        """Build a record, digesting and previewing the arguments (``replace``: see :func:`args_digest`)."""
        return cls(
            variant=variant,
            key=key,
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
        )


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (32-bit signed) of ``text``."""
    data = text.encode("utf-16-le")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "little")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def key_hashes(text: str) -> tuple[int, int, int]:
    """The key hashes the Flink Agents runtime may pass for the key ``text`` instead of the key: Java's
    ``String.hashCode`` and that value + 31 / + 62 (the 0.2.0 operator's one-field key row), 32-bit signed."""
    h = java_string_hash(text)
    return h, _int32(h + 31), _int32(h + 62)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= (1 << 31) else value


def name_hashed_keys(keys: set[str]) -> dict[str, str]:
    """For the keys of ``keys`` that are a key hash as text (an action restored in flight from a savepoint runs
    before its key's next input, so its audit names the hash), the key text among ``keys`` with that hash —
    when exactly one has it. Which calls get the hash depends on timing (did the task see the key's input
    first?); naming them after the fact makes the audits of variants replayed from one savepoint comparable."""
    by_hash: dict[int, set[str]] = {}
    for text in keys:
        if not _is_int(text):
            for h in key_hashes(text):
                by_hash.setdefault(h, set()).add(text)
    named: dict[str, str] = {}
    for text in keys:
        if _is_int(text) and len(found := by_hash.get(int(text), set())) == 1:
            named[text] = next(iter(found))
    return named


def _is_int(text: str) -> bool:
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

"""Cassettes: the mediated calls production made, recorded so a replay can be served the same results.

A cassette is production's side of a replay's mediated calls (tools, vector-store reads, chat models —
per resource, opt-in): one :class:`CassetteEntry` per call, with the resource, the method, the agent key
the call was made for, the digest of its normalised arguments (:func:`~airflow_flink_replay.core.audit.args_digest`,
the same digest the audit records), the call's position among production's calls for that key, the input
record whose processing made it, and the result. A replay serves a recorded result to the call that matches
it (:class:`Cassette`): same resource, method, key and argument digest, taken in production's order — the
model is Temporal's history replay and VCR-style cassettes. A call with no match left is *unmatched*: the
replay falls back to the resource's other policy decision for it.

Pure: pydantic only. The job side records and serves (``airflow_flink_replay.flink.cassette_io``). Results
travel as JSON with a codec naming how to rebuild them (:func:`encode_result`, :func:`decode_result`):
``json`` (the value as is), ``pydantic:<module>:<class>`` (a pydantic model: a chat message, a vector-store
query result), ``pydantic-list:<module>:<class>``.
"""

from __future__ import annotations

import importlib
import json
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_RECORDED",
    "Cassette",
    "CassetteEntry",
    "CassetteRecording",
    "CassetteSource",
    "CassetteWindow",
    "MatchKey",
    "decode_result",
    "encode_result",
]

#: A result larger than this (its JSON, in bytes) is recorded without its value (``result_dropped``): a
#: replay treats the call as unmatched rather than hold megabytes per call.
DEFAULT_MAX_RESULT_BYTES = 256 * 1024

#: What a replayed call must share with a recorded one: resource name, method, agent key, argument digest.
MatchKey = tuple[str, str, str, str]


class CassetteSource(BaseModel):
    """The input record production was processing when it made the call (its capture topic position)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: int = Field(ge=0)
    offset: int = Field(ge=0)


class CassetteEntry(BaseModel):
    """One mediated call production made, with its result (JSON) or why the result was not kept."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resource_type: str
    resource_name: str
    method: str
    key: str
    args_digest: str
    #: the call's place among production's recorded calls for ``key``: increasing in production's order (the
    #: recorder takes the wall clock in microseconds, kept increasing, so a restarted production continues it)
    seq: int = Field(ge=0)
    source: CassetteSource | None = None
    #: the result as JSON (rebuilt by the job side according to ``codec``)
    result: Any = None
    #: ``json`` (the value as is) or the name of the job side's codec (e.g. ``chat_message``)
    codec: str = "json"
    #: why ``result`` was not kept (e.g. larger than the cassette's limit): such a call replays as unmatched
    result_dropped: str | None = None
    #: the call raised in production: its exception type and message (replayed as unmatched: the replay calls
    #: or records it by its other decision, never raises production's error again)
    error: str | None = None

    @property
    def match_key(self) -> MatchKey:
        """Resource name, method, key and argument digest."""
        return (self.resource_name, self.method, self.key, self.args_digest)

    @property
    def servable(self) -> bool:
        """Whether a replay can be served this entry's result."""
        return self.result_dropped is None and self.error is None

    @classmethod
    def recorded(
        cls,
        *,
        resource_type: str,
        resource_name: str,
        method: str,
        key: str,
        args_digest: str,
        seq: int,
        result: Any,
        codec: str = "json",
        source: CassetteSource | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> CassetteEntry:
        """An entry for a call that returned ``result`` (already in its JSON form); a result that is not JSON or
        is larger than ``max_result_bytes`` is recorded as dropped, with the reason."""
        dropped = None
        try:
            size = len(json.dumps(result, sort_keys=True).encode("utf-8"))
            if size > max_result_bytes:
                dropped = f"result of {size} bytes is over the cassette's limit of {max_result_bytes}"
        except (TypeError, ValueError) as exc:
            dropped = f"result is not JSON ({type(exc).__name__}: {exc})"
        return cls(
            resource_type=resource_type, resource_name=resource_name, method=method, key=key,
            args_digest=args_digest, seq=seq, source=source, codec=codec,
            result=None if dropped else result, result_dropped=dropped,
        )


class Cassette:
    """Recorded calls indexed for replay: :meth:`take` serves each recorded result at most once, to the first
    replayed call with the same resource, method, key and argument digest, in production's order (``seq``).

    A replay that calls a tool twice with the same arguments for one key gets production's first result, then
    its second; a third such call, or a call with other arguments, is unmatched (``None``).
    """

    def __init__(self, entries: Iterable[CassetteEntry] = ()) -> None:
        self._queues: dict[MatchKey, deque[CassetteEntry]] = {}
        self.size = 0
        for entry in sorted(entries, key=lambda e: (e.key, e.seq)):
            self._queues.setdefault(entry.match_key, deque()).append(entry)
            self.size += 1
        self.served = 0
        self.unmatched = 0

    def take(self, resource_name: str, method: str, key: str, args_digest: str) -> CassetteEntry | None:
        """The next recorded call for this resource, method, key and argument digest, or ``None`` (counted as
        unmatched) when there is none left or it cannot be served (its result was dropped, or it raised)."""
        queue = self._queues.get((resource_name, method, key, args_digest))
        entry = queue.popleft() if queue else None
        if entry is None or not entry.servable:
            self.unmatched += 1
            return None
        self.served += 1
        return entry

    def remaining(self) -> int:
        """Recorded calls not taken (a replay that made fewer calls than production leaves some)."""
        return sum(len(q) for q in self._queues.values())

    @classmethod
    def from_jsonl(cls, lines: Iterable[str | bytes]) -> Cassette:
        """A cassette from JSON lines (blank lines skipped); a bad line raises ``ValueError`` naming its number."""
        entries = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                entries.append(CassetteEntry.model_validate_json(line))
            except ValueError as exc:
                raise ValueError(f"cassette line {number} is not a cassette entry: {exc}") from exc
        return cls(entries)

    @staticmethod
    def to_jsonl(entries: Iterable[CassetteEntry]) -> Iterator[str]:
        """One JSON line per entry (no newline)."""
        for entry in entries:
            yield entry.model_dump_json()


#: What production records when a cassette topic is given and nothing else is said: its tools.
DEFAULT_RECORDED: tuple[str, ...] = ("tool",)


class CassetteRecording(BaseModel):
    """Production's side: which mediated calls it records, and where (its cassette topic).

    ``record`` selects calls by resource type (``tool``, ``chat_model``, ``embedding_model``, ``vector_store``,
    ``vector_store.read``), by resource name, or by ``name.method`` — opt-in: nothing else is recorded.
    ``security`` is a :class:`~airflow_flink_replay.core.kafka_security.KafkaClientSecurity` argument
    (references only, resolved where the producer is built).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap: str = Field(min_length=1)
    topic: str = Field(min_length=1)
    record: tuple[str, ...] = DEFAULT_RECORDED
    security: str = ""
    #: production's own namespace (job identifier): read as the replay-namespace placeholder in the digests,
    #: as a replay reads its own, so the same call digests the same on both sides
    namespace: str = ""
    max_result_bytes: int = Field(default=DEFAULT_MAX_RESULT_BYTES, gt=0)
    read_methods: tuple[str, ...] = ()

    def records(self, resource_type: str, resource_name: str, method: str) -> bool:
        """Whether production records this call."""
        from airflow_flink_replay.core.policy import DEFAULT_READ_METHODS

        selectors = set(self.record)
        if {resource_type, resource_name, f"{resource_name}.{method}"} & selectors:
            return True
        reads = self.read_methods or DEFAULT_READ_METHODS
        return resource_type == "vector_store" and "vector_store.read" in selectors and method in reads


class CassetteWindow(BaseModel):
    """The replay's side: production's cassette for the window — the cassette topic from its end offsets at the
    savepoint (nothing production recorded before the savepoint is served) to its end offsets when the replay
    was submitted. ``bootstrap`` / ``security`` as the replay's own Kafka source (references only)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str = Field(min_length=1)
    start_offsets: dict[int, int]
    end_offsets: dict[int, int]
    bootstrap: str = ""
    security: str = ""

    def ranges(self) -> dict[int, tuple[int, int]]:
        """Partition → [start, end) to read (partitions with nothing recorded left out)."""
        return {
            p: (self.start_offsets.get(p, 0), end)
            for p, end in sorted(self.end_offsets.items())
            if end > self.start_offsets.get(p, 0)
        }

    @property
    def size(self) -> int:
        """How many entries the window holds (recorded calls, served or not)."""
        return sum(end - start for start, end in self.ranges().values())


def encode_result(result: Any) -> tuple[Any, str]:
    """``result`` as JSON plus the codec that rebuilds it (:func:`decode_result`)."""
    if isinstance(result, BaseModel):
        cls = type(result)
        return result.model_dump(mode="json"), f"pydantic:{cls.__module__}:{cls.__qualname__}"
    if isinstance(result, list | tuple) and result and all(isinstance(r, BaseModel) for r in result):
        classes = {type(r) for r in result}
        if len(classes) == 1:
            cls = classes.pop()
            return [r.model_dump(mode="json") for r in result], f"pydantic-list:{cls.__module__}:{cls.__qualname__}"
    return result, "json"


def decode_result(value: Any, codec: str) -> Any:
    """The result ``encode_result`` gave as ``(value, codec)``."""
    if codec == "json":
        return value
    kind, _, target = codec.partition(":")
    if kind not in ("pydantic", "pydantic-list") or ":" not in target:
        raise ValueError(f"unknown cassette codec {codec!r}")
    module, qualname = target.split(":", 1)
    cls: Any = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    if kind == "pydantic":
        return cls.model_validate(value)
    return [cls.model_validate(v) for v in value]

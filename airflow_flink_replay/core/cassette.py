"""Cassettes: the mediated calls production made, recorded so a replay can be served the same results.

A cassette is production's side of a replay's mediated calls (tools, vector-store reads, chat models —
per resource, opt-in): one :class:`CassetteEntry` per call, with the resource, the method, the agent key
the call was made for, the digest of its normalised arguments (:func:`~airflow_flink_replay.core.audit.args_digest`,
the same digest the audit records), the call's position among production's calls for that key, the input
record whose processing made it, and the result. A replay serves a recorded result to the call that matches
it (:class:`Cassette`): same resource, method, key and argument digest, taken in production's order — the
model is Temporal's history replay and VCR-style cassettes. Failing that, a call whose identifying arguments are
production's and whose free text (what a model wrote) differs is served the recorded call at its position
(:mod:`airflow_flink_replay.core.call_match`). A call with no match left is *unmatched*: the replay falls back
to the resource's other policy decision for it.

Pure: pydantic only. The job side records and serves (``airflow_flink_replay.flink.cassette_io``). Results
travel as JSON with a codec naming how to rebuild them (:func:`encode_result`, :func:`decode_result`):
``json`` (the value as is), ``pydantic:<module>:<class>`` (a pydantic model: a chat message, a vector-store
query result), ``pydantic-list:<module>:<class>``. A codec is only a name looked up among the result types the
job's code declares (:func:`declared_result_types`): anyone who can write to the cassette topic writes codecs,
so a record never chooses what the job side imports.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from airflow_flink_replay.core.audit import hash_names, is_key_hash, key_hashes
from airflow_flink_replay.core.call_match import CallArguments, MatchRule, infer_rule
from airflow_flink_replay.core.policy import CallMatch
from airflow_flink_replay.exceptions import ResultRefused

__all__ = [
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_RECORDED",
    "Cassette",
    "CassetteEntry",
    "CassetteMatch",
    "CassetteRecording",
    "CassetteSource",
    "CassetteWindow",
    "MatchKey",
    "ResultRefused",
    "declared_result_types",
    "decode_result",
    "encode_result",
    "result_type_name",
]

#: A result larger than this (its JSON, in bytes) is recorded without its value (``result_dropped``): a
#: replay treats the call as unmatched rather than hold megabytes per call.
DEFAULT_MAX_RESULT_BYTES = 256 * 1024

#: What a replayed call must share with a recorded one: resource name, method, agent key, argument digest.
MatchKey = tuple[str, str, str, str]
#: Production's calls of one resource method for one agent key: resource name, method, agent key.
CallKey = tuple[str, str, str]


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
    #: per top-level argument (a keyword argument by its name, a positional one as ``args[<i>]``) the digest of its
    #: value; ``None`` (a recorder from before): the entry serves exact matches only
    arg_digests: dict[str, str] | None = None
    #: the text of each string argument (its first 2,000 characters; none for secret-looking names), to score free
    #: text a replay's model worded otherwise (:mod:`airflow_flink_replay.core.call_match`)
    arg_texts: dict[str, str] | None = None

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
        arguments: CallArguments | None = None,
    ) -> CassetteEntry:
        """An entry for a call that returned ``result`` (already in its JSON form); a result that is not JSON or
        is larger than ``max_result_bytes`` is recorded as dropped, with the reason. ``arguments``: the call's
        arguments one by one (:meth:`CallArguments.of`), kept for matching reworded free text."""
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
            **(argument_fields(arguments) if arguments is not None else {}),
        )


def argument_fields(arguments: CallArguments) -> dict[str, Any]:
    """The :class:`CassetteEntry` fields that keep a call's arguments one by one (``arg_digests``, ``arg_texts``)."""
    return {"arg_digests": dict(arguments.digests), "arg_texts": dict(arguments.texts)}


@dataclass(frozen=True)
class CassetteMatch:
    """A recorded call served to a replayed one, and how it matched: ``exact`` (the same argument digest) or
    ``arguments`` (the same identifying arguments, free text scored: ``similarity``, 0..1)."""

    entry: CassetteEntry
    matched: str
    similarity: float | None = None


class Cassette:
    """Recorded calls indexed for replay: :meth:`match` serves each recorded result at most once, in production's
    order (``seq``), to the first replayed call with the same resource, method, key and argument digest; failing
    that, to a call with the same identifying arguments whose free text differs (see :meth:`match`).

    A replay that calls a tool twice with the same arguments for one key gets production's first result, then
    its second; a third such call, or a call with other identifying arguments, is unmatched (``None``).
    """

    def __init__(self, entries: Iterable[CassetteEntry] = ()) -> None:
        self._calls: dict[CallKey, list[CassetteEntry]] = {}
        for entry in sorted(entries, key=lambda e: (e.key, e.seq)):
            self._calls.setdefault((entry.resource_name, entry.method, entry.key), []).append(entry)
        self._taken = {group: [False] * len(entries) for group, entries in self._calls.items()}
        self._made: dict[CallKey, int] = {}  # replayed calls so far: the position of the next one
        self._rules: dict[tuple[str, str], MatchRule] = {}
        self.size = sum(len(entries) for entries in self._calls.values())
        self._keys = {group[2] for group in self._calls}
        self._hash_names: dict[int, str] | None = None  # built on the first call that needs it
        self.served = 0
        self.served_by_arguments = 0
        self.unmatched = 0

    def take(self, resource_name: str, method: str, key: str, args_digest: str) -> CassetteEntry | None:
        """The next recorded call for this resource, method, key and argument digest, or ``None`` (counted as
        unmatched): :meth:`match` with the digest only."""
        found = self.match(resource_name, method, key, args_digest)
        return found.entry if found is not None else None

    def rule(self, resource_name: str, method: str, declared: CallMatch | None = None) -> MatchRule:
        """Which arguments of this resource method are free text: ``declared`` (the policy's ``call_match``), else,
        for a tool, inferred from production's recorded calls of it
        (:func:`~airflow_flink_replay.core.call_match.infer_rule`; the same for every variant, since all read the
        same cassette). Other resources (an opt-in chat model, whose prompt a candidate changes on purpose) match
        exactly unless declared."""
        if declared is not None:
            return MatchRule.declared(declared)
        if (resource_name, method) not in self._rules:
            recorded = [
                entry
                for (name, meth, _key), entries in self._calls.items() if (name, meth) == (resource_name, method)
                for entry in entries if entry.arg_digests is not None
            ]
            tools = all(entry.resource_type == "tool" for entry in recorded)
            inferred = infer_rule((e.arg_digests or {}, e.arg_texts) for e in recorded) if tools else MatchRule()
            self._rules[(resource_name, method)] = inferred
        return self._rules[(resource_name, method)]

    def match(
        self, resource_name: str, method: str, key: str, call: str | CallArguments, declared: CallMatch | None = None
    ) -> CassetteMatch | None:
        """Serve one replayed call (``call``: its argument digest, or its arguments one by one) the recorded call
        that matches it, or ``None`` (counted as unmatched) when there is none left or the one found cannot be
        served (its result was dropped, or it raised in production: it is used up all the same).

        In order: the first recorded call not served yet with the same argument digest (``exact``); then, with
        ``CallArguments`` and a rule with free text (:meth:`rule`), among the recorded calls not served whose
        identifying arguments are equal — never one whose identifying arguments differ — the one at the call's
        position (the n-th call of this resource method for this key in the replay is served production's n-th),
        else the one with the most similar free text, the nearest position first on a tie (``arguments``). A
        key known on one side only by its hash (:meth:`_recorded_key`) matches the recorded key it names."""
        arguments = call if isinstance(call, CallArguments) else None
        digest = arguments.digest if arguments is not None else str(call)
        position = self._made.get((resource_name, method, key), 0)
        self._made[(resource_name, method, key)] = position + 1
        found: CassetteMatch | None = None
        for group in self._groups(resource_name, method, key):
            found = self._exact(group, digest)
            if found is None and arguments is not None:
                found = self._by_arguments(group, arguments, self.rule(resource_name, method, declared), position)
            if found is not None:
                break
        if found is None or not found.entry.servable:
            self.unmatched += 1
            return None
        self.served += 1
        self.served_by_arguments += found.matched == "arguments"
        return found

    def _groups(self, resource_name: str, method: str, key: str) -> Iterator[CallKey]:
        """The recorded calls' group for this call, then the group of the key it stands for (if any)."""
        yield (resource_name, method, key)
        if (alias := self._recorded_key(key)) is not None:
            yield (resource_name, method, alias)

    def _exact(self, group: CallKey, digest: str) -> CassetteMatch | None:
        taken = self._taken.get(group, [])
        for i, entry in enumerate(self._calls.get(group, [])):
            if not taken[i] and entry.args_digest == digest:
                taken[i] = True
                return CassetteMatch(entry, "exact")
        return None

    def _by_arguments(
        self, group: CallKey, call: CallArguments, rule: MatchRule, position: int
    ) -> CassetteMatch | None:
        """The recorded call of ``group`` with the call's identifying arguments, at its position or most alike."""
        if not rule.has_free_text:
            return None
        identity = rule.identity(call.digests)
        taken = self._taken.get(group, [])
        best: tuple[tuple[bool, float, int, int], int, float] | None = None
        for i, entry in enumerate(self._calls.get(group, [])):
            if taken[i] or entry.arg_digests is None or rule.identity(entry.arg_digests) != identity:
                continue
            score = rule.similarity(call, entry.arg_digests, entry.arg_texts or {})
            if score < rule.min_similarity:
                continue
            rank = (i != position, -score, abs(i - position), i)
            if best is None or rank < best[0]:
                best = (rank, i, score)
        if best is None:
            return None
        taken[best[1]] = True
        return CassetteMatch(self._calls[group][best[1]], "arguments", round(best[2], 4))

    def _recorded_key(self, key: str) -> str | None:
        """The recorded key ``key`` stands for when one side ran an action before its task learnt the key's
        text (an action restored in flight from a savepoint: the key's hash as text): a replay's hash names the
        one recorded key text with that hash; a replay's key text names a recorded hash of it."""
        if is_key_hash(key):
            if self._hash_names is None:
                self._hash_names = hash_names(self._keys)
            return self._hash_names.get(int(key))
        return next((str(h) for h in key_hashes(key) if str(h) in self._keys), None)

    def refuse(self, found: CassetteMatch) -> None:
        """Count a call :meth:`match` served as unmatched after all: its recorded result could not be rebuilt
        (:class:`ResultRefused`). The recorded call stays used up, as one whose result was dropped."""
        self.served -= 1
        self.served_by_arguments -= found.matched == "arguments"
        self.unmatched += 1

    def remaining(self) -> int:
        """Recorded calls not taken (a replay that made fewer calls than production leaves some)."""
        return sum(taken.count(False) for taken in self._taken.values())

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


#: Content-hashed module names (``flink.agent_build``): production's build and a replay's name one class apart.
_BUILD_MODULE = re.compile(r"\bafr_build_[0-9a-f]{16}\b")
_RUNTIME_MODULE = re.compile(r"\bafr_rt_[0-9a-f]{16}_[0-9a-f]{8}\b")
#: How deep :func:`declared_result_types` follows an annotation's arguments (``list[dict[str, X | None]]``).
_MAX_ANNOTATION_DEPTH = 8


def result_type_name(cls: type) -> str:
    """``<module>:<qualname>`` of a result type as codecs name it, a content-hashed build's module name read
    alike on both sides (``<build>``, and this package's runtime copy as ``airflow_flink_replay``)."""
    return _type_name(f"{cls.__module__}:{cls.__qualname__}")


def declared_result_types(annotation: Any) -> dict[str, type[BaseModel]]:
    """The pydantic model classes a return annotation names (through ``X | None``, ``list[X]``, ``dict[str, X]``
    and the like) and their subclasses loaded so far, by :func:`result_type_name`: what a served result may be
    rebuilt as. ``BaseModel`` itself, ``Any`` and no annotation declare nothing."""
    found: dict[str, type[BaseModel]] = {}

    def visit(node: Any, depth: int) -> None:
        if depth > _MAX_ANNOTATION_DEPTH:
            return
        if isinstance(node, type) and issubclass(node, BaseModel) and node is not BaseModel:
            _with_subclasses(node, found)
        for arg in typing.get_args(node):
            visit(arg, depth + 1)

    visit(annotation, 0)
    return found


def _with_subclasses(cls: type[BaseModel], found: dict[str, type[BaseModel]]) -> None:
    pending = [cls]
    while pending:
        current = pending.pop()
        name = result_type_name(current)
        if name not in found:
            found[name] = current
            pending.extend(current.__subclasses__())


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


def decode_result(value: Any, codec: str, declared: Mapping[str, type[BaseModel]]) -> Any:
    """The result ``encode_result`` gave as ``(value, codec)``, rebuilt only as one of the ``declared`` result
    types (:func:`declared_result_types`): nothing is imported by the codec's name. Raises :class:`ResultRefused`
    for an unknown codec, a type not declared or a value that is not one."""
    if codec == "json":
        return value
    kind, _, target = codec.partition(":")
    if kind not in ("pydantic", "pydantic-list") or ":" not in target:
        raise ResultRefused(f"unknown cassette codec {codec[:200]!r}")
    cls = declared.get(_type_name(target))
    if cls is None:
        raise ResultRefused(f"codec names {target[:200]!r}, not a declared result type")
    if kind == "pydantic-list" and not isinstance(value, list):
        raise ResultRefused(f"codec {kind} needs a list, the record holds {type(value).__name__}")
    try:
        if kind == "pydantic":
            return cls.model_validate(value)
        return [cls.model_validate(v) for v in value]
    except ValueError as exc:  # pydantic's ValidationError
        raise ResultRefused(f"the recorded value is not a valid {cls.__qualname__} ({str(exc)[:300]})") from None


def _type_name(target: str) -> str:
    """``<module>:<qualname>`` with content-hashed build module names read alike (:func:`result_type_name`)."""
    return _RUNTIME_MODULE.sub("airflow_flink_replay", _BUILD_MODULE.sub("<build>", target))

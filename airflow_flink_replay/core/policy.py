"""Side-effect policy for replays: what a replayed agent may do with each of its resources.

A :class:`ReplayPolicy` decides, per attempted resource call, one of four things:

``allow``
    call through to the real resource (default for chat models, embedding models, vector-store reads and the
    tools named in ``pure_tools``);
``record``
    do not call; return a declared stand-in result and audit the attempt (default for tools and vector-store
    writes);
``replay``
    do not call; serve the result production got for the same call, from production's cassette
    (:mod:`airflow_flink_replay.core.cassette`): same resource, method, agent key and arguments — the same
    identifying arguments when some are free text an LLM wrote (:class:`CallMatch`) — in production's order. A
    call with no recorded match is *unmatched* and gets the resource's other decision
    (:meth:`ReplayPolicy.fallback`). Default for tools when the replay has a cassette;
``block``
    do not call; fail the action with an error naming the resource.

Decisions are looked up from the most to the least specific rule:

1. ``by_name["<resource name>.<method>"]``
2. ``by_name["<resource name>"]``
3. ``by_type["vector_store.read"]`` / ``by_type["vector_store.write"]`` (vector stores only)
4. ``by_type["<resource type>"]``
5. ``pure_tools`` (``allow``), then ``replay`` for any other tool when the replay has a cassette
6. the built-in defaults above — except the agent's long-term memory (the job definition's ``memory``
   binding), whose reads and writes go to the replay's own fork: ``allow`` (:meth:`ReplayPolicy.with_memory`).

A resource the candidate changed (``changed``: filled by the run, for the candidate only, from the agent check's
fingerprints) never gets ``replay``, by any rule: production's recording is of other code, so its calls get the
decision they would get without a cassette (:meth:`ReplayPolicy.fallback`).

Calls an action makes *outside* every resource (raw sockets and DNS, subprocesses, file writes) are
"unmediated": the replay job's guard (:mod:`airflow_flink_replay.flink.unmediated`) sees them and applies
``unmediated`` — ``block`` fails the call, ``record`` and ``allow`` let it happen; every one is audited. Left
unset, it is ``block`` when the replays run on their own Flink cluster and ``record`` when they share
production's (:meth:`ReplayPolicy.resolved`).

Pure model (pydantic only): imported by the Airflow side (to build and validate the policy) and by the
Flink side (the resource proxies in :mod:`airflow_flink_replay.flink.proxies` apply it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import Enum, StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

__all__ = [
    "DEFAULT_READ_METHODS",
    "CallMatch",
    "Decision",
    "ReplayPolicy",
    "ResourceKind",
]


class Decision(StrEnum):
    """What the replay does with one attempted resource call."""

    ALLOW = "allow"
    RECORD = "record"
    REPLAY = "replay"
    BLOCK = "block"


class ResourceKind(StrEnum):
    """Resource types the policy knows (the values of Flink Agents' ``ResourceType`` it governs)."""

    CHAT_MODEL = "chat_model"
    TOOL = "tool"
    VECTOR_STORE = "vector_store"
    EMBEDDING_MODEL = "embedding_model"


#: Vector-store methods treated as reads (everything else on a vector store is a write).
DEFAULT_READ_METHODS: tuple[str, ...] = (
    "search",
    "query",
    "get",
    "get_all",
    "get_by_id",
    "recall",
    "list",
    "count",
    "similarity_search",
    "retrieve",
    "history",
)

_TYPE_KEYS = {k.value for k in ResourceKind} | {"vector_store.read", "vector_store.write"}

_DEFAULTS: dict[str, Decision] = {
    ResourceKind.CHAT_MODEL.value: Decision.ALLOW,
    ResourceKind.TOOL.value: Decision.RECORD,
    "vector_store.read": Decision.ALLOW,
    "vector_store.write": Decision.RECORD,
    ResourceKind.EMBEDDING_MODEL.value: Decision.ALLOW,
}


class CallMatch(BaseModel):
    """How a replayed call of one resource (a tool, or ``name.method``) is matched with production's recorded calls
    when its arguments are not all the same: which arguments identify the call and which are free text.

    An agent's model writes some tool arguments (a ticket's ``reason``, a message's text): every run words them
    differently, so an exact match of all arguments serves production's result at random. Arguments named in
    ``identify`` must be equal (ids, keys, amounts); every other argument of the call is then free text. Without
    ``identify``, the arguments named in ``free_text`` are free text and every other one identifies. Free text is
    scored by similarity (0..1); a recorded call scoring below ``min_similarity`` is not served (0: free text
    never prevents a match, it only ranks candidates and is recorded). Argument names: a keyword argument by its
    name, a positional one as ``args[<i>]``. Unset, the cassette infers the free text from production's recording
    (:mod:`airflow_flink_replay.core.cassette`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    identify: list[str] | None = Field(
        default=None, description="arguments that must be equal (every other argument is then free text)"
    )
    free_text: list[str] = Field(
        default_factory=list, description="arguments matched by similarity, not equality (without identify)"
    )
    min_similarity: float = Field(
        default=0.0, ge=0.0, le=1.0,
        description="a recorded call whose free text is less similar than this (0..1) is not served",
    )

    @field_validator("free_text")
    @classmethod
    def _disjoint(cls, value: list[str], info: ValidationInfo) -> list[str]:
        both = sorted(set(value) & set(info.data.get("identify") or []))
        if both:
            raise ValueError(f"arguments {both} are both in identify and in free_text; name each in one list")
        return value


class ReplayPolicy(BaseModel):
    """Per resource name and per resource type decision ``allow`` | ``record`` | ``replay`` | ``block``.

    Example::

        ReplayPolicy(by_name={"notify_support": "block", "review_memory.remember": "allow"},
                     stand_ins={"notify_support": "ticket-not-created"})
    """

    model_config = ConfigDict(extra="forbid", use_enum_values=False)

    by_type: dict[str, Decision] = Field(
        default_factory=dict,
        description='Decision per resource type: "chat_model", "tool", "vector_store", "vector_store.read", '
        '"vector_store.write", "embedding_model".',
    )
    by_name: dict[str, Decision] = Field(
        default_factory=dict,
        description='Decision per resource name ("notify_support") or per method ("review_memory.remember").',
    )
    stand_ins: dict[str, Any] = Field(
        default_factory=dict,
        description='Result returned for a `record` decision, per resource name or "name.method". '
        "Chat models turn a string/dict stand-in into an assistant message.",
    )
    read_methods: list[str] = Field(
        default_factory=lambda: list(DEFAULT_READ_METHODS),
        description="Vector-store method names that count as reads.",
    )
    pure_tools: list[str] = Field(
        default_factory=list,
        description="Tools without side effects whose answer a replay may ask for again (lookups, calculators): "
        "allow unless a rule names them. Other tools are replayed from production's cassette, or recorded.",
    )
    changed: list[str] = Field(
        default_factory=list,
        description="Resources the candidate changed (set by the run from the agent check's fingerprints, for the "
        "candidate only): never served production's cassette; a call that would be replayed gets its fallback "
        "decision instead (allow for a pure tool, else the rules without replay, then the defaults).",
    )
    call_match: dict[str, CallMatch] = Field(
        default_factory=dict,
        description='How a replayed call is matched with production\'s recorded calls, per resource name or '
        '"name.method": which arguments identify it (exact) and which are free text (by similarity). Unset: '
        "inferred from production's recording (string arguments of natural language are free text).",
    )
    unmediated: Decision | None = Field(
        default=None,
        description="Calls made outside every resource (sockets, DNS, subprocesses, file writes): block fails "
        "them, record/allow let them happen; all are audited. Default: block when replays run on their own "
        "Flink cluster (replay_flink_conn_id), record when they share production's.",
    )

    @field_validator("by_type")
    @classmethod
    def _known_types(cls, value: dict[str, Decision]) -> dict[str, Decision]:
        unknown = sorted(set(value) - _TYPE_KEYS)
        if unknown:
            raise ValueError(f"by_type has unknown resource type(s) {unknown}; use one of {sorted(_TYPE_KEYS)}")
        return value

    @field_validator("unmediated")
    @classmethod
    def _no_replay_unmediated(cls, value: Decision | None) -> Decision | None:
        if value == Decision.REPLAY:
            raise ValueError("unmediated cannot be 'replay' (production's cassette holds mediated calls only); "
                             "use block, record or allow")
        return value

    @field_validator("stand_ins")
    @classmethod
    def _json_stand_ins(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name, result in value.items():
            try:
                json.dumps(result)
            except TypeError as exc:
                raise ValueError(f"stand_ins[{name!r}] must be JSON-serialisable ({exc})") from exc
        return value

    def is_read(self, method: str) -> bool:
        """Whether ``method`` on a vector store is a read."""
        return method in self.read_methods

    def decide(self, resource_type: str, resource_name: str, method: str, *, cassette: bool = False) -> Decision:
        """The decision for one call of ``resource_name.method`` (a resource of ``resource_type``); ``cassette``:
        whether the replay has production's recorded calls (without one, ``replay`` becomes :meth:`fallback`).
        A resource in :attr:`changed` never gets ``replay``: production's recording is of other code."""
        rtype = resource_type.value if isinstance(resource_type, Enum) else str(resource_type)
        cassette = cassette and not self.is_changed(resource_name)
        explicit = self._rule(rtype, resource_name, method)
        if explicit is not None and (explicit != Decision.REPLAY or cassette):
            return explicit
        if explicit is None and cassette and rtype == ResourceKind.TOOL.value and resource_name not in self.pure_tools:
            return Decision.REPLAY
        return self.fallback(rtype, resource_name, method)

    def call_match_for(self, resource_name: str, method: str) -> CallMatch | None:
        """The declared :class:`CallMatch` of a call (``name.method`` before ``name``), or ``None``: inferred."""
        return self.call_match.get(f"{resource_name}.{method}") or self.call_match.get(resource_name)

    def is_changed(self, resource_name: str) -> bool:
        """Whether the candidate changed ``resource_name`` (see :attr:`changed`)."""
        return resource_name in self.changed

    def with_changed(self, resource_names: Iterable[str]) -> ReplayPolicy:
        """This policy for a candidate that changed ``resource_names``: none of them is served production's
        cassette (:meth:`decide`)."""
        names = sorted(set(self.changed) | set(resource_names))
        return self if names == self.changed else self.model_copy(update={"changed": names})

    def fallback(self, resource_type: str, resource_name: str, method: str) -> Decision:
        """The decision for a call no recorded result matches: the rules without their ``replay`` entries,
        ``allow`` for a pure tool, then the built-in defaults."""
        rtype = resource_type.value if isinstance(resource_type, Enum) else str(resource_type)
        explicit = self._rule(rtype, resource_name, method, skip=Decision.REPLAY)
        if explicit is not None:
            return explicit
        if rtype == ResourceKind.TOOL.value and resource_name in self.pure_tools:
            return Decision.ALLOW
        for key in self._type_keys(rtype, method):
            if key in _DEFAULTS:
                return _DEFAULTS[key]
        return Decision.ALLOW

    def _type_keys(self, rtype: str, method: str) -> list[str]:
        if rtype == ResourceKind.VECTOR_STORE.value:
            return [f"vector_store.{'read' if self.is_read(method) else 'write'}", rtype]
        return [rtype]

    def _rule(self, rtype: str, resource_name: str, method: str, skip: Decision | None = None) -> Decision | None:
        """The most specific ``by_name`` / ``by_type`` rule for the call (rules deciding ``skip`` passed over)."""
        for key in (f"{resource_name}.{method}", resource_name):
            if key in self.by_name and Decision(self.by_name[key]) != skip:
                return Decision(self.by_name[key])
        for key in self._type_keys(rtype, method):
            if key in self.by_type and Decision(self.by_type[key]) != skip:
                return Decision(self.by_type[key])
        return None

    def stand_in(self, resource_type: str, resource_name: str, method: str) -> Any:
        """The declared stand-in result for a ``record`` decision (a placeholder text when none is declared)."""
        for key in (f"{resource_name}.{method}", resource_name):
            if key in self.stand_ins:
                return self.stand_ins[key]
        rtype = resource_type.value if isinstance(resource_type, Enum) else str(resource_type)
        if rtype == ResourceKind.VECTOR_STORE.value:
            return None
        return f"[replay: {rtype} '{resource_name}' recorded, not executed]"

    def with_memory(self, resource_name: str) -> ReplayPolicy:
        """This policy with the agent's long-term memory resource ``resource_name`` (the job definition's
        ``memory`` binding) allowed, unless the policy names it: its reads and writes go to the replay's own
        fork of production's namespace, so a replay that records its writes instead would recall less than
        production did and stop reproducing it."""
        if any(key == resource_name or key.startswith(f"{resource_name}.") for key in self.by_name):
            return self
        return self.model_copy(update={"by_name": {**self.by_name, resource_name: Decision.ALLOW}})

    def resolved(self, *, own_cluster: bool) -> ReplayPolicy:
        """This policy with :attr:`unmediated` decided: as set, else ``block`` on a replay cluster of its own
        and ``record`` on production's (where a blocked call could only be the replay's)."""
        if self.unmediated is not None:
            return self
        return self.model_copy(update={"unmediated": Decision.BLOCK if own_cluster else Decision.RECORD})

    def to_json(self) -> str:
        """Compact JSON (what the replay job receives)."""
        return self.model_dump_json()

"""The agent pin: the agent operator ("action-execute-operator") keeps its identity across production and
replay jobs. (Checking that a savepoint maps onto a replay plan is :mod:`airflow_flink_replay.core.identity`.)

Flink Agents' ``to_datastream()`` returns the map *after* the agent operator, and the agent operator gets an
auto-generated, topology-derived id: change anything upstream (a different source, an extra watermark
assigner) and its keyed state no longer maps. We reach the agent transformation through py4j and pin it:

- ``setUid(uid)`` for jobs built with this package (production and replay use the same uid);
- ``setUidHash(<32-hex vertex id>)`` for a replay of a production job that never had a uid (the id comes from
  production's job plan or savepoint); the plan then still shows a new auto id, only state matching uses the
  hash;
- ``setMaxParallelism(n)``: the key-group count must equal the savepoint's.

A uid's vertex id is predictable: :func:`uid_to_vertex_id`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

AGENT_OPERATOR_NAME = "action-execute-operator"


def uid_to_vertex_id(uid: str) -> str:
    """The JobVertexID Flink derives from an operator uid: murmur3_128 (seed 0) of the uid, hex."""
    import mmh3

    return mmh3.hash_bytes(uid.encode("utf-8"), 0, True).hex()


@dataclass(frozen=True)
class AgentPin:
    """How to pin the agent operator: ``uid`` or ``uid_hash`` (not both) and/or ``max_parallelism``."""

    uid: str | None = None
    uid_hash: str | None = None
    max_parallelism: int | None = None

    def __post_init__(self) -> None:
        if self.uid and self.uid_hash:
            raise ValueError("AgentPin: give uid or uid_hash, not both")
        if self.uid_hash is not None and (
            len(self.uid_hash) != 32 or any(c not in "0123456789abcdef" for c in self.uid_hash.lower())
        ):
            raise ValueError(f"AgentPin.uid_hash {self.uid_hash!r} must be a 32-hex JobVertexID")

    @property
    def is_empty(self) -> bool:
        """Nothing to pin."""
        return not (self.uid or self.uid_hash or self.max_parallelism)


def find_transformation(j_transformation: Any, name: str = AGENT_OPERATOR_NAME) -> Any | None:
    """Depth-first search from ``j_transformation`` through ``getInputs()`` for a transformation by name."""
    stack = [j_transformation]
    seen: set[int] = set()
    while stack:
        t = stack.pop()
        tid = t.getId()
        if tid in seen:
            continue
        seen.add(tid)
        if t.getName() == name:
            return t
        stack.extend(list(t.getInputs()))
    return None


def find_agent_transformation(agent_output: Any) -> Any:
    """The agent operator's Java transformation upstream of ``agent_output`` (a PyFlink DataStream)."""
    found = find_transformation(agent_output._j_data_stream.getTransformation())
    if found is None:
        raise RuntimeError(
            f"no transformation named {AGENT_OPERATOR_NAME!r} upstream of the given stream; pass the stream "
            "returned by the agent builder's to_datastream()"
        )
    return found


def pin_agent_operator(agent_output: Any, pin: AgentPin) -> Any:
    """Apply ``pin`` to the agent operator upstream of ``agent_output``; returns the Java transformation."""
    t = find_agent_transformation(agent_output)
    if pin.uid:
        t.setUid(pin.uid)
    if pin.uid_hash:
        t.setUidHash(pin.uid_hash.lower())
    if pin.max_parallelism:
        t.setMaxParallelism(int(pin.max_parallelism))
    return t

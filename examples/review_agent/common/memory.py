"""Long-term memory of the review agent: Mem0, laid out as Flink Agents 0.3+ does.

flink-agents 0.2.0 has no Mem0 integration, so the agent reaches Mem0 through this resource (declared as
a ``vector_store`` resource, so the replay's side-effect policy governs it: ``recall`` is a read,
``remember`` a write). The layout follows Flink Agents' Mem0 long-term memory: ``user_id`` = the job
identifier (the agent passes ``ctx.config`` ``job-identifier``, which a replay overrides with its fork
namespace), ``agent_id`` = the key text (the customer), ``run_id`` = the memory-set name.

The Mem0 ``Memory`` is built offline by :func:`airflow_flink_replay.memory.offline.build_offline_memory`
from ``mem0_config`` (default: the local stack's Chroma server, collection ``flink_agents_mem0_ltm``).
"""

from __future__ import annotations

import threading
from typing import Any

from flink_agents.api.resource import Resource, ResourceType
from pydantic import PrivateAttr

DEFAULT_MEM0_CONFIG: dict[str, Any] = {
    "vector_store": {
        "provider": "chroma",
        "config": {"host": "127.0.0.1", "port": 8000, "collection_name": "flink_agents_mem0_ltm"},
    }
}
MEMORY_SET = "reviews"

_BUILD_LOCK = threading.Lock()
_MEMORIES: dict[str, Any] = {}

#: Recall reads every memory of the customer: with a smaller ``top_k`` mem0 returns whichever subset the
#: vector store lists first, which differs between two forks of the same namespace (their ids differ), so
#: two replays of the same input would see different histories.
RECALL_LIMIT = 100_000


def _memory_for(config: dict[str, Any]) -> Any:
    import json

    from airflow_flink_replay.memory.offline import build_offline_memory

    key = json.dumps(config, sort_keys=True)
    with _BUILD_LOCK:
        if key not in _MEMORIES:
            _MEMORIES[key] = build_offline_memory(config)
        return _MEMORIES[key]


class ReviewMemory(Resource):
    """Mem0-backed memory of earlier reviews per customer (a ``vector_store`` resource)."""

    mem0_config: dict[str, Any] | None = None
    memory_set: str = MEMORY_SET
    _memory: Any = PrivateAttr(default=None)

    @classmethod
    def resource_type(cls) -> ResourceType:
        """Declared as a vector store, so replay policies treat reads and writes separately."""
        return ResourceType.VECTOR_STORE

    def _mem(self) -> Any:
        if self._memory is None:
            self._memory = _memory_for(self.mem0_config or DEFAULT_MEM0_CONFIG)
        return self._memory

    def recall(self, user_id: str, agent_id: str) -> list[dict[str, Any]]:
        """Earlier review memories of ``agent_id`` under namespace ``user_id`` (read)."""
        found = self._mem().get_all(filters={"user_id": user_id, "agent_id": agent_id}, top_k=RECALL_LIMIT)
        rows = found.get("results", found) if isinstance(found, dict) else found
        out = []
        for row in rows or []:
            meta = row.get("metadata") or {}
            out.append({"text": row.get("memory", ""), "label": meta.get("label"), "review_id": meta.get("review_id")})
        return sorted(out, key=lambda r: str(r.get("review_id")))

    def remember(self, text: str, user_id: str, agent_id: str, metadata: dict[str, Any]) -> str:
        """Store one memory for ``agent_id`` under ``user_id`` (write); returns the memory id or ''."""
        result = self._mem().add(
            [{"role": "user", "content": text}],
            user_id=user_id,
            agent_id=agent_id,
            run_id=self.memory_set,
            metadata=metadata,
            infer=False,
        )
        rows = result.get("results", []) if isinstance(result, dict) else result or []
        return str(rows[0].get("id", "")) if rows else ""

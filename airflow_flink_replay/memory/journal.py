"""The memory journal: production's own record of which memories it wrote, so that the memory cut inside the
stop window reads only those, not the whole namespace.

A pre-copy copies production's namespace while production runs; the cut at the savepoint then has to find
what changed since. Without help from the store that means reading every memory again with its vector
(~15 s at 100k memories on the local Chroma). With a journal, production's mem0 vector store is wrapped
(:func:`journal_memory`) so that every ``insert``, ``update`` and ``delete`` it makes sends, **after the
store returned and before the call returns**, one record naming the memory ids to a Kafka topic, flushed
(the broker has it). The cut reads that topic from the position the pre-copy noted before it read the
source and re-reads only the ids named there.

Why the cut is exact with it (production's own writes):

- a write that reached the store before the pre-copy began reading was seen by the pre-copy's read;
- a write that reached the store after that has its record *after* it (sent once the store returned), so
  after the noted position: the cut re-reads that id;
- a drain stop ends every in-flight agent run before the savepoint, each write's record flushed in its
  call: at the cut the journal holds every write production made before the savepoint.

A write whose record was never sent is one whose process died between the store and the broker: the job
then fails over, which the stop window sees in Flink's exception history and answers with the full read.
Writes by anything other than production's journaled memory (a script writing to the store directly) are
not in the journal: with such writers, leave the journal off and the cut reads everything.

The journal is named in the mem0 config under :data:`JOURNAL_KEY` (``{"topic", "bootstrap", "security"}``):
:func:`~airflow_flink_replay.memory.offline.build_offline_memory` takes it out and wraps the memory it builds;
an agent that builds its own ``mem0.Memory`` calls :func:`journal_memory` itself. Imports neither Airflow
nor PyFlink (both sides read it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["JOURNAL_KEY", "JournalTarget", "JournaledVectorStore", "journal_ids", "journal_memory", "split_journal"]

#: The mem0-config key naming the journal (taken out before mem0 sees the config).
JOURNAL_KEY = "afr_journal"


class JournalTarget(BaseModel):
    """Where a memory journal goes: a topic, its bootstrap servers as production reaches them, and production's
    Kafka security as a reference-only JSON
    (:meth:`~airflow_flink_replay.core.kafka_security.KafkaClientSecurity.to_arg`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    bootstrap: str
    security: str = ""


def split_journal(config: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, JournalTarget | None]:
    """``(mem0 config without the journal key, the journal it named or None)``."""
    if config is None:
        return None, None
    rest = {k: v for k, v in config.items() if k != JOURNAL_KEY}
    named = config.get(JOURNAL_KEY)
    if not named:
        return rest, None
    try:
        return rest, JournalTarget.model_validate(named)
    except ValueError as exc:
        raise ValueError(
            f"mem0 config {JOURNAL_KEY!r} must be {{'topic': ..., 'bootstrap': ..., 'security': ''}}: {exc}"
        ) from None


def _ids(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return [str(value)]
    return [str(v) for v in value]


class JournaledVectorStore:
    """A mem0 vector store whose ``insert``/``update``/``delete`` each send a journal record once the store
    returned (``send(value=...)`` of a :class:`~airflow_flink_replay.core.flushed_producer.FlushedProducer`:
    back when the broker has it). Everything else is the wrapped store's."""

    def __init__(self, inner: Any, send: Any) -> None:
        self._afr_inner = inner
        self._afr_send = send

    def _journal(self, op: str, ids: list[str]) -> None:
        if ids:
            self._afr_send(value=json.dumps({"op": op, "ids": ids}, separators=(",", ":")).encode("utf-8"))

    def insert(self, vectors: Any, payloads: Any = None, ids: Any = None, *args: Any, **kwargs: Any) -> Any:
        """The store's insert, then the journal record of ``ids``."""
        result = self._afr_inner.insert(vectors, payloads, ids, *args, **kwargs)
        self._journal("insert", _ids(ids))
        return result

    def update(self, vector_id: Any, *args: Any, **kwargs: Any) -> Any:
        """The store's update, then the journal record of ``vector_id``."""
        result = self._afr_inner.update(vector_id, *args, **kwargs)
        self._journal("update", _ids(vector_id))
        return result

    def delete(self, vector_id: Any, *args: Any, **kwargs: Any) -> Any:
        """The store's delete, then the journal record of ``vector_id``."""
        result = self._afr_inner.delete(vector_id, *args, **kwargs)
        self._journal("delete", _ids(vector_id))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._afr_inner, name)


def journal_memory(memory: Any, target: JournalTarget) -> Any:
    """Wrap ``memory.vector_store`` (a ``mem0.Memory``) so that each of its writes is journaled to ``target``;
    returns ``memory``. Idempotent."""
    if isinstance(memory.vector_store, JournaledVectorStore):
        return memory
    from airflow_flink_replay.core.flushed_producer import FlushedProducer

    producer = FlushedProducer(target.bootstrap, target.security, target.topic, what="memory journal")
    memory.vector_store = JournaledVectorStore(memory.vector_store, producer.send)
    return memory


def journal_ids(value: bytes | str | None) -> list[str]:
    """The memory ids one journal record names ([] for an empty or foreign record)."""
    if not value:
        return []
    try:
        record = json.loads(value)
    except ValueError:
        return []
    ids = record.get("ids") if isinstance(record, dict) else None
    return [str(i) for i in ids] if isinstance(ids, list) else []

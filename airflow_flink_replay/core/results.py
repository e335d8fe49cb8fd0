"""Replay results over Kafka: each variant's outputs and audit on topics of its own, read back exactly.

A replay job shares nothing with Airflow but Kafka and the Flink REST API: it writes its outputs and its audit
records to two per-run topics (:class:`ResultTopics`), created empty before the replay and deleted after it
like the action-state topics. The Airflow side reads both back once the job FINISHED.

**Exact counts with at-least-once writes.** Flink's Kafka sink is at-least-once here (the local broker's
transactions are not usable: its ``read_committed`` consumers see aborted records), so a job restarted from a
checkpoint sends again what it sent after that checkpoint. Every output therefore carries an id,
``_replay.output_id = "<content digest>:<n>"``: a keyed operator after the agent counts, per digest of the
output's content (:func:`output_digest`, the replay's own ``_replay`` bookkeeping left out), how many such
outputs it has seen, in keyed state. A restart restores that count with the checkpoint, so an output sent
again gets the id it had; :class:`ResultReader` keeps the first record of each id. Outputs with the same
content are interchangeable for the comparison, so numbering them per content keeps their multiplicity. An
audit record carries a random ``id`` of its own (a producer's retry could write it twice). Ids are also a
check of completeness: the numbers of one digest run ``1..n``; a gap is reported.

Pure: pydantic only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

__all__ = [
    "OUTPUT_ID",
    "REPLAY_FIELD",
    "AuditTopic",
    "ResultReader",
    "ResultTopics",
    "output_digest",
    "with_output_id",
]

#: The object every replay output carries its replay bookkeeping in (variant, event time, watermark, id).
REPLAY_FIELD = "_replay"
#: The output's id under :data:`REPLAY_FIELD`: ``"<digest>:<n>"``.
OUTPUT_ID = "output_id"


class ResultTopics(BaseModel):
    """The two topics one replay variant writes its results to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outputs: str = Field(description="the variant's outputs (one JSON object a record, with _replay.output_id)")
    audit: str = Field(description="the variant's audit records (one AuditRecord JSON a record)")

    def names(self) -> list[str]:
        """Both topic names."""
        return [self.outputs, self.audit]


class AuditTopic(BaseModel):
    """Where the job side's resource proxies and unmediated-call guard send audit records: a topic, its
    bootstrap servers and the job side's Kafka security as a reference-only JSON
    (:meth:`~airflow_flink_replay.core.kafka_security.KafkaClientSecurity.to_arg`). Travels as the proxies'
    audit target string (a folder path is the other kind: records appended to files)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    bootstrap: str
    security: str = ""

    def target(self) -> str:
        """The audit target string (this model's JSON)."""
        return self.model_dump_json()

    @staticmethod
    def names_topic(target: str) -> bool:
        """Whether an audit target names a topic (this model's JSON) rather than a folder."""
        return target.lstrip().startswith("{")

    @classmethod
    def parse(cls, target: str) -> AuditTopic | None:
        """The topic an audit target names, or None when the target is a folder."""
        return cls.model_validate_json(target) if cls.names_topic(target) else None


def output_digest(output: Mapping[str, Any]) -> str:
    """The digest an output is numbered by: SHA-256 (first 16 hex digits) of its canonical JSON without the
    replay's bookkeeping (:data:`REPLAY_FIELD`: its watermark can differ when the output is sent again after a
    restart)."""
    content = {k: v for k, v in output.items() if k != REPLAY_FIELD}
    text = json.dumps(content, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def with_output_id(text: str, digest: str, n: int) -> str:
    """The output JSON ``text`` with ``_replay.output_id = "<digest>:<n>"``."""
    out = json.loads(text)
    replay = dict(out.get(REPLAY_FIELD) or {})
    replay[OUTPUT_ID] = f"{digest}:{n}"
    out[REPLAY_FIELD] = replay
    return json.dumps(out, sort_keys=True, default=str)


class ResultReader(BaseModel):
    """What reading one result topic found: records read, kept, duplicates dropped, numbering gaps."""

    kind: str = Field(description="'outputs' or 'audit'")
    read: int = 0
    kept: int = 0
    duplicates: int = 0
    without_id: int = 0
    gaps: list[str] = Field(default_factory=list, description="'<digest>:<n>' ids missing below a higher one")
    _seen: set[str] = PrivateAttr(default_factory=set)
    _numbers: dict[str, set[int]] = PrivateAttr(default_factory=dict)

    def keep(self, value: bytes | str) -> bool:
        """Whether the record ``value`` is the first of its id (kept), or a copy sent again (dropped)."""
        self.read += 1
        text = value.decode("utf-8") if isinstance(value, bytes) else value
        record_id = self._id_of(text)
        if record_id is None:
            self.without_id += 1
        elif record_id in self._seen:
            self.duplicates += 1
            return False
        else:
            self._seen.add(record_id)
            if self.kind == "outputs":
                digest, _, n = record_id.rpartition(":")
                if n.isdigit():
                    self._numbers.setdefault(digest, set()).add(int(n))
        self.kept += 1
        return True

    def _id_of(self, text: str) -> str | None:
        try:
            obj = json.loads(text)
        except ValueError:
            return None  # not JSON: kept as is, the comparison names its line
        if not isinstance(obj, dict):
            return None
        if self.kind == "outputs":
            replay = obj.get(REPLAY_FIELD)
            found = replay.get(OUTPUT_ID) if isinstance(replay, dict) else None
        else:
            found = obj.get("id")
        return str(found) if found else None

    def finish(self) -> ResultReader:
        """Note the numbering gaps (call once, after the last record)."""
        self.gaps = sorted(
            f"{digest}:{n}"
            for digest, numbers in self._numbers.items()
            for n in range(1, max(numbers))
            if n not in numbers
        )
        return self

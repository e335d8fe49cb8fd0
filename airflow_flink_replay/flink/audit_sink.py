"""Where the job side's audit records go: a folder (one JSONL file per variant and process) or a Kafka topic.

The resource proxies and the unmediated-call guard are given an audit *target* string: a folder path, or an
:class:`~airflow_flink_replay.core.results.AuditTopic` as JSON (the replay DAG's choice: the Flink processes
then need no folder shared with Airflow). :func:`write_audit` appends to the one or produces to the other, one
flushed record per call (each record its own batch, like the capture tee: the call is in the topic before the
job can finish). The Kafka producer is built once per Python worker and target, with the job side's Kafka
security resolved here, inside Flink.

Imports confluent-kafka and pydantic only (no Airflow, no PyFlink): runs in Flink's Python workers.
"""

from __future__ import annotations

import functools

from airflow_flink_replay.core.audit import AuditRecord, append_audit
from airflow_flink_replay.core.flushed_producer import FlushedProducer
from airflow_flink_replay.core.results import AuditTopic

__all__ = ["KafkaAuditWriter", "is_folder", "write_audit"]

#: Seconds a record may take to reach the broker before the write fails.
FLUSH_TIMEOUT_S = 30.0


class KafkaAuditWriter:
    """Produces audit records to one topic, each flushed before the call returns."""

    def __init__(self, topic: AuditTopic) -> None:
        self.topic = topic
        self._producer = FlushedProducer(topic.bootstrap, topic.security, topic.topic, what="audit",
                                         timeout=FLUSH_TIMEOUT_S)

    def producer_config(self) -> dict[str, object]:
        """The producer's librdkafka config, a secured broker's settings resolved (call it inside Flink)."""
        return self._producer.config()

    def write(self, record: AuditRecord) -> None:
        """Send ``record`` and wait for the broker; raises OSError when it was not delivered."""
        try:
            self._producer.send(key=record.key.encode("utf-8"), value=record.model_dump_json())
        except Exception as exc:  # not delivered, KafkaException, BufferError: the callers handle OSError
            raise OSError(f"audit record not delivered to {self.topic.topic}: {exc}") from exc


@functools.lru_cache(maxsize=16)
def _writer(target: str) -> KafkaAuditWriter:
    topic = AuditTopic.parse(target)
    assert topic is not None  # write_audit checked
    return KafkaAuditWriter(topic)


def is_folder(target: str) -> bool:
    """Whether the audit target is a folder (else a topic; told apart without parsing it: every audited call
    asks)."""
    return not AuditTopic.names_topic(target)


def write_audit(target: str, record: AuditRecord) -> None:
    """Write ``record`` to the audit target: append to the folder's file, or produce to the topic."""
    if is_folder(target):
        append_audit(target, record)
    else:
        _writer(target).write(record)

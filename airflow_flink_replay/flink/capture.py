"""The capture tee: the raw bytes of every record the agent receives, written to a capture topic.

:func:`~airflow_flink_replay.flink.pipeline.apply_agent_job` writes each record, in its ingest operator and
before passing it on, with

- value = the record's raw value **exactly as received** (the bytes the job definition's deserializer is
  given; never re-encoded or normalised), so a replay deserialises the very bytes production did;
- key = the agent key (:func:`key_bytes`), so per-key order holds within a capture partition;
- record timestamp = the event time (the element's timestamp, i.e. the source record's timestamp or the one
  production's watermark operator assigned);
- provenance headers: ``afr-job`` (the production job's name / identifier), ``afr-source-topic`` (the topic
  the job read), ``afr-captured-at`` (wall-clock ms when the tee wrote it).

The tee flushes each record before passing it on, so every record that reached the agent before a
stop-with-savepoint barrier is in the capture topic when the savepoint completes: the capture topic's end
offsets read right after the stop are the replay's start offsets. Delivery is at-least-once: a failover
re-reads the source from the last checkpoint and may capture a record twice (the manifest's offsets make
replays exact regardless, and duplicates are visible as repeated ids).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from airflow_flink_replay.core.audit import key_text_of
from airflow_flink_replay.core.flushed_producer import FlushedProducer

__all__ = ["CaptureConfig", "CaptureWriter", "key_bytes"]


@dataclass(frozen=True)
class CaptureConfig:
    """Where the tee writes, and the provenance it records."""

    bootstrap: str
    topic: str
    job: str
    source_topic: str = ""
    #: :meth:`~airflow_flink_replay.core.kafka_security.KafkaClientSecurity.to_arg` of a secured broker
    #: (references only: this config travels in the job graph; they are resolved when the producer opens)
    security: str = ""


def key_bytes(key: Any) -> bytes:
    """The Kafka key of a captured record: the agent key as bytes (bytes as is, else its text —
    :func:`~airflow_flink_replay.core.audit.key_text_of`, what audit records and cassette entries name the key by
    — as UTF-8). Equal keys, same partition."""
    if isinstance(key, bytes):
        return key
    return key_text_of(key).encode("utf-8")


class CaptureWriter:
    """A Kafka producer writing captured records one at a time, each flushed before the record moves on."""

    def __init__(self, config: CaptureConfig) -> None:
        self.config = config
        self._producer = FlushedProducer(config.bootstrap, config.security, config.topic, what="capture tee")

    def open(self) -> None:
        """Create the producer (in the Flink worker, not where the job is built)."""
        self._producer.open()

    def producer_config(self) -> dict[str, Any]:
        """The producer's librdkafka config, a secured broker's settings resolved (call it inside Flink)."""
        return self._producer.config()

    def write(self, raw: bytes, key: Any, timestamp: int | None) -> None:
        """Write ``raw`` keyed by ``key`` and wait until the broker has it."""
        headers = [
            ("afr-job", self.config.job.encode()),
            ("afr-source-topic", self.config.source_topic.encode()),
            ("afr-captured-at", str(int(time.time() * 1000)).encode()),
        ]
        kwargs: dict[str, Any] = {"key": key_bytes(key), "value": raw, "headers": headers}
        if timestamp is not None and timestamp > 0:
            kwargs["timestamp"] = int(timestamp)
        self._producer.send(**kwargs)

    def close(self) -> None:
        """Flush what is left."""
        self._producer.close()

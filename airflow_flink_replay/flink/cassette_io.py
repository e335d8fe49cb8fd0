"""Cassettes on the job side: production records its mediated calls to the cassette topic, a replay reads them.

Production (its resources wrapped by :func:`~airflow_flink_replay.flink.proxies.record_plan_resources`)
calls through every resource as it always does; for the calls its recording config
(:class:`~airflow_flink_replay.core.cassette.CassetteRecording`) selects, a :class:`CassetteRecorder`
writes one :class:`~airflow_flink_replay.core.cassette.CassetteEntry` per call to the cassette topic, keyed
by the agent key, and waits for the broker (like the capture tee): a call made before a stop-with-savepoint
is in the topic when the savepoint completes, so the cassette's end offsets read then are exactly where the
window's calls start. A failure to record is logged and never fails production.

A replay loads its :class:`~airflow_flink_replay.core.cassette.CassetteWindow` once per Python worker
(:func:`load_cassette`) and the proxies serve from it.

Imports confluent-kafka and pydantic only (no Airflow, no PyFlink): runs in Flink's Python workers.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from typing import Any

from airflow_flink_replay.core.audit import REPLAY_NAMESPACE
from airflow_flink_replay.core.call_match import CallArguments
from airflow_flink_replay.core.cassette import (
    Cassette,
    CassetteEntry,
    CassetteRecording,
    CassetteWindow,
    argument_fields,
    encode_result,
)
from airflow_flink_replay.core.flushed_producer import FlushedProducer

__all__ = ["CassetteRecorder", "consumer_config", "load_cassette", "recorder_for"]

_log = logging.getLogger(__name__)

#: How long a replay waits for its cassette's records before it gives up naming the topic.
READ_TIMEOUT_S = 60.0


class CassetteRecorder:
    """Writes production's selected calls to the cassette topic, one flushed record per call."""

    def __init__(self, recording: CassetteRecording) -> None:
        self.recording = recording
        self._producer = FlushedProducer(recording.bootstrap, recording.security, recording.topic, what="cassette")
        self._lock = threading.Lock()
        self._last_seq = 0
        self.failures = 0

    def _next_seq(self) -> int:
        self._last_seq = max(self._last_seq + 1, time.time_ns() // 1000)
        return self._last_seq

    def records(self, resource_type: str, resource_name: str, method: str) -> bool:
        """Whether this call is recorded."""
        return self.recording.records(resource_type, resource_name, method)

    def record(
        self,
        *,
        resource_type: str,
        resource_name: str,
        method: str,
        key: str,
        args: tuple,
        kwargs: dict,
        result: Any = None,
        error: BaseException | None = None,
    ) -> None:
        """Record one call (its result, or the error it raised) with its arguments one by one (so a replay whose
        model words a free-text argument otherwise is still served it); logs instead of raising."""
        try:
            replace = {self.recording.namespace: REPLAY_NAMESPACE} if self.recording.namespace else None
            arguments = CallArguments.of(args, kwargs, replace)
            digest = arguments.digest
            with self._lock:
                seq = self._next_seq()
                if error is not None:
                    entry = CassetteEntry(
                        resource_type=resource_type, resource_name=resource_name, method=method, key=key,
                        args_digest=digest, seq=seq, error=f"{type(error).__name__}: {error}",
                        **argument_fields(arguments),
                    )
                else:
                    value, codec = encode_result(result)
                    entry = CassetteEntry.recorded(
                        resource_type=resource_type, resource_name=resource_name, method=method, key=key,
                        args_digest=digest, seq=seq, result=value, codec=codec,
                        max_result_bytes=self.recording.max_result_bytes, arguments=arguments,
                    )
                self._produce(entry)
        except Exception as exc:  # recording is production's nicety: never its failure
            self.failures += 1
            _log.warning("cassette: could not record %s %s.%s (%s)", resource_type, resource_name, method, exc)

    def producer_config(self) -> dict[str, Any]:
        """The producer's librdkafka config, a secured broker's settings resolved (call it inside Flink)."""
        return self._producer.config()

    def _produce(self, entry: CassetteEntry) -> None:
        self._producer.send(key=entry.key.encode("utf-8"), value=entry.model_dump_json())


@functools.lru_cache(maxsize=16)
def recorder_for(recording_json: str) -> CassetteRecorder:
    """The process's recorder for one recording config (one producer per Python worker)."""
    return CassetteRecorder(CassetteRecording.model_validate_json(recording_json))


def consumer_config(window: CassetteWindow) -> dict[str, Any]:
    """The cassette reader's librdkafka config, a secured broker's settings resolved (call it inside Flink)."""
    from airflow_flink_replay.core.kafka_security import KafkaClientSecurity

    return {"bootstrap.servers": window.bootstrap, "group.id": f"afr-cassette-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False, "enable.partition.eof": False,
            **KafkaClientSecurity.librdkafka_config_of(window.security)}


@functools.lru_cache(maxsize=16)
def load_cassette(window_json: str) -> Cassette:
    """The cassette of a replay window, read once per Python worker from the cassette topic."""
    window = CassetteWindow.model_validate_json(window_json)
    ranges = window.ranges()
    if not ranges:
        return Cassette()
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(consumer_config(window))
    lines: list[bytes] = []
    try:
        consumer.assign([TopicPartition(window.topic, p, start) for p, (start, _end) in ranges.items()])
        pending = {p: end for p, (_start, end) in ranges.items()}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"cassette topic {window.topic}: partitions {sorted(pending)} not read to their end offsets "
                    f"{pending} within {READ_TIMEOUT_S:.0f} s"
                )
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise RuntimeError(f"cassette topic {window.topic}: {msg.error()}")
            partition, offset, value = int(msg.partition() or 0), int(msg.offset() or 0), msg.value()
            end = pending.get(partition)
            if end is None or offset >= end:
                continue
            if value:
                lines.append(value)
            if offset + 1 >= end:
                del pending[partition]
    finally:
        consumer.close()
    cassette = Cassette.from_jsonl(lines)
    _log.info("cassette %s: %d recorded calls loaded", window.topic, cassette.size)
    return cassette

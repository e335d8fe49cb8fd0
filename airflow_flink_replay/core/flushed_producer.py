"""A Kafka producer that sends each record on its own and waits until the broker has it.

The job side writes four kinds of records this way: production's capture tee, cassette recorder and memory
journal, and a replay's audit records. Each record is its own batch (no lingering, no idempotence:
:func:`~airflow_flink_replay.core.kafka_security.flushed_producer_config`), so a record written before a
stop-with-savepoint is in the topic when the savepoint completes, and the local broker's end offsets stay right.
The producer is created at the first record, in the Flink worker, with the job side's Kafka security resolved
there.

Imports confluent-kafka only (no Airflow, no PyFlink): runs in Flink's Python workers, and sits in ``core`` so that
both job-side packages (``flink`` and ``memory``) can use it.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["FLUSH_TIMEOUT_S", "FlushedProducer"]

#: Seconds a record may take to reach the broker before the write fails.
FLUSH_TIMEOUT_S = 30.0


class FlushedProducer:
    """One topic's producer: :meth:`send` returns once the broker has the record (thread-safe).

    :param bootstrap: the bootstrap servers as the Flink workers reach them.
    :param security: :meth:`~airflow_flink_replay.core.kafka_security.KafkaClientSecurity.to_arg`'s text (references
        only), resolved when the producer is created; empty or None: plaintext.
    :param topic: the topic every record goes to.
    :param what: what the records are, for the error of a record the broker did not take.
    :param timeout: seconds each record may take.
    """

    def __init__(
        self, bootstrap: str, security: str | None, topic: str, *, what: str, timeout: float = FLUSH_TIMEOUT_S
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.topic = topic
        self.what = what
        self.timeout = timeout
        self._producer: Any = None
        self._lock = threading.Lock()

    def config(self) -> dict[str, Any]:
        """The producer's librdkafka config, a secured broker's settings resolved (call it inside Flink)."""
        from airflow_flink_replay.core.kafka_security import flushed_producer_config

        return flushed_producer_config(self.bootstrap, self.security or None)

    def open(self) -> None:
        """Create the producer now (else at the first record)."""
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer(self.config())

    def send(self, **record: Any) -> None:
        """Produce ``record`` (``key``, ``value``, and optionally ``headers``, ``timestamp``) and wait for the
        broker; RuntimeError naming the topic when it did not take the record within the timeout, or answered
        with an error (not authorised, too large, expired before a broker took it)."""
        refused: list[Any] = []

        def delivered(err: Any, _msg: Any) -> None:  # the broker's answer: flush() returns 0 for a refusal too
            if err is not None:
                refused.append(err)

        with self._lock:
            self.open()
            self._producer.produce(self.topic, on_delivery=delivered, **record)
            remaining = self._producer.flush(self.timeout)
        if remaining:  # flush() counts what is still queued: the record, and maybe its pending delivery report
            raise RuntimeError(f"{self.what}: the record was not delivered to {self.topic} within {self.timeout:.0f} s")
        if refused:
            raise RuntimeError(f"{self.what}: the record was not delivered to {self.topic}: {refused[0]}")

    def close(self) -> None:
        """Flush what is left."""
        if self._producer is not None:
            self._producer.flush(self.timeout)

"""The capture tee: the agent's keyed input, written to a capture topic as it enters the agent.

Each record is written with key = the agent key (so per-key order holds within a partition), record
timestamp = the event time (the element's timestamp, i.e. the source record's timestamp), value = the
payload exactly as the agent receives it, and provenance headers:

- ``afr-job``: the production job's name / identifier,
- ``afr-source-topic``: the topic the job read,
- ``afr-captured-at``: wall-clock ms when the tee wrote it.

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

from pyflink.datastream.functions import ProcessFunction, RuntimeContext


@dataclass(frozen=True)
class CaptureConfig:
    """Where and how the tee writes."""

    bootstrap: str
    topic: str
    key_field: str
    job: str
    source_topic: str = ""


class CaptureTee(ProcessFunction):
    """Pass-through ProcessFunction that also writes each record to the capture topic."""

    def __init__(self, config: CaptureConfig) -> None:
        self.config = config
        self._producer: Any = None

    def open(self, runtime_context: RuntimeContext) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(
            {"bootstrap.servers": self.config.bootstrap, "linger.ms": 0, "enable.idempotence": False}
        )

    def process_element(self, value: str, ctx: ProcessFunction.Context):  # type: ignore[override]
        import json

        key = str(json.loads(value)[self.config.key_field])
        ts = ctx.timestamp()
        headers = [
            ("afr-job", self.config.job.encode()),
            ("afr-source-topic", self.config.source_topic.encode()),
            ("afr-captured-at", str(int(time.time() * 1000)).encode()),
        ]
        kwargs: dict[str, Any] = {"key": key.encode(), "value": value.encode(), "headers": headers}
        if ts is not None and ts > 0:
            kwargs["timestamp"] = int(ts)
        self._producer.produce(self.config.topic, **kwargs)
        remaining = self._producer.flush(30)
        if remaining:
            raise RuntimeError(f"capture tee: {remaining} record(s) not delivered to {self.config.topic}")
        yield value

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(30)

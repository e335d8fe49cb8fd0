"""An in-memory stand-in for a Kafka broker as the provider's hooks see it, for unit tests (no broker runs there).

:class:`FakeKafka` plays the two clients a :class:`~airflow_flink_replay.hooks.kafka_offsets.KafkaOffsetsHook`
talks to: the admin client (metadata) and the reading consumer (watermarks, ``assign`` + ``poll`` with
``enable.partition.eof``, ``offsets_for_times``). Records live per topic and partition with their offsets and
timestamps; retention can be played by trimming a partition's start (its low watermark). :func:`on_fake_kafka`
builds any subclass of the hook with both clients swapped for one :class:`FakeKafka`; the hook's own logic
(ranges, ordering, cuts, errors) runs unchanged. The same hooks against the real broker: the integration tests
(test_capture_window.py, test_replay_results_topics.py, test_window_progress.py,
test_kafka_connection_refused.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, TopicPartition

from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook


@dataclass
class StoredRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


@dataclass
class Partition:
    records: list[StoredRecord] = field(default_factory=list)
    #: the first offset still stored (records below it were deleted by retention)
    low: int = 0
    #: the offset the next record gets
    high: int = 0


@dataclass(frozen=True)
class _TopicMeta:
    partitions: dict[int, Any]
    error: Any = None


@dataclass(frozen=True)
class _Metadata:
    topics: dict[str, _TopicMeta]


class FakeMessage:
    """What ``Consumer.poll`` returns: a record, or an event (``error()`` set)."""

    def __init__(self, partition: int, record: StoredRecord | None = None, error: KafkaError | None = None) -> None:
        self._partition, self._record, self._error = partition, record, error

    def partition(self) -> int:
        return self._partition

    def error(self) -> KafkaError | None:
        return self._error

    def offset(self) -> int | None:
        return self._record.offset if self._record else None

    def timestamp(self) -> tuple[int, int]:
        return (TIMESTAMP_CREATE_TIME, self._record.timestamp_ms if self._record else -1)

    def key(self) -> bytes | None:
        return self._record.key if self._record else None

    def value(self) -> bytes | None:
        return self._record.value if self._record else None


class FakeKafka:
    """Topics in memory, read through the admin client's and the consumer's calls the hooks make."""

    def __init__(self) -> None:
        self.topics: dict[str, dict[int, Partition]] = {}
        #: topics whose metadata carries an error (e.g. a leader not available)
        self.topic_errors: dict[str, Any] = {}
        #: the ``topic`` argument of every metadata request (None: all topics)
        self.metadata_requests: list[str | None] = []
        #: (topic, partition) -> the error the next poll on it returns (once)
        self.fail: dict[tuple[str, int], KafkaError] = {}
        #: poll returns nothing at all (a broker that stopped answering)
        self.stalled = False
        #: (topic, partition) -> the high watermark reported instead of the true one (tansu's is wrong after
        #: multi-record batches)
        self.reported_high: dict[tuple[str, int], int] = {}
        self._assigned: dict[tuple[str, int], int] = {}
        self._eof_sent: set[tuple[str, int]] = set()
        self._turn = 0

    # -- writing (the test's side)
    def create(self, topic: str, partitions: int = 1) -> None:
        self.topics[topic] = {p: Partition() for p in range(partitions)}

    def add(self, topic: str, partition: int, timestamp_ms: int, value: bytes | None, key: bytes | None = None) -> int:
        """Append a record; returns its offset."""
        part = self.topics.setdefault(topic, {}).setdefault(partition, Partition())
        part.records.append(StoredRecord(part.high, timestamp_ms, key, value))
        part.high += 1
        return part.high - 1

    def trim(self, topic: str, partition: int, low: int) -> None:
        """Retention deleted every record below ``low``."""
        part = self.topics[topic][partition]
        part.records = [r for r in part.records if r.offset >= low]
        part.low = low

    # -- the admin client
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> _Metadata:
        self.metadata_requests.append(topic)
        return _Metadata(
            {name: _TopicMeta(dict.fromkeys(parts), self.topic_errors.get(name)) for name, parts in self.topics.items()}
        )

    def poll(self, timeout: float = 0) -> FakeMessage | None:
        """The consumer's poll (the admin client's ``poll`` is never reached here: metadata never fails)."""
        if self.stalled or not self._assigned:
            return None
        keys = sorted(self._assigned)
        for step in range(len(keys)):
            tp = keys[(self._turn + step) % len(keys)]
            message = self._next(tp)
            if message is not None:
                self._turn = (self._turn + step + 1) % len(keys)
                return message
        return None

    # -- the consumer
    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        part = self.topics[tp.topic][tp.partition]
        return part.low, self.reported_high.get((tp.topic, tp.partition), part.high)

    def assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            part = self.topics[tp.topic][tp.partition]
            # auto.offset.reset=earliest: an offset outside the log starts at its beginning
            self._assigned[tp.topic, tp.partition] = tp.offset if part.low <= tp.offset <= part.high else part.low
        self._eof_sent.clear()

    def unassign(self) -> None:
        self._assigned.clear()

    @property
    def assigned(self) -> dict[tuple[str, int], int]:
        return dict(self._assigned)

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        out = []
        for tp in partitions:
            records = self.topics[tp.topic][tp.partition].records
            found = next((r.offset for r in records if r.timestamp_ms >= tp.offset), -1)
            out.append(TopicPartition(tp.topic, tp.partition, found))
        return out

    def close(self) -> None:
        self._assigned.clear()

    def _next(self, tp: tuple[str, int]) -> FakeMessage | None:
        if tp in self.fail:
            return FakeMessage(tp[1], error=self.fail.pop(tp))
        part = self.topics[tp[0]][tp[1]]
        position = self._assigned[tp]
        record = next((r for r in part.records if r.offset >= position), None)
        if record is not None:
            self._assigned[tp] = record.offset + 1
            self._eof_sent.discard(tp)
            return FakeMessage(tp[1], record)
        if tp not in self._eof_sent:
            self._eof_sent.add(tp)
            return FakeMessage(tp[1], error=KafkaError(KafkaError._PARTITION_EOF))
        return None


_Hook = TypeVar("_Hook", bound=KafkaOffsetsHook)


class _OnFakeKafka:
    kafka: FakeKafka

    @property
    def admin(self) -> Any:
        return self.kafka

    def _reader(self) -> Any:
        return self.kafka


def on_fake_kafka(hook_class: type[_Hook], kafka: FakeKafka, *args: Any, **kwargs: Any) -> _Hook:
    """An instance of ``hook_class`` (a :class:`KafkaOffsetsHook`) whose admin client and reading consumer are
    ``kafka``; ``args`` and ``kwargs`` go to its constructor (nothing connects)."""
    fake_class = type(f"Fake{hook_class.__name__}", (_OnFakeKafka, hook_class), {})
    hook = fake_class(*args, **kwargs)
    hook.kafka = kafka
    return hook  # type: ignore[return-value]

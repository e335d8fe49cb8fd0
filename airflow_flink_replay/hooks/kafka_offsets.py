"""Offsets, record counts and timestamps of Kafka topics, through the Kafka provider's connection.

:class:`KafkaOffsetsHook` reuses the provider's hooks (``KafkaAdminClientHook`` for metadata and topics,
``KafkaConsumerHook`` for reading) and adds what the replay chain needs:

- ``end_offsets`` / ``begin_offsets`` per partition (the replay start offsets are the capture topic's end
  offsets right after production stopped with a savepoint);
- ``scan``: per-partition record count and first/last record timestamps of an offset range, **by
  consuming it** (``assign`` + seek; no consumer-group join, no commits);
- ``cut_first_records``: the end offsets of exactly the first N records after the start (ordered by
  timestamp, then partition, then offset), for an exact capture window;
- a :class:`TimeIndex` interface for "first offset at or after a timestamp": :class:`BrokerTimeIndex` asks
  the broker (``offsets_for_times``, real Kafka) and :class:`ScanningTimeIndex` consumes (works on brokers
  that do not implement time lookups — tansu returns offset 0 for every timestamp).

The reading consumer never joins a group and never commits: its ``group.id`` is a throw-away name that the
provider's consumer needs to be constructed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.providers.apache.kafka.hooks.client import KafkaAdminClientHook
from airflow.providers.apache.kafka.hooks.consume import KafkaConsumerHook
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from airflow_flink_replay.exceptions import KafkaConnectionError, KafkaTopicError


@dataclass(frozen=True)
class PartitionScan:
    """What reading ``[start, end)`` of one partition found."""

    partition: int
    start_offset: int
    end_offset: int
    record_count: int
    first_timestamp_ms: int | None
    last_timestamp_ms: int | None
    first_offset: int | None
    last_offset: int | None


@dataclass(frozen=True)
class Record:
    """A consumed record (for cuts and tests)."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


class _ReaderConsumerHook(KafkaConsumerHook):
    """The provider's consumer hook, configured for reading ranges: throw-away group, no commits."""

    def _get_client(self, config: dict[str, Any]) -> Consumer:
        cfg = dict(config)
        cfg.setdefault("group.id", f"airflow-flink-replay-reader-{uuid.uuid4().hex[:12]}")
        cfg["enable.auto.commit"] = False
        cfg["enable.auto.offset.store"] = False
        cfg["enable.partition.eof"] = True
        cfg.setdefault("auto.offset.reset", "earliest")
        cfg.setdefault("session.timeout.ms", 6000)
        cfg.setdefault("fetch.wait.max.ms", 50)  # a range read waits for the end of the log, not for more data
        return super()._get_client(cfg)


class _ReportingAdminHook(KafkaAdminClientHook):
    """The provider's admin client hook, its client keeping the errors librdkafka reports (``error_cb``): a
    broker refusing the credentials says why there (``SASL … failed``), a metadata request only says "transport
    failure"."""

    def __init__(self, kafka_config_id: str) -> None:
        super().__init__(kafka_config_id=kafka_config_id)
        self.errors: list[Any] = []

    def _get_client(self, config: dict[str, Any]) -> Any:
        own = config.get("error_cb")

        def on_error(error: Any) -> None:
            self.errors.append(error)
            if callable(own):
                own(error)

        return super()._get_client({**config, "error_cb": on_error})


class KafkaOffsetsHook(KafkaBaseHook):
    """Read offsets, counts and timestamps (connection type ``kafka``); topics are created and deleted by
    its subclass :class:`~airflow_flink_replay.hooks.kafka_topics.KafkaTopicsHook`.

    :param kafka_config_id: the Kafka connection (extra = confluent-kafka config with ``bootstrap.servers``).
    :param timeout: seconds for each metadata / offsets request.
    """

    def __init__(self, kafka_config_id: str = KafkaBaseHook.default_conn_name, timeout: float = 10.0) -> None:
        super().__init__(kafka_config_id=kafka_config_id)
        self.timeout = timeout
        self._admin_hook = _ReportingAdminHook(kafka_config_id)
        self._consumer: Consumer | None = None

    # -- clients -----------------------------------------------------------------------------------
    @property
    def admin(self) -> Any:
        """The provider's AdminClient for this connection."""
        return self._admin_hook.get_conn

    def _reader(self) -> Consumer:
        if self._consumer is None:
            self._consumer = _ReaderConsumerHook(topics=[], kafka_config_id=self.kafka_config_id).get_conn
        return self._consumer

    def close(self) -> None:
        """Close the reading consumer (the hook can be used again afterwards)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def bootstrap_servers(self) -> str:
        """The connection's ``bootstrap.servers`` (host:port list, no credentials)."""
        return str(self.get_connection(self.kafka_config_id).extra_dejson.get("bootstrap.servers", ""))

    # -- metadata ----------------------------------------------------------------------------------
    # Metadata is always requested for ALL topics: a metadata request naming a topic makes brokers with
    # topic auto-creation (tansu always; Kafka with auto.create.topics.enable) create it.
    def _topic_metadata(self, topic: str) -> Any:
        return self._all_topics().get(topic)

    def topic_names(self) -> set[str]:
        """The names of every topic (one metadata request; it never creates one)."""
        return set(self._all_topics())

    def _all_topics(self) -> dict[str, Any]:
        """Every topic's metadata; :class:`KafkaConnectionError` naming the connection when the broker cannot be
        reached or refuses the connection's credentials."""
        try:
            return dict(self.admin.list_topics(timeout=self.timeout).topics)
        except KafkaException as err:
            raise self._unreachable(err) from None

    def _unreachable(self, err: KafkaException) -> KafkaConnectionError:
        self.admin.poll(0.5)  # hands over what librdkafka queued: why the broker closed the connection
        refused = [e for e in self._admin_hook.errors if e.code() == KafkaError._AUTHENTICATION]
        reason = refused[0].str() if refused else str(err.args[0].str() if err.args else err)
        config = self.get_connection(self.kafka_config_id).extra_dejson
        how = ", ".join(f"{k} {config[k]}" for k in ("bootstrap.servers", "security.protocol", "sasl.mechanism")
                        if config.get(k))
        fix = (
            "Fix: the connection's credentials or SASL mechanism (sasl.mechanism, sasl.username, sasl.password) must "
            "be ones the broker accepts"
            if refused
            else "Fix: check the connection's bootstrap.servers and that the broker answers from this worker"
        )
        return KafkaConnectionError(
            f"Kafka connection {self.kafka_config_id!r} ({how}): {'the broker refused it' if refused else 'no answer'}:"
            f" {reason}. {fix}",
            authentication=bool(refused),
        )

    def topic_exists(self, topic: str) -> bool:
        """True when the broker knows the topic (never creates it)."""
        tmeta = self._topic_metadata(topic)
        return tmeta is not None and tmeta.error is None and bool(tmeta.partitions)

    def partitions(self, topic: str) -> list[int]:
        """Partition ids of ``topic``; :class:`KafkaTopicError` when it does not exist."""
        tmeta = self._topic_metadata(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            reason = tmeta.error if tmeta is not None and tmeta.error is not None else "no partitions"
            raise KafkaTopicError(
                f"topic {topic!r} does not exist on connection {self.kafka_config_id!r} ({reason}). "
                "Fix: check the topic name, or create it first"
            )
        return sorted(tmeta.partitions)

    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic's configuration (``cleanup.policy``, …) as the broker reports it."""
        from confluent_kafka.admin import ConfigResource, ResourceType

        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries = self.admin.describe_configs([resource], request_timeout=self.timeout)[resource].result()
        return {name: entry.value for name, entry in entries.items()}

    # -- offsets -----------------------------------------------------------------------------------
    def _watermarks(self, topic: str) -> dict[int, tuple[int, int]]:
        consumer = self._reader()
        out = {}
        for p in self.partitions(topic):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self.timeout, cached=False)
            out[p] = (max(low, 0), max(high, 0))
        return out

    def end_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: high watermark}`` — the offset the next record will get."""
        return {p: high for p, (_low, high) in self._watermarks(topic).items()}

    def begin_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: low watermark}`` — the first offset still stored."""
        return {p: low for p, (low, _high) in self._watermarks(topic).items()}

    def has_data(self, topic: str) -> bool:
        """True when any partition holds a record (high watermark above low watermark)."""
        return any(high > low for low, high in self._watermarks(topic).values())

    # -- reading -----------------------------------------------------------------------------------
    def read(
        self, topic: str, ranges: Mapping[int, tuple[int, int]], *, timeout: float = 60.0
    ) -> dict[int, list[Record]]:
        """Consume ``{partition: (start, end)}`` (end exclusive) and return the records per partition.

        Stops per partition at ``end`` or at the partition's end of log; raises TimeoutError when the range
        cannot be read completely within ``timeout`` seconds. Holds every record: see :meth:`consume`.
        """
        out: dict[int, list[Record]] = {p: [] for p in ranges}
        self.consume(topic, ranges, lambda rec: out[rec.partition].append(rec), timeout=timeout)
        return out

    def consume(
        self,
        topic: str,
        ranges: Mapping[int, tuple[int, int]],
        on_record: Callable[[Record], None],
        *,
        timeout: float = 60.0,
    ) -> None:
        """Stream the records of ``{partition: (start, end)}`` to ``on_record`` in offset order per partition."""
        pending = {p for p, (start, end) in ranges.items() if end > start}
        if not pending:
            return
        consumer = self._reader()
        consumer.assign([TopicPartition(topic, p, ranges[p][0]) for p in sorted(pending)])
        deadline = time.monotonic() + timeout
        try:
            while pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"reading {topic} {sorted(pending)} did not reach the end offsets within {timeout}s"
                    )
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                p = int(msg.partition() or 0)
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # the end of the log right now: everything below it was delivered in order, and a
                        # range reaching past it holds no more records (yet)
                        pending.discard(p)
                        continue
                    raise KafkaTopicError(f"reading {topic}[{p}] failed: {error}")
                if p not in pending:
                    continue
                start, end = ranges[p]
                offset = int(msg.offset() or 0)
                if offset >= end:
                    pending.discard(p)
                    continue
                if offset >= start:
                    _ts_type, ts = msg.timestamp()
                    on_record(Record(p, offset, ts, msg.key(), msg.value()))
                if offset >= end - 1:
                    pending.discard(p)
        finally:
            consumer.unassign()

    def scan(
        self,
        topic: str,
        start_offsets: Mapping[int, int],
        end_offsets: Mapping[int, int],
        *,
        timeout: float = 60.0,
        check: Callable[[Record], str | None] | None = None,
        max_problems: int = 5,
    ) -> dict[int, PartitionScan]:
        """Count the records of ``[start, end)`` per partition and take the first/last record timestamps.

        Streams (holds no records). ``check`` is called on every record; the first ``max_problems`` messages
        it returns are raised as one :class:`ValueError` after the scan (e.g. values that are not JSON).
        """
        missing = set(start_offsets) ^ set(end_offsets)
        if missing:
            raise ValueError(f"start and end offsets cover different partitions: {sorted(missing)}")
        ranges = {int(p): (int(start_offsets[p]), int(end_offsets[p])) for p in start_offsets}
        stats: dict[int, dict[str, Any]] = {p: {"n": 0, "first": None, "last": None} for p in ranges}
        problems: list[str] = []

        def on_record(rec: Record) -> None:
            st = stats[rec.partition]
            st["n"] += 1
            st["first"] = st["first"] or rec
            st["last"] = rec
            if check is not None and len(problems) < max_problems:
                problem = check(rec)
                if problem:
                    problems.append(f"p{rec.partition}@{rec.offset}: {problem}")

        self.consume(topic, ranges, on_record, timeout=timeout)
        if problems:
            raise ValueError("; ".join(problems))
        out = {}
        for p, (start, end) in ranges.items():
            first, last = stats[p]["first"], stats[p]["last"]
            out[p] = PartitionScan(
                partition=p,
                start_offset=start,
                end_offset=end,
                record_count=stats[p]["n"],
                first_timestamp_ms=first.timestamp_ms if first else None,
                last_timestamp_ms=last.timestamp_ms if last else None,
                first_offset=first.offset if first else None,
                last_offset=last.offset if last else None,
            )
        return out

    def cut_first_records(
        self,
        topic: str,
        start_offsets: Mapping[int, int],
        end_offsets: Mapping[int, int],
        n: int,
        *,
        timeout: float = 60.0,
    ) -> dict[int, int]:
        """End offsets that keep exactly the first ``n`` records of the window.

        Records are ordered by (timestamp, partition, offset) across partitions — the closest thing to
        arrival order Kafka offers; within a partition offset order is kept because a cut is a prefix.
        """
        ranges = {int(p): (int(start_offsets[p]), int(end_offsets[p])) for p in start_offsets}
        records = self.read(topic, ranges, timeout=timeout)
        merged = sorted(
            (r for recs in records.values() for r in recs), key=lambda r: (r.timestamp_ms, r.partition, r.offset)
        )
        if len(merged) < n:
            raise ValueError(f"only {len(merged)} records in the window, fewer than the {n} asked for")
        cut = {(r.partition, r.offset) for r in merged[:n]}
        ends = {p: start for p, (start, _end) in ranges.items()}
        for p, recs in records.items():
            k = sum(1 for r in recs if (p, r.offset) in cut)
            if any((p, r.offset) not in cut for r in recs[:k]):
                # timestamps run backwards inside a partition: a timestamp cut is not a prefix
                return _cut_by_offset_order(records, ranges, n)
            if k:
                ends[p] = recs[k - 1].offset + 1
        return ends


def _cut_by_offset_order(
    records: Mapping[int, list[Record]], ranges: Mapping[int, tuple[int, int]], n: int
) -> dict[int, int]:
    """Fallback cut: walk partitions round-robin in offset order until ``n`` records are taken."""
    ends = {p: start for p, (start, _end) in ranges.items()}
    idx = dict.fromkeys(records, 0)
    taken = 0
    while taken < n:
        progressed = False
        for p in sorted(records):
            if taken < n and idx[p] < len(records[p]):
                ends[p] = records[p][idx[p]].offset + 1
                idx[p] += 1
                taken += 1
                progressed = True
        if not progressed:
            break
    return ends


# ------------------------------------------------------------------------------------- time index
class TimeIndex(Protocol):
    """Maps a timestamp to, per partition, the first offset whose record timestamp is >= it."""

    def offsets_for_time(
        self, topic: str, timestamp_ms: int, start_offsets: Mapping[int, int]
    ) -> dict[int, int | None]:
        """``{partition: offset}``; None where no record at or after ``timestamp_ms`` exists yet."""
        ...


class BrokerTimeIndex:
    """Asks the broker (ListOffsets by timestamp). Correct on Apache Kafka; NOT on tansu (always 0)."""

    def __init__(self, hook: KafkaOffsetsHook) -> None:
        self.hook = hook

    def offsets_for_time(
        self, topic: str, timestamp_ms: int, start_offsets: Mapping[int, int]
    ) -> dict[int, int | None]:
        """See :class:`TimeIndex`; offsets before ``start_offsets`` are raised to the start."""
        tps = [TopicPartition(topic, int(p), timestamp_ms) for p in start_offsets]
        found = self.hook._reader().offsets_for_times(tps, timeout=self.hook.timeout)
        out: dict[int, int | None] = {}
        for tp in found:
            out[tp.partition] = None if tp.offset < 0 else max(tp.offset, int(start_offsets[tp.partition]))
        return out


class ScanningTimeIndex:
    """Consumes from the start offsets to the log end: works on any broker, costs a read of the window."""

    def __init__(self, hook: KafkaOffsetsHook, *, timeout: float = 60.0) -> None:
        self.hook = hook
        self.timeout = timeout

    def offsets_for_time(
        self, topic: str, timestamp_ms: int, start_offsets: Mapping[int, int]
    ) -> dict[int, int | None]:
        """See :class:`TimeIndex`."""
        ends = self.hook.end_offsets(topic)
        ranges = {int(p): (int(s), ends[int(p)]) for p, s in start_offsets.items()}
        records = self.hook.read(topic, ranges, timeout=self.timeout)
        return {
            p: next((r.offset for r in recs if r.timestamp_ms >= timestamp_ms), None) for p, recs in records.items()
        }


def time_index(kind: str, hook: KafkaOffsetsHook) -> TimeIndex:
    """``scan`` (any broker) or ``broker`` (Kafka's own time index)."""
    if kind == "scan":
        return ScanningTimeIndex(hook)
    if kind == "broker":
        return BrokerTimeIndex(hook)
    raise ValueError(f"time_index {kind!r} is unknown. Fix: use 'scan' (any broker) or 'broker' (Apache Kafka)")

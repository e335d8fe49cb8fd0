"""Production's memory journal, read on the Airflow side (:mod:`airflow_flink_replay.memory.journal` writes it).

:class:`MemoryJournalHook` extends :class:`~airflow_flink_replay.hooks.kafka_offsets.KafkaOffsetsHook` (the Kafka
provider's connection and consumer) with the two reads the memory cut needs: the journal's position when a
pre-copy begins reading production's namespace, and at the cut every memory id written since, read to the end
of the log (not to a high watermark read beforehand: the cut runs once production stopped, so the end of the log
is final).
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_flink_replay.core.memory_fork import JournalPosition
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook, Record
from airflow_flink_replay.memory.journal import journal_ids

__all__ = ["MemoryJournalHook"]

#: The last offset a range may reach: the journal is read to the end of its log.
_LOG_END = 2**62


class MemoryJournalHook(KafkaOffsetsHook):
    """One memory journal topic on a Kafka connection (connection type ``kafka``).

    :param topic: the journal topic (``production.memory_journal_topic``).
    :param kafka_config_id: the Kafka connection production's topics are on.
    """

    def __init__(self, topic: str, kafka_config_id: str = KafkaOffsetsHook.default_conn_name) -> None:
        super().__init__(kafka_config_id=kafka_config_id)
        self.topic = topic

    def ready(self) -> None:
        """Connect the reading consumer and learn the journal's partitions now (a cut then only fetches)."""
        self._reader().list_topics(self.topic, timeout=self.timeout)
        self.end_offsets(self.topic)

    def position(self) -> JournalPosition:
        """The journal's end offsets now (each journal record is a batch of its own: they are exact)."""
        noted_at = datetime.now(UTC).isoformat()
        return JournalPosition(topic=self.topic, offsets=self.end_offsets(self.topic), noted_at=noted_at)

    def ids_since(self, position: JournalPosition, *, timeout: float = 60.0) -> set[str]:
        """Every memory id the journal names after ``position``, to the end of its log.

        :raises ValueError: ``position`` is another topic's, or the journal lost records after it (retention
            deleted them, or the topic was recreated): the cut cannot trust it.
        """
        if position.topic != self.topic:
            raise ValueError(f"journal position of {position.topic!r} read against {self.topic!r}")
        begin = self.begin_offsets(self.topic)
        lost = {p: (o, begin.get(p, 0)) for p, o in position.offsets.items() if begin.get(p, 0) > o}
        missing = set(position.offsets) - set(begin)
        if lost or missing:
            raise ValueError(
                f"memory journal {self.topic!r} no longer holds every record since the pre-copy "
                f"(position {position.offsets}, log now begins at {begin}). Fix: keep the journal's retention "
                "longer than a replay run"
            )
        ids: set[str] = set()

        def on_record(record: Record) -> None:
            ids.update(journal_ids(record.value))

        ranges = {p: (position.offsets.get(p, low), _LOG_END) for p, low in begin.items()}
        self.consume(self.topic, ranges, on_record, timeout=timeout)
        return ids

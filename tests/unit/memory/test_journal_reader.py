"""Production's memory journal read on the Airflow side (``memory/journal_reader.py``): the journal's position when
a pre-copy begins, and at the cut every memory id written since, to the end of the log — refused when the journal
no longer holds every record since the position (the cut could not trust it).

The broker is ``FakeKafka``, the in-memory stand-in of ``tests/fake_kafka.py`` (no broker runs in the unit
tests). What the cut does with the ids: tests/unit/memory/test_journal.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from airflow_flink_replay.core.memory_fork import JournalPosition
from airflow_flink_replay.exceptions import KafkaTopicError
from airflow_flink_replay.memory.journal_reader import MemoryJournalHook
from tests.fake_kafka import FakeKafka, on_fake_kafka

JOURNAL = "prod-memory-journal"


def write(kafka: FakeKafka, partition: int, op: str, *ids: str) -> None:
    """A journal record as production's journaled vector store writes it."""
    kafka.add(JOURNAL, partition, 1, json.dumps({"op": op, "ids": list(ids)}, separators=(",", ":")).encode())


@pytest.fixture
def kafka() -> FakeKafka:
    broker = FakeKafka()
    broker.create(JOURNAL, 2)
    write(broker, 0, "insert", "m-1", "m-2")
    write(broker, 1, "insert", "m-3")
    return broker


def journal(kafka: FakeKafka, topic: str = JOURNAL) -> MemoryJournalHook:
    return on_fake_kafka(MemoryJournalHook, kafka, topic, kafka_config_id="kafka_unit")


def test_the_position_is_the_journals_end_offsets_now(kafka: FakeKafka) -> None:
    before = datetime.now(UTC)
    position = journal(kafka).position()
    assert (position.topic, position.offsets) == (JOURNAL, {0: 1, 1: 1})
    noted = datetime.fromisoformat(position.noted_at)
    assert noted.tzinfo is not None and before <= noted <= datetime.now(UTC) + timedelta(seconds=1)


def test_ready_learns_the_journals_partitions_and_refuses_a_journal_that_does_not_exist(kafka: FakeKafka) -> None:
    journal(kafka).ready()
    with pytest.raises(KafkaTopicError, match=r"topic 'prod-memory-jornal' does not exist .* Fix: check the topic"):
        journal(kafka, "prod-memory-jornal").ready()


def test_the_ids_written_since_the_position_are_read_to_the_end_of_the_log(kafka: FakeKafka) -> None:
    hook = journal(kafka)
    position = hook.position()
    write(kafka, 0, "update", "m-1")
    write(kafka, 1, "delete", "m-3")
    write(kafka, 1, "insert", "m-4", "m-5")
    kafka.add(JOURNAL, 0, 1, b"not a journal record")  # a foreign record names nothing
    kafka.add(JOURNAL, 0, 1, None)
    kafka.reported_high[JOURNAL, 1] = 2  # a high watermark behind the log: read to its end all the same
    assert hook.ids_since(position) == {"m-1", "m-3", "m-4", "m-5"}
    assert kafka.assigned == {}


def test_nothing_written_since_the_position_is_no_id(kafka: FakeKafka) -> None:
    hook = journal(kafka)
    assert hook.ids_since(hook.position()) == set()


def test_a_partition_the_position_did_not_know_is_read_from_its_first_record(kafka: FakeKafka) -> None:
    position = JournalPosition(topic=JOURNAL, offsets={0: 1}, noted_at=datetime.now(UTC).isoformat())
    write(kafka, 0, "insert", "m-6")
    assert journal(kafka).ids_since(position) == {"m-3", "m-6"}


def test_another_topics_position_is_refused(kafka: FakeKafka) -> None:
    position = JournalPosition(topic="other-journal", offsets={0: 0}, noted_at=datetime.now(UTC).isoformat())
    with pytest.raises(ValueError) as err:
        journal(kafka).ids_since(position)
    assert str(err.value) == "journal position of 'other-journal' read against 'prod-memory-journal'"


def test_records_lost_since_the_position_make_the_journal_untrusted(kafka: FakeKafka) -> None:
    hook = journal(kafka)
    position = hook.position()
    write(kafka, 0, "insert", "m-7")
    write(kafka, 0, "delete", "m-2")
    kafka.trim(JOURNAL, 0, 2)  # retention deleted the record of m-7: its write would go unseen
    with pytest.raises(ValueError) as err:
        hook.ids_since(position)
    message = str(err.value)
    assert message.startswith("memory journal 'prod-memory-journal' no longer holds every record since the pre-copy")
    assert "position {0: 1, 1: 1}, log now begins at {0: 2, 1: 0}" in message
    assert message.endswith("Fix: keep the journal's retention longer than a replay run")


def test_a_partition_gone_since_the_position_makes_the_journal_untrusted(kafka: FakeKafka) -> None:
    """The topic was recreated with fewer partitions: the position names one the journal no longer has."""
    position = JournalPosition(topic=JOURNAL, offsets={0: 1, 1: 1, 2: 0}, noted_at=datetime.now(UTC).isoformat())
    with pytest.raises(ValueError, match="no longer holds every record since the pre-copy"):
        journal(kafka).ids_since(position)


def test_records_deleted_only_up_to_the_position_are_no_loss(kafka: FakeKafka) -> None:
    hook = journal(kafka)
    position = hook.position()
    write(kafka, 0, "insert", "m-8")
    kafka.trim(JOURNAL, 0, 1)  # the record before the position went: nothing the cut needs
    assert hook.ids_since(position) == {"m-8"}

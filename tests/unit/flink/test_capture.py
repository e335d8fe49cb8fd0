"""The capture tee's writer: each captured record keyed by the agent key, its raw bytes unchanged, the event time
as its timestamp, the provenance headers, and flushed before the record moves on.

No broker runs in unit tests: ``confluent_kafka.Producer`` is replaced by :class:`FakeProducer`, which records
what it is given; the writer and its flushed producer are the real ones. (Against a real broker, inside a running
production job: ``test_production_processes_and_captures`` and tests/integration/test_flink_side_contract.py.)
"""

from __future__ import annotations

import pickle
import time
from typing import Any

import confluent_kafka
import pytest

from airflow_flink_replay.flink.capture import CaptureConfig, CaptureWriter, key_bytes


class FakeProducer:
    """A fake of ``confluent_kafka.Producer`` (no broker here): records each call; ``undelivered`` is what a flush
    reports left over."""

    made: list[FakeProducer] = []
    undelivered = 0

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.calls: list[tuple[str, Any]] = []
        FakeProducer.made.append(self)

    def produce(self, topic: str, **record: Any) -> None:
        self.calls.append(("produce", {"topic": topic, **record}))

    def flush(self, timeout: float) -> int:
        self.calls.append(("flush", timeout))
        return FakeProducer.undelivered


@pytest.fixture
def producers(monkeypatch: pytest.MonkeyPatch) -> list[FakeProducer]:
    monkeypatch.setattr(confluent_kafka, "Producer", FakeProducer)
    monkeypatch.setattr(FakeProducer, "made", [])
    monkeypatch.setattr(FakeProducer, "undelivered", 0)
    return FakeProducer.made


CONFIG = CaptureConfig(bootstrap="kafka:9092", topic="reviews-capture", job="reviews-prod", source_topic="reviews")


def _records(producer: FakeProducer) -> list[dict[str, Any]]:
    return [call for kind, call in producer.calls if kind == "produce"]


def test_a_record_keeps_its_bytes_and_is_keyed_by_the_agent_key(producers: list[FakeProducer]) -> None:
    raw = b'{ "id": 7,  "text": "caf\xc3\xa9", "bad": "\xff" }'  # not canonical JSON, not even valid UTF-8
    writer = CaptureWriter(CONFIG)
    writer.open()
    writer.write(raw, 7, 1_767_225_600_123)
    [record] = _records(producers[0])
    assert record["topic"] == "reviews-capture"
    assert record["value"] is raw, "the very bytes the deserializer got"
    assert (record["key"], record["timestamp"]) == (b"7", 1_767_225_600_123)


def test_the_headers_say_which_job_read_which_topic_and_when(producers: list[FakeProducer]) -> None:
    writer = CaptureWriter(CaptureConfig(bootstrap="kafka:9092", topic="cap", job="prod-ü"))
    before = int(time.time() * 1000)
    writer.write(b"{}", "c-1", 5)
    after = int(time.time() * 1000)
    [record] = _records(producers[0])
    headers = dict(record["headers"])
    assert [name for name, _ in record["headers"]] == ["afr-job", "afr-source-topic", "afr-captured-at"]
    assert headers["afr-job"] == "prod-ü".encode() and headers["afr-source-topic"] == b"", "no source topic given"
    assert before <= int(headers["afr-captured-at"]) <= after


@pytest.mark.parametrize("timestamp", [None, 0, -9_223_372_036_854_775_808])
def test_without_an_event_time_the_broker_stamps_the_record(producers: list[FakeProducer], timestamp: Any) -> None:
    """Flink gives no timestamp (None) or Long.MIN_VALUE for an element without one: no timestamp is sent."""
    CaptureWriter(CONFIG).write(b"{}", "c-1", timestamp)
    [record] = _records(producers[0])
    assert "timestamp" not in record


def test_each_record_is_flushed_before_write_returns(producers: list[FakeProducer]) -> None:
    writer = CaptureWriter(CONFIG)
    for i in range(3):
        writer.write(b"{}", f"c-{i}", 10 + i)
    assert [kind for kind, _ in producers[0].calls] == ["produce", "flush"] * 3
    assert len(producers) == 1, "one producer for the writer's life"


def test_a_record_the_broker_did_not_take_fails_the_write_naming_the_tee_and_topic(
    producers: list[FakeProducer],
) -> None:
    FakeProducer.undelivered = 1
    with pytest.raises(
        RuntimeError, match=r"^capture tee: the record was not delivered to reviews-capture within 30 s$"
    ):
        CaptureWriter(CONFIG).write(b"{}", "c-1", 5)


def test_the_producer_is_made_in_the_worker_not_where_the_job_is_built(producers: list[FakeProducer]) -> None:
    writer = CaptureWriter(CONFIG)
    writer.close()  # nothing to flush yet
    assert producers == []
    assert pickle.loads(pickle.dumps(CONFIG)) == CONFIG, "the config travels in the job graph"
    writer.open()
    assert producers[0].config["bootstrap.servers"] == "kafka:9092"
    assert writer.producer_config() == producers[0].config
    writer.close()
    assert producers[0].calls == [("flush", 30.0)]


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("Zoë", "Zoë".encode()),
        (-3, b"-3"),
        (2.5, b"2.5"),
        (True, b"True"),
        ({"b": 1, "a": [2, "x"]}, b'{"a": [2, "x"], "b": 1}'),
        (b"\xff\x00", b"\xff\x00"),
    ],
)
def test_a_key_s_bytes_are_its_text_as_audit_records_name_it(key: Any, expected: bytes) -> None:
    assert key_bytes(key) == expected


def test_equal_keys_give_equal_bytes_so_one_partition() -> None:
    assert key_bytes({"a": 1, "b": 2}) == key_bytes({"b": 2, "a": 1})
    assert key_bytes(12) == key_bytes("12"), "the key's text: a number and its digits share a partition"

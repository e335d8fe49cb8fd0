"""Offsets, counts and timestamps of Kafka topics (``hooks/kafka_offsets.py``).

A connection that points nowhere is real (librdkafka against a closed loopback port). The rest runs the hook's
own logic — ranges, end of log, scans, exact cuts of a window, time look-ups — against ``FakeKafka``, the
in-memory stand-in for the broker (``tests/fake_kafka.py``; no broker runs in the unit tests). The same on the
real broker: tests/integration/test_capture_window.py and test_kafka_connection_refused.py.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError

from airflow_flink_replay.exceptions import KafkaConnectionError, KafkaTopicError
from airflow_flink_replay.hooks.kafka_offsets import (
    BrokerTimeIndex,
    KafkaOffsetsHook,
    PartitionScan,
    ScanningTimeIndex,
    time_index,
)
from tests.fake_kafka import FakeKafka, on_fake_kafka

TOPIC = "capture"


@pytest.fixture
def kafka() -> FakeKafka:
    """Two partitions: p0 holds offsets 0-4 at t = 100, 300, 500, 700, 900; p1 offsets 0-3 at 200, 400, 600, 800."""
    broker = FakeKafka()
    broker.create(TOPIC, 2)
    for i in range(5):
        broker.add(TOPIC, 0, 100 + 200 * i, f'{{"n": {2 * i}}}'.encode(), key=f"k{i}".encode())
    for i in range(4):
        broker.add(TOPIC, 1, 200 + 200 * i, f'{{"n": {2 * i + 1}}}'.encode())
    return broker


@pytest.fixture
def hook(kafka: FakeKafka) -> KafkaOffsetsHook:
    return on_fake_kafka(KafkaOffsetsHook, kafka, kafka_config_id="kafka_unit", timeout=1.0)


# ------------------------------------------------------------------------------------- a broker that is not there
@pytest.fixture
def nowhere(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A ``kafka`` connection to a loopback port nothing listens on, with SASL settings and a password."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    extra = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "replay",
        "sasl.password": "pw-afr-unit-7f3a",
    }
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_NOWHERE", json.dumps({"conn_type": "kafka", "extra": extra}))
    yield f"127.0.0.1:{port}"


def test_a_broker_that_does_not_answer_is_one_error_naming_the_connection_and_the_fix(nowhere: str) -> None:
    real = KafkaOffsetsHook(kafka_config_id="kafka_nowhere", timeout=1.0)
    assert real.bootstrap_servers() == nowhere
    with pytest.raises(KafkaConnectionError) as err:
        real.topic_names()
    message = str(err.value)
    assert message.startswith(
        f"Kafka connection 'kafka_nowhere' (bootstrap.servers {nowhere}, security.protocol SASL_PLAINTEXT, "
        "sasl.mechanism SCRAM-SHA-256): no answer: "
    )
    assert message.endswith(
        "Fix: check the connection's bootstrap.servers and that the broker answers from this worker"
    )
    assert "pw-afr-unit-7f3a" not in message  # the password never reaches an error
    assert err.value.authentication is False
    with pytest.raises(KafkaConnectionError):
        real.end_offsets(TOPIC)  # every read starts with the metadata


# ---------------------------------------------------------------------------------------------- metadata
def test_metadata_is_asked_for_all_topics_never_for_one_by_name(hook: KafkaOffsetsHook, kafka: FakeKafka) -> None:
    """A metadata request naming a topic makes brokers that auto-create topics (tansu always) create it."""
    assert hook.topic_names() == {TOPIC}
    assert not hook.topic_exists("no-such-topic") and hook.topic_exists(TOPIC)
    assert hook.partitions(TOPIC) == [0, 1]
    assert kafka.metadata_requests and set(kafka.metadata_requests) == {None}
    assert "no-such-topic" not in kafka.topics


def test_a_missing_topic_is_refused_naming_it_the_connection_and_the_fix(hook: KafkaOffsetsHook) -> None:
    with pytest.raises(KafkaTopicError) as err:
        hook.partitions("captrue")
    assert str(err.value) == (
        "topic 'captrue' does not exist on connection 'kafka_unit' (no partitions). Fix: check the topic name, or "
        "create it first"
    )


def test_a_topic_whose_metadata_carries_an_error_does_not_exist_and_says_why(
    hook: KafkaOffsetsHook, kafka: FakeKafka
) -> None:
    kafka.topic_errors[TOPIC] = "LEADER_NOT_AVAILABLE"
    assert not hook.topic_exists(TOPIC)
    with pytest.raises(KafkaTopicError, match=r"topic 'capture' does not exist .* \(LEADER_NOT_AVAILABLE\)"):
        hook.end_offsets(TOPIC)


# ------------------------------------------------------------------------------------------------ offsets
def test_begin_and_end_offsets_are_the_watermarks_per_partition(hook: KafkaOffsetsHook, kafka: FakeKafka) -> None:
    assert hook.end_offsets(TOPIC) == {0: 5, 1: 4} and hook.begin_offsets(TOPIC) == {0: 0, 1: 0}
    kafka.trim(TOPIC, 0, 3)  # retention deleted offsets 0-2
    assert hook.begin_offsets(TOPIC) == {0: 3, 1: 0} and hook.end_offsets(TOPIC) == {0: 5, 1: 4}


def test_has_data_only_when_a_partition_holds_a_record(hook: KafkaOffsetsHook, kafka: FakeKafka) -> None:
    kafka.create("empty", 3)
    assert hook.has_data(TOPIC) and not hook.has_data("empty")
    kafka.add("empty", 2, 1, b"x")
    kafka.trim("empty", 2, 1)  # written, then deleted: nothing held
    assert not hook.has_data("empty")


# ------------------------------------------------------------------------------------------------ reading
def test_read_returns_the_records_of_each_range_end_exclusive(hook: KafkaOffsetsHook, kafka: FakeKafka) -> None:
    got = hook.read(TOPIC, {0: (1, 3), 1: (2, 4)})
    assert [(r.offset, r.timestamp_ms, r.key) for r in got[0]] == [(1, 300, b"k1"), (2, 500, b"k2")]
    assert [(r.offset, r.value) for r in got[1]] == [(2, b'{"n": 5}'), (3, b'{"n": 7}')]
    assert kafka.assigned == {}  # unassigned after the read


def test_an_empty_range_is_not_read_and_comes_back_empty(hook: KafkaOffsetsHook, kafka: FakeKafka) -> None:
    assert hook.read(TOPIC, {0: (2, 2), 1: (4, 1)}) == {0: [], 1: []}
    kafka.stalled = True  # nothing would answer: an empty range never waits
    assert hook.read(TOPIC, {0: (0, 0)}, timeout=0.0) == {0: []}


def test_a_range_past_the_end_of_the_log_stops_at_the_end(hook: KafkaOffsetsHook) -> None:
    got = hook.read(TOPIC, {0: (3, 2**62), 1: (0, 1)})
    assert [r.offset for r in got[0]] == [3, 4] and [r.offset for r in got[1]] == [0]


def test_records_are_streamed_in_offset_order_per_partition(hook: KafkaOffsetsHook) -> None:
    seen: list[tuple[int, int]] = []
    hook.consume(TOPIC, {0: (0, 5), 1: (0, 4)}, lambda r: seen.append((r.partition, r.offset)))
    assert [o for p, o in seen if p == 0] == [0, 1, 2, 3, 4] and [o for p, o in seen if p == 1] == [0, 1, 2, 3]


def test_a_read_error_names_the_topic_and_partition(hook: KafkaOffsetsHook, kafka: FakeKafka) -> None:
    kafka.fail[TOPIC, 1] = KafkaError(KafkaError._TRANSPORT)
    with pytest.raises(KafkaTopicError, match=r"^reading capture\[1\] failed: "):
        hook.read(TOPIC, {0: (0, 5), 1: (0, 4)})
    assert kafka.assigned == {}


def test_a_read_that_cannot_finish_in_time_says_which_partitions_are_left(
    hook: KafkaOffsetsHook, kafka: FakeKafka
) -> None:
    kafka.stalled = True
    with pytest.raises(TimeoutError) as err:
        hook.read(TOPIC, {0: (0, 5), 1: (0, 4)}, timeout=0.05)
    assert str(err.value) == "reading capture [0, 1] did not reach the end offsets within 0.05s"
    assert kafka.assigned == {}


# -------------------------------------------------------------------------------------------------- scans
def test_scan_counts_each_range_with_its_first_and_last_record(hook: KafkaOffsetsHook) -> None:
    scans = hook.scan(TOPIC, {0: 1, 1: 4}, {0: 4, 1: 4})
    assert scans[0] == PartitionScan(
        partition=0,
        start_offset=1,
        end_offset=4,
        record_count=3,
        first_timestamp_ms=300,
        last_timestamp_ms=700,
        first_offset=1,
        last_offset=3,
    )
    assert scans[1] == PartitionScan(
        partition=1,
        start_offset=4,
        end_offset=4,
        record_count=0,
        first_timestamp_ms=None,
        last_timestamp_ms=None,
        first_offset=None,
        last_offset=None,
    )


def test_scan_refuses_start_and_end_offsets_of_different_partitions(hook: KafkaOffsetsHook) -> None:
    with pytest.raises(ValueError, match=r"start and end offsets cover different partitions: \[1, 2\]"):
        hook.scan(TOPIC, {0: 0, 1: 0}, {0: 5, 2: 3})


def test_scan_reports_the_first_problems_its_check_finds_after_reading_everything(
    hook: KafkaOffsetsHook, kafka: FakeKafka
) -> None:
    for i in range(8):
        kafka.add(TOPIC, 1, 1000 + i, b"not json")
    checked: list[int] = []

    def check(record: object) -> str | None:
        checked.append(1)
        try:
            json.loads(record.value)  # type: ignore[attr-defined]
        except ValueError:
            return "not JSON"
        return None

    with pytest.raises(ValueError) as err:
        hook.scan(TOPIC, {0: 0, 1: 0}, {0: 5, 1: 12}, check=check, max_problems=3)
    assert str(err.value) == "p1@4: not JSON; p1@5: not JSON; p1@6: not JSON"
    assert len(checked) <= 5 + 4 + 3  # the check is not called once it has enough problems


# --------------------------------------------------------------------------------------------------- cuts
def test_a_cut_keeps_the_first_records_by_timestamp_across_partitions(hook: KafkaOffsetsHook) -> None:
    """The window's records by time: p0@100, p1@200, p0@300, p1@400, p0@500, ... — the first 4 are two of each."""
    assert hook.cut_first_records(TOPIC, {0: 0, 1: 0}, {0: 5, 1: 4}, 4) == {0: 2, 1: 2}
    assert hook.cut_first_records(TOPIC, {0: 0, 1: 0}, {0: 5, 1: 4}, 1) == {0: 1, 1: 0}
    assert hook.cut_first_records(TOPIC, {0: 2, 1: 0}, {0: 5, 1: 4}, 3) == {0: 3, 1: 2}  # from the starts
    assert hook.cut_first_records(TOPIC, {0: 0, 1: 0}, {0: 5, 1: 4}, 0) == {0: 0, 1: 0}


def test_equal_timestamps_are_ordered_by_partition_then_offset(kafka: FakeKafka) -> None:
    kafka.create("same", 2)
    for p in (1, 0):
        for _ in range(2):
            kafka.add("same", p, 50, b"{}")
    hook = on_fake_kafka(KafkaOffsetsHook, kafka, kafka_config_id="kafka_unit")
    assert hook.cut_first_records("same", {0: 0, 1: 0}, {0: 2, 1: 2}, 3) == {0: 2, 1: 1}


def test_timestamps_running_backwards_in_a_partition_cut_in_offset_order_round_robin(kafka: FakeKafka) -> None:
    """A cut by time would not be a prefix of p0 (its offset 1 is older than its offset 0): the records are taken
    one per partition in turn instead."""
    kafka.create("late", 2)
    for ts in (900, 100, 950):
        kafka.add("late", 0, ts, b"{}")
    for ts in (200, 300, 400):
        kafka.add("late", 1, ts, b"{}")
    hook = on_fake_kafka(KafkaOffsetsHook, kafka, kafka_config_id="kafka_unit")
    assert hook.cut_first_records("late", {0: 0, 1: 0}, {0: 3, 1: 3}, 3) == {0: 2, 1: 1}
    assert hook.cut_first_records("late", {0: 0, 1: 0}, {0: 3, 1: 3}, 6) == {0: 3, 1: 3}


def test_a_cut_of_more_records_than_the_window_holds_is_refused(hook: KafkaOffsetsHook) -> None:
    with pytest.raises(ValueError, match=r"^only 9 records in the window, fewer than the 10 asked for$"):
        hook.cut_first_records(TOPIC, {0: 0, 1: 0}, {0: 5, 1: 4}, 10)


# ---------------------------------------------------------------------------------------------- time look-ups
def test_the_time_index_is_chosen_by_name_and_an_unknown_one_says_the_choices(hook: KafkaOffsetsHook) -> None:
    assert isinstance(time_index("scan", hook), ScanningTimeIndex)
    assert isinstance(time_index("broker", hook), BrokerTimeIndex)
    with pytest.raises(ValueError) as err:
        time_index("kafka", hook)
    assert str(err.value) == "time_index 'kafka' is unknown. Fix: use 'scan' (any broker) or 'broker' (Apache Kafka)"


def test_scanning_finds_the_first_offset_at_or_after_a_time_from_the_start_offsets(hook: KafkaOffsetsHook) -> None:
    index = ScanningTimeIndex(hook)
    assert index.offsets_for_time(TOPIC, 450, {0: 0, 1: 0}) == {0: 2, 1: 2}
    assert index.offsets_for_time(TOPIC, 100, {0: 3, 1: 0}) == {0: 3, 1: 0}  # never before the start
    assert index.offsets_for_time(TOPIC, 850, {0: 0, 1: 0}) == {0: 4, 1: None}  # none yet in p1


def test_the_brokers_answer_is_raised_to_the_start_offsets(hook: KafkaOffsetsHook) -> None:
    index = BrokerTimeIndex(hook)
    assert index.offsets_for_time(TOPIC, 450, {0: 0, 1: 3}) == {0: 2, 1: 3}
    assert index.offsets_for_time(TOPIC, 10_000, {0: 0, 1: 0}) == {0: None, 1: None}

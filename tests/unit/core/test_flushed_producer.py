"""A producer that sends each record on its own and waits for the broker (``core/flushed_producer.py``).

No broker runs in the unit tests: the producer here points at a loopback port nothing listens on, so a record is
never delivered and the write must fail, naming what and where. Delivery to a real broker:
tests/integration/test_flink_side.py (capture tee) and test_replay_results_topics.py (audit records).
"""

from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import KafkaException

from airflow_flink_replay.core.flushed_producer import FLUSH_TIMEOUT_S, FlushedProducer
from airflow_flink_replay.core.kafka_security import KafkaClientSecurity


@pytest.fixture(scope="module")
def nowhere() -> str:
    """A loopback address nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_each_record_is_its_own_batch_and_plaintext_without_security() -> None:
    for security in (None, ""):
        producer = FlushedProducer("kafka:9092", security, "capture", what="capture tee")
        assert producer.config() == {"bootstrap.servers": "kafka:9092", "linger.ms": 0, "enable.idempotence": False}
    assert producer.timeout == FLUSH_TIMEOUT_S == 30.0


def test_a_secured_brokers_settings_are_resolved_when_the_config_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    security = KafkaClientSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="tee",
        sasl_password="${env:AFR_TEST_TEE_PASSWORD}",
    ).to_arg()
    producer = FlushedProducer("kafka:9093", security, "capture", what="capture tee")
    assert "AFR_TEST_TEE_PASSWORD" in producer.security and "s3cret" not in producer.security  # a reference only
    monkeypatch.setenv("AFR_TEST_TEE_PASSWORD", "s3cret")
    assert producer.config() == {
        "bootstrap.servers": "kafka:9093",
        "linger.ms": 0,
        "enable.idempotence": False,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "tee",
        "sasl.password": "s3cret",
    }


def test_nothing_connects_before_the_first_record_and_close_without_one_returns_at_once(nowhere: str) -> None:
    producer = FlushedProducer(nowhere, None, "capture", what="capture tee", timeout=5.0)
    started = time.monotonic()
    producer.close()
    assert time.monotonic() - started < 0.5


def test_a_record_the_broker_does_not_take_in_time_fails_naming_what_topic_and_timeout(nowhere: str) -> None:
    producer = FlushedProducer(nowhere, None, "replay-audit-1", what="audit", timeout=1.0)
    started = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        producer.send(key=b"r-1", value=b'{"id": "a-1"}')
    waited = time.monotonic() - started
    assert str(err.value) == "audit: the record was not delivered to replay-audit-1 within 1 s"
    assert 0.9 <= waited < 5.0  # it waited for the broker, bounded by the timeout


def test_a_record_the_producer_cannot_queue_is_an_error_at_once(nowhere: str) -> None:
    """A record above librdkafka's message size is refused when it is produced: raised, not dropped."""
    producer = FlushedProducer(nowhere, None, "capture", what="capture tee", timeout=1.0)
    started = time.monotonic()
    with pytest.raises(KafkaException, match="MSG_SIZE_TOO_LARGE"):
        producer.send(key=b"k", value=b"x" * 2_000_000)
    assert time.monotonic() - started < 0.9


class _Expiring(FlushedProducer):
    """The real producer with a message timeout shorter than the flush's: the record expires in librdkafka's queue
    and flush() returns 0 (nothing is left), the error arriving only in the delivery report."""

    def config(self) -> dict[str, object]:
        return {**super().config(), "message.timeout.ms": 300}


def test_a_record_the_delivery_report_refuses_is_an_error_though_flush_left_nothing(nowhere: str) -> None:
    producer = _Expiring(nowhere, None, "capture-1", what="capture tee", timeout=10.0)
    with pytest.raises(RuntimeError, match=r"capture tee: the record was not delivered to capture-1: .*timed out"):
        producer.send(key=b"k", value=b"v")
    assert producer._producer.flush(0) == 0  # nothing was left to flush: only the report said it failed

"""The audit target: a folder gets JSONL files, a topic gets a producer built with the referenced security."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_flink_replay.core.audit import AuditRecord, read_audit
from airflow_flink_replay.core.kafka_security import KafkaClientSecurity
from airflow_flink_replay.core.results import AuditTopic
from airflow_flink_replay.flink.audit_sink import KafkaAuditWriter, is_folder, write_audit

pytestmark = pytest.mark.unit


def _record() -> AuditRecord:
    return AuditRecord.for_call(variant="baseline", key="k", resource_type="tool", resource_name="t", method="call",
                                args=(1,), kwargs={}, decision="record", outcome="recorded")


def test_a_folder_target_appends_files(tmp_path: Path) -> None:
    record = _record()
    write_audit(str(tmp_path), record)
    assert is_folder(str(tmp_path))
    assert [r.id for r in read_audit(tmp_path)] == [record.id]


def test_a_topic_targets_producer_resolves_the_password_only_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    security = KafkaClientSecurity(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="r",
                                   sasl_password="${env:AFR_AUDIT_PW}", ssl_ca_location="/etc/kafka/ca.pem")
    target = AuditTopic(topic="audit", bootstrap="broker:9093", security=security.to_arg()).target()
    assert not is_folder(target) and "s3cr3t" not in target and "${env:AFR_AUDIT_PW}" in target
    monkeypatch.setenv("AFR_AUDIT_PW", "s3cr3t")
    config = KafkaAuditWriter(AuditTopic.model_validate_json(target)).producer_config()
    assert config["bootstrap.servers"] == "broker:9093" and config["linger.ms"] == 0
    assert (config["security.protocol"], config["sasl.mechanism"], config["sasl.username"], config["sasl.password"],
            config["ssl.ca.location"]) == ("SASL_SSL", "SCRAM-SHA-512", "r", "s3cr3t", "/etc/kafka/ca.pem")


def test_a_broker_that_does_not_answer_fails_the_write_as_oserror(monkeypatch: pytest.MonkeyPatch) -> None:
    """The callers (proxies, the unmediated guard) handle OSError; a record that cannot be delivered says so."""
    import airflow_flink_replay.flink.audit_sink as sink

    monkeypatch.setattr(sink, "FLUSH_TIMEOUT_S", 1.0)
    writer = KafkaAuditWriter(AuditTopic(topic="audit", bootstrap="127.0.0.1:1"))
    with pytest.raises(OSError, match="audit record not delivered to audit"):
        writer.write(_record())

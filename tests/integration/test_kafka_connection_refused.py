"""The preflight against a broker that refuses the Kafka connection's credentials, and one that does not answer.

The stack's broker (tansu) answers a SASL handshake by refusing the mechanism: a connection that asks for
SCRAM-SHA-512 is turned away the way a broker refusing a wrong password or mechanism turns it away. The
preflight, the run's first task, must fail at once (no retry: the broker refuses again) naming the connection
and the broker's reason, without the password; a broker that does not answer is an ordinary, retried failure.
The Flink side of the preflight is a stub here (production's job is not what is checked); Kafka is real.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay.core.replay_spec import ReplaySpec
from airflow_flink_replay.exceptions import KafkaConnectionError
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook
from airflow_flink_replay.operators.preflight import ReplayPreflightOperator
from tests.unit.core.test_replay_spec import _spec
from tests.unit.operators.stubs import StubFlinkHook, job

pytestmark = pytest.mark.timeout(120)

PASSWORD = "afr-refused-password-" + uuid.uuid4().hex[:8]


def _connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict[str, Any]) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kafka", "extra": extra}))
    return conn_id


def _preflight(spec: ReplaySpec) -> None:
    op = ReplayPreflightOperator(task_id="preflight", spec=spec, retries=2)
    op.__dict__["hook"] = StubFlinkHook([job("a" * 32, spec.production.job_name)])
    op.execute({"run_id": "manual__1", "dag": type("D", (), {"dag_id": "dag"})(), "ti": None})


def test_credentials_the_broker_refuses_fail_the_preflight_naming_the_connection(
    stack: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    conn = _connection(monkeypatch, "kafka_refused", {
        "bootstrap.servers": stack.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "replay", "sasl.password": PASSWORD})
    with pytest.raises(KafkaConnectionError) as found:
        KafkaOffsetsHook(kafka_config_id=conn, timeout=5).topic_names()
    assert found.value.authentication is True
    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}", kafka_conn_id=conn))
    with pytest.raises(AirflowFailException) as failed:  # AirflowFailException: not retried
        _preflight(spec)
    message = str(failed.value)
    print(f"\n{message}")
    assert "Kafka connection 'kafka_refused'" in message and "SASL_PLAINTEXT" in message
    assert "the broker refused it" in message and "SCRAM-SHA-512 mechanism handshake failed" in message
    assert "Fix: the connection's credentials or SASL mechanism" in message
    assert PASSWORD not in message


def test_a_broker_that_does_not_answer_is_a_retried_failure(
    stack: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    conn = _connection(monkeypatch, "kafka_nobody", {"bootstrap.servers": "127.0.0.1:1"})
    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}", kafka_conn_id=conn))
    with pytest.raises(Exception) as failed:
        _preflight(spec)
    assert not isinstance(failed.value, AirflowFailException), failed.value
    assert "Kafka connection 'kafka_nobody' (bootstrap.servers 127.0.0.1:1): no answer" in str(failed.value)
    assert "Fix: check the connection's bootstrap.servers" in str(failed.value)

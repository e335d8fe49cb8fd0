"""The job side's Kafka security description: validated where it enters, rendered for the Java clients and
for librdkafka with the references resolved only there, never carrying a value in its program argument."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from airflow_flink_replay.core.kafka_security import KafkaClientSecurity
from airflow_flink_replay.exceptions import SecretReferenceError

PASSWORD = 'p@ss "quoted" \\ back'


def _scram(**over: str) -> KafkaClientSecurity:
    fields = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "replay",
              "sasl_password": "${env:AFR_KAFKA_PASSWORD}", "ssl_ca_location": "/etc/kafka/ca.pem", **over}
    return KafkaClientSecurity.model_validate(fields)


def test_java_properties_carry_the_resolved_password_in_a_jaas_config() -> None:
    props = _scram().java_properties({"AFR_KAFKA_PASSWORD": PASSWORD})
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="replay" '
        'password="p@ss \\"quoted\\" \\\\ back";'
    )
    assert (props["ssl.truststore.type"], props["ssl.truststore.location"]) == ("PEM", "/etc/kafka/ca.pem")


def test_librdkafka_config_names_the_same_settings_its_own_way(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    security = _scram(sasl_mechanism="PLAIN", sasl_password=f"${{file:{secret}}}", security_protocol="SASL_PLAINTEXT",
                      ssl_ca_location="")
    assert security.librdkafka_config() == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                            "sasl.username": "replay", "sasl.password": PASSWORD}
    assert "PlainLoginModule" in security.java_properties()["sasl.jaas.config"]


def test_the_program_argument_holds_the_reference_never_the_value() -> None:
    security = _scram()
    arg = security.to_arg()
    assert "${env:AFR_KAFKA_PASSWORD}" in arg and PASSWORD not in arg
    assert KafkaClientSecurity.from_arg(arg) == security and KafkaClientSecurity.from_arg("") is None
    assert KafkaClientSecurity().java_properties() == {"security.protocol": "PLAINTEXT"}


@pytest.mark.parametrize(("fields", "named"), [
    ({"sasl_password": "hunter2"}, "kafka_security.sasl_password holds a literal value"),
    ({"sasl_username": ""}, "kafka_security.sasl_username: SASL_SSL needs"),
    ({"security_protocol": "SSL"}, "kafka_security.sasl_mechanism: SASL settings with security_protocol SSL"),
    ({"security_protocol": "SASL_PLAINTEXT"}, "kafka_security.ssl_ca_location: no TLS"),
    ({"sasl_mechanism": "GSSAPI"}, "sasl_mechanism"),
])
def test_a_bad_description_is_refused_naming_the_field_and_the_fix(fields: dict[str, str], named: str) -> None:
    with pytest.raises(ValidationError) as err:
        _scram(**fields)
    assert named in str(err.value)
    assert "hunter2" not in str(err.value)


def test_an_unset_reference_fails_where_the_client_is_built_naming_the_field() -> None:
    with pytest.raises(SecretReferenceError, match=r"kafka_security\.sasl_password: \$\{env:AFR_KAFKA_PASSWORD\}"):
        _scram().librdkafka_config({})


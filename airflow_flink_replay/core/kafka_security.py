"""How the job side's Kafka clients authenticate: one description, rendered for each client library.

The Airflow side's clients take the Airflow Kafka connection (the Kafka provider's conventions: its extra
is the confluent-kafka config). The job side gets this model instead — in the replay job spec and in the
production program's arguments — because those are visible (Flink's JobManager log, ``/jobs/{id}/config``):
the password is a reference (``${env:NAME}`` / ``${file:/path}``) resolved inside Flink, where the client
is built. Two libraries build clients there, with different property names:

- the Java clients of Flink's Kafka connector (the replay's bounded source, production's source and sink):
  :meth:`KafkaClientSecurity.java_properties` (``sasl.jaas.config``, a PEM trust store);
- librdkafka through confluent-kafka in the job's Python (the capture tee's producer, the agent check's
  reader of captured records): :meth:`KafkaClientSecurity.librdkafka_config`.

Flink Agents' own action-state store builds its clients from the bootstrap servers only (flink-agents
0.2.0, ``KafkaActionStateStore``): no description reaches it (docs/limitations.md).

Pure: no Airflow, no PyFlink.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from airflow_flink_replay.core.secrets import is_reference, resolve_references

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

_LOGIN_MODULES: dict[str, str] = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class KafkaClientSecurity(BaseModel):
    """Security settings of the job side's Kafka clients (secrets by reference only)."""

    # a validation error must not print the input: it may hold the literal password it refuses
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    security_protocol: Protocol = Field(default="PLAINTEXT", description="Kafka's security.protocol.")
    sasl_mechanism: Mechanism | None = Field(default=None, description="SASL mechanism (SASL_* protocols).")
    sasl_username: str | None = Field(default=None, description="SASL user: a value or a reference.")
    sasl_password: str | None = Field(
        default=None,
        description="SASL password: a reference only, '${env:NAME}' or '${file:/path}' on the Flink hosts.",
    )
    ssl_ca_location: str | None = Field(
        default=None, description="PEM file of the brokers' CA on the Flink hosts (SSL, SASL_SSL); none: the JVM's "
        "and librdkafka's default trust.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> KafkaClientSecurity:
        sasl = self.security_protocol.startswith("SASL_")
        if sasl:
            missing = [n for n in ("sasl_mechanism", "sasl_username", "sasl_password") if not getattr(self, n)]
            if missing:
                raise ValueError(f"kafka_security.{missing[0]}: {self.security_protocol} needs sasl_mechanism, "
                                 "sasl_username and sasl_password. Fix: set them, or use PLAINTEXT / SSL")
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password:
            raise ValueError(f"kafka_security.sasl_mechanism: SASL settings with security_protocol "
                             f"{self.security_protocol}. Fix: use SASL_PLAINTEXT or SASL_SSL, or drop the SASL fields")
        if self.sasl_password is not None and not is_reference(self.sasl_password):
            raise ValueError("kafka_security.sasl_password holds a literal value: it would travel in program "
                             "arguments Flink shows. Fix: '${env:NAME}' or '${file:/path}' resolved on the Flink hosts")
        if self.ssl_ca_location and not self.security_protocol.endswith("SSL"):
            raise ValueError(f"kafka_security.ssl_ca_location: no TLS with security_protocol {self.security_protocol}. "
                             "Fix: use SSL or SASL_SSL, or drop ssl_ca_location")
        return self

    def _resolved(self, env: Mapping[str, str] | None) -> dict[str, Any]:
        return resolve_references(
            {"sasl_username": self.sasl_username, "sasl_password": self.sasl_password}, env, path="kafka_security"
        )

    def java_properties(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """Properties for the Java clients (Flink's Kafka connector), references resolved: call it where the
        client is built, inside Flink."""
        props: dict[str, str] = {"security.protocol": self.security_protocol}
        if self.sasl_mechanism:
            secret = self._resolved(env)
            props["sasl.mechanism"] = self.sasl_mechanism
            props["sasl.jaas.config"] = (
                f"{_LOGIN_MODULES[self.sasl_mechanism]} required username={_jaas_quoted(secret['sasl_username'])} "
                f"password={_jaas_quoted(secret['sasl_password'])};"
            )
        if self.ssl_ca_location:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = self.ssl_ca_location
        return props

    def librdkafka_config(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """Config for confluent-kafka (librdkafka) clients in the job's Python, references resolved."""
        conf: dict[str, str] = {"security.protocol": self.security_protocol}
        if self.sasl_mechanism:
            secret = self._resolved(env)
            conf.update({"sasl.mechanism": self.sasl_mechanism, "sasl.username": str(secret["sasl_username"]),
                         "sasl.password": str(secret["sasl_password"])})
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        return conf

    def to_arg(self) -> str:
        """The JSON a program argument carries (references, never values)."""
        return self.model_dump_json(exclude_none=True)

    @classmethod
    def from_arg(cls, text: str | None) -> KafkaClientSecurity | None:
        """The model from :meth:`to_arg`'s JSON (``None`` or empty: none)."""
        return cls.model_validate(json.loads(text)) if text else None

    @classmethod
    def librdkafka_config_of(cls, text: str | None) -> dict[str, str]:
        """:meth:`librdkafka_config` of the model :meth:`to_arg` gave as ``text`` (references resolved: call it
        where the client is built, inside Flink); empty without one."""
        security = cls.from_arg(text)
        return security.librdkafka_config() if security else {}


def flushed_producer_config(bootstrap: str, security: str | None) -> dict[str, Any]:
    """librdkafka config of a producer that sends each record on its own and waits for it
    (:class:`~airflow_flink_replay.core.flushed_producer.FlushedProducer`): no lingering, no idempotence (tansu
    reports wrong end offsets for batched writes);
    ``security`` is :meth:`KafkaClientSecurity.to_arg`'s text, resolved here."""
    return {"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False,
            **KafkaClientSecurity.librdkafka_config_of(security)}


def _jaas_quoted(value: Any) -> str:
    """A JAAS option value in double quotes (backslashes and quotes escaped)."""
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'

"""Kafka pieces of the jobs: connector jars, py4j-built offsets initializers, the bounded capture source.

PyFlink's ``KafkaOffsetsInitializer.offsets(...)`` points at the shaded SQL-connector classes and fails with
the plain ``flink-connector-kafka`` jar, so initializers are built through py4j from
``org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer`` with
``java.lang.Long`` values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

#: How a source gives the record values: ``bytes`` exactly as stored (PyFlink's ``ByteArraySchema``, what the
#: agent jobs read: the capture tee writes and the deserializer gets these bytes unchanged), or ``text``
#: (``SimpleStringSchema``, UTF-8 decoded; invalid UTF-8 would come back altered).
ValueFormat = Literal["bytes", "text"]


def value_schema(value: ValueFormat) -> Any:
    """The PyFlink deserialization schema for ``value``."""
    from pyflink.common.serialization import ByteArraySchema, SimpleStringSchema

    if value == "bytes":
        return ByteArraySchema()
    if value == "text":
        return SimpleStringSchema()
    raise ValueError(f"value format {value!r} must be 'bytes' or 'text'")


def add_connector_jars(env: Any, jars: Iterable[str]) -> list[str]:
    """``env.add_jars`` the Kafka connector jars (appends; never set ``pipeline.jars``, it replaces).

    Must run BEFORE ``AgentsExecutionEnvironment.get_execution_environment(env)`` (the flink-agents fat jar
    carries another kafka-clients).
    """
    urls = []
    for jar in jars:
        p = Path(jar)
        if not p.is_file():
            raise FileNotFoundError(f"connector jar {jar} not found (stack.json connector_jars)")
        urls.append(p.resolve().as_uri())
    if urls:
        env.add_jars(*urls)
    return urls


def offsets_initializer(topic: str, offsets: Mapping[int, int]) -> Any:
    """A PyFlink ``KafkaOffsetsInitializer`` for explicit per-partition offsets (built through py4j)."""
    from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer
    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import get_java_class

    jvm = get_gateway().jvm
    j_map = jvm.org.apache.flink.python.util.HashMapWrapper(None, get_java_class(jvm.Long))
    for partition, offset in offsets.items():
        j_map.put(jvm.org.apache.kafka.common.TopicPartition(topic, int(partition)), int(offset))
    j_init = jvm.org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer
    return KafkaOffsetsInitializer(j_init.offsets(j_map.asMap()))


def bounded_source(
    bootstrap: str,
    topic: str,
    start_offsets: Mapping[int, int],
    end_offsets: Mapping[int, int],
    group_id: str,
    value: ValueFormat = "text",
    properties: Mapping[str, str] | None = None,
) -> Any:
    """KafkaSource over ``topic`` from ``start_offsets`` to (exclusive) ``end_offsets`` per partition; bounded.

    The job FINISHES by itself once every partition reached its end offset. ``value``: see :data:`ValueFormat`
    (the replay job reads ``bytes``). ``properties``: client properties of a secured broker
    (:meth:`~airflow_flink_replay.core.kafka_security.KafkaClientSecurity.java_properties`).
    """
    from pyflink.datastream.connectors.kafka import KafkaSource

    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(bootstrap)
        .set_topics(topic)
        .set_group_id(group_id)
        .set_starting_offsets(offsets_initializer(topic, start_offsets))
        .set_bounded(offsets_initializer(topic, end_offsets))
        .set_value_only_deserializer(value_schema(value))
        .set_property("partition.discovery.interval.ms", "-1")
    )
    return with_properties(builder, properties).build()


def with_properties(builder: Any, properties: Mapping[str, str] | None) -> Any:
    """``builder`` (a KafkaSource or KafkaSink builder) with each client property set."""
    for key, value in (properties or {}).items():
        builder = builder.set_property(key, value)
    return builder


def unbounded_source(
    bootstrap: str,
    topic: str,
    group_id: str,
    from_earliest: bool = True,
    value: ValueFormat = "bytes",
    properties: Mapping[str, str] | None = None,
) -> Any:
    """Continuous KafkaSource (production): committed group offsets, else earliest/latest; record values as
    ``bytes`` by default (see :data:`ValueFormat`)."""
    from pyflink.datastream.connectors.kafka import KafkaSource
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer

    reset = jvm.org.apache.kafka.clients.consumer.OffsetResetStrategy
    j_init = jvm.org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer
    start = KafkaOffsetsInitializer(j_init.committedOffsets(reset.EARLIEST if from_earliest else reset.LATEST))
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(bootstrap)
        .set_topics(topic)
        .set_group_id(group_id)
        .set_starting_offsets(start)
        .set_value_only_deserializer(value_schema(value))
    )
    return with_properties(builder, properties).build()


def string_sink(bootstrap: str, topic: str, properties: Mapping[str, str] | None = None) -> Any:
    """At-least-once KafkaSink of strings (production output); ``properties`` as for :func:`bounded_source`."""
    from pyflink.common.serialization import SimpleStringSchema
    from pyflink.datastream.connectors.base import DeliveryGuarantee
    from pyflink.datastream.connectors.kafka import KafkaRecordSerializationSchema, KafkaSink

    builder = (
        KafkaSink.builder()
        .set_bootstrap_servers(bootstrap)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(topic)
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE)
    )
    return with_properties(builder, properties).build()

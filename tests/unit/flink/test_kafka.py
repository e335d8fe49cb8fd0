"""The jobs' Kafka pieces as Flink receives them: connector jars appended, explicit offsets as ``java.lang.Long``
per partition, the bounded capture source, production's unbounded source and its at-least-once sink.

Built in the Flink-side Python (PyFlink's local gateway: no cluster, no broker) with the stack's connector jars;
what Flink got is read back from the Java objects (their fields, by reflection). Reading real records through
these sources: tests/integration/test_capture_window_flink.py and the replay integration tests.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.flink.kafka import add_connector_jars
from tests.flink_python import CONNECTOR_JARS, flink_side_facts


def test_a_missing_connector_jar_is_named_with_where_it_is_configured(tmp_path: Path) -> None:
    missing = str(tmp_path / "flink-connector-kafka.jar")
    with pytest.raises(FileNotFoundError) as err:
        add_connector_jars(object(), [missing])  # refused before the environment is used
    assert str(err.value) == f"connector jar {missing} not found (stack.json connector_jars)"


def test_no_jars_leave_the_environment_alone() -> None:
    assert add_connector_jars(object(), []) == []


SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import get_java_class
    from airflow_flink_replay.flink import kafka
    from airflow_flink_replay.flink.environment import job_environment

    jvm = get_gateway().jvm

    def field(obj, name):
        cls = obj.getClass()
        while cls is not None:
            try:
                f = cls.getDeclaredField(name)
            except Exception:
                cls = cls.getSuperclass()
                continue
            f.setAccessible(True)
            return f.get(obj)
        raise KeyError(name)

    def jars(env):
        conf = jvm.org.apache.flink.python.util.PythonConfigUtil.getEnvironmentConfig(
            env._j_stream_execution_environment)
        return dict(conf.toMap()).get("pipeline.jars")

    def all_long(j_map):  # a checked map refuses any value that is not a java.lang.Long
        checked = jvm.java.util.Collections.checkedMap(jvm.java.util.HashMap(), get_java_class(jvm.Object),
                                                       get_java_class(jvm.Long))
        try:
            checked.putAll(j_map)
            return True
        except Exception as exc:
            return "ClassCastException" in str(exc) and "ClassCastException"

    def offsets(initializer):
        j_map = field(initializer, "initialOffsets")
        return {str(k): int(j_map.get(k)) for k in j_map.keySet()}, all_long(j_map)

    out = {}
    relative = [os.path.relpath(j) for j in sys.argv[1:]]  # given relative to the working folder
    env = job_environment()
    out["added"] = kafka.add_connector_jars(env, relative)
    out["jars"] = jars(env)
    untouched = job_environment()
    try:
        kafka.add_connector_jars(untouched, [relative[0], "missing-connector.jar"])
    except FileNotFoundError as exc:
        out["missing"] = str(exc)
    out["jars_after_missing"] = jars(untouched)

    out["schemas"] = {v: type(kafka.value_schema(v)).__name__ for v in ("bytes", "text")}
    try:
        kafka.value_schema("json")
    except ValueError as exc:
        out["bad_schema"] = str(exc)

    init = kafka.offsets_initializer("cap", {0: 3, 2: 9_000_000_000})
    out["initializer"] = [init._j_initializer.getClass().getSimpleName(), *offsets(init._j_initializer)]
    ints = jvm.java.util.HashMap()
    ints.put("p", 3)  # what a plain map gets from Python: an Integer
    out["control_ints"] = all_long(ints)

    for value in ("bytes", "text"):
        source = kafka.bounded_source("kafka:9092", "cap", {0: 1, 1: 0}, {0: 5, 1: 2}, "afr-replay-g", value=value,
                                      properties={"security.protocol": "SASL_SSL"}).get_java_function()
        out[f"bounded_{value}"] = {
            "boundedness": source.getBoundedness().toString(), "type": source.getProducedType().toString(),
            "topics": list(field(field(source, "subscriber"), "topics")), "props": dict(field(source, "props")),
            "start": offsets(field(source, "startingOffsetsInitializer")),
            "stop": offsets(field(source, "stoppingOffsetsInitializer"))}
    out["bounded_default_type"] = kafka.bounded_source(
        "k:1", "cap", {0: 0}, {0: 1}, "g").get_java_function().getProducedType().toString()

    for earliest in (True, False):
        source = kafka.unbounded_source("kafka:9092", "reviews", "prod-g", from_earliest=earliest,
                                        properties={"sasl.mechanism": "PLAIN"}).get_java_function()
        start = field(source, "startingOffsetsInitializer")
        out[f"unbounded_{earliest}"] = {
            "boundedness": source.getBoundedness().toString(), "type": source.getProducedType().toString(),
            "start": [start.getClass().getSimpleName(), field(start, "startingOffset"),
                      field(start, "offsetResetStrategy").toString()],
            "props": dict(field(source, "props"))}

    sink = kafka.string_sink("kafka:9092", "reviews-out", {"security.protocol": "SSL"}).get_java_function()
    serializer = field(sink, "recordSerializer")
    out["sink"] = {"guarantee": field(sink, "deliveryGuarantee").toString(),
                   "config": {k: str(v) for k, v in dict(field(sink, "kafkaProducerConfig")).items()},
                   "topic": field(serializer, "topicSelector").apply(None),
                   "value": field(serializer, "valueSerializationSchema").getClass().getSimpleName()}
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    return flink_side_facts(SCRIPT, *CONNECTOR_JARS, jars=True)


def test_connector_jars_are_appended_as_absolute_file_uris(built: dict[str, Any]) -> None:
    uris = [Path(j).resolve().as_uri() for j in CONNECTOR_JARS]
    assert built["added"] == uris
    assert all(uri in built["jars"] for uri in uris), built["jars"]


def test_one_missing_jar_adds_none(built: dict[str, Any]) -> None:
    assert built["missing"] == "connector jar missing-connector.jar not found (stack.json connector_jars)"
    assert built["jars_after_missing"] is None


def test_record_values_come_as_bytes_or_text_nothing_else(built: dict[str, Any]) -> None:
    assert built["schemas"] == {"bytes": "ByteArraySchema", "text": "SimpleStringSchema"}
    assert built["bad_schema"] == "value format 'json' must be 'bytes' or 'text'"


def test_explicit_offsets_reach_java_per_partition_as_longs(built: dict[str, Any]) -> None:
    kind, offsets, longs = built["initializer"]
    assert kind == "SpecifiedOffsetsInitializer"
    assert offsets == {"cap-0": 3, "cap-2": 9_000_000_000}
    assert longs is True
    assert built["control_ints"] == "ClassCastException", "the check tells an Integer from a Long"


def test_the_bounded_source_reads_the_window_of_one_topic_and_stops(built: dict[str, Any]) -> None:
    source = built["bounded_bytes"]
    assert (source["boundedness"], source["type"], source["topics"]) == ("BOUNDED", "byte[]", ["cap"])
    assert source["start"] == [{"cap-0": 1, "cap-1": 0}, True]
    assert source["stop"] == [{"cap-0": 5, "cap-1": 2}, True]
    props = source["props"]
    assert (props["bootstrap.servers"], props["group.id"]) == ("kafka:9092", "afr-replay-g")
    assert props["partition.discovery.interval.ms"] == "-1", "the window's partitions only"
    assert props["security.protocol"] == "SASL_SSL", "a secured broker's client properties"
    assert built["bounded_text"]["type"] == "String"
    assert built["bounded_default_type"] == "String", "text unless bytes are asked for"


def test_production_s_source_resumes_from_committed_offsets(built: dict[str, Any]) -> None:
    earliest, latest = built["unbounded_True"], built["unbounded_False"]
    assert (earliest["boundedness"], earliest["type"]) == ("CONTINUOUS_UNBOUNDED", "byte[]")
    committed = -3  # KafkaPartitionSplit.COMMITTED_OFFSET
    assert earliest["start"] == ["ReaderHandledOffsetsInitializer", committed, "earliest"]
    assert latest["start"] == ["ReaderHandledOffsetsInitializer", committed, "latest"]
    assert (earliest["props"]["group.id"], earliest["props"]["sasl.mechanism"]) == ("prod-g", "PLAIN")
    assert "partition.discovery.interval.ms" not in earliest["props"], "production discovers new partitions"


def test_the_sink_writes_text_at_least_once_to_its_topic(built: dict[str, Any]) -> None:
    sink = built["sink"]
    assert (sink["guarantee"], sink["topic"], sink["value"]) == ("at-least-once", "reviews-out", "SimpleStringSchema")
    assert (sink["config"]["bootstrap.servers"], sink["config"]["security.protocol"]) == ("kafka:9092", "SSL")

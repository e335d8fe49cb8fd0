"""``apply_agent_job``, the one pipeline production and every replay run: the ingest step (deserialize, key, capture
tee, bad records), the output serializer, the agent runtime's configuration, and the job graph it builds.

Everything runs in the Flink-side Python (``pipeline`` imports PyFlink): the job graph is built in PyFlink's local
gateway and never submitted. The ingest and output functions are called directly, as a task would call them; two
things only a running job has are replaced and named so: :class:`FakeProducer` for ``confluent_kafka.Producer``
(no broker here) and ``Ctx`` for the element's ``ProcessFunction.Context``. (The pipeline running for real:
tests/integration/test_flink_side_contract.py, test_flink_side.py.)
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from tests.flink_python import flink_side_facts

SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, logging
    import confluent_kafka
    from pyflink.common import Types
    from pyflink.java_gateway import get_gateway
    from airflow_flink_replay.flink import pipeline
    from airflow_flink_replay.flink.agent_job import AgentJob, FieldKey, MemoryBinding, json_object
    from airflow_flink_replay.flink.agent_pin import AgentPin
    from airflow_flink_replay.flink.capture import CaptureConfig
    from airflow_flink_replay.flink.environment import job_environment
    from tests.jobs.counter_agent import job as counter
    from tests.jobs.quickstart_job import job as quickstart

    out = {}
    R = pipeline.AgentRuntimeConfig
    out["entries"] = {
        "full": R("kafka:9092", "as-1", "ns-1", 3, {"num-async-threads": 2}).entries(),
        "bare": R("kafka:9092", "as-1", None, None).entries(),
        "zero_partitions": R("kafka:9092", "as-1", "", 0).entries(),
    }

    def raw(value):
        try:
            got = pipeline.raw_bytes(value)
            return [got.decode("latin-1"), got is value]
        except TypeError as exc:
            return str(exc)
    b = b"{\\"id\\": 1}"
    out["raw"] = {"bytes": raw(b), "bytearray": raw(bytearray(b"ab")), "memoryview": raw(memoryview(b"cd")),
                  "text": raw("caf\\u00e9"), "int": raw(7)}

    class FakeProducer:  # a fake of confluent_kafka.Producer: no broker here
        sent = []
        def __init__(self, config):
            self.config = config
        def produce(self, topic, **record):
            FakeProducer.sent.append({"topic": topic, "key": record["key"].decode(),
                                      "value": record["value"].decode("latin-1"), "timestamp": record.get("timestamp")})
        def flush(self, timeout):
            FakeProducer.sent.append("flush")
            return 0
    confluent_kafka.Producer = FakeProducer

    class Ctx:  # stands for the element's ProcessFunction.Context (only a running task has one)
        def __init__(self, timestamp, watermark=None):
            self.ts, self.wm = timestamp, watermark
        def timestamp(self):
            return self.ts
        def timer_service(self):
            return self
        def current_watermark(self):
            return self.wm

    warnings = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("airflow_flink_replay").addHandler(handler)

    by_customer = AgentJob(agent=counter.CounterAgent, key_selector=FieldKey("customer"), deserializer=json_object)
    capture = CaptureConfig(bootstrap="kafka:9092", topic="cap", job="prod", source_topic="reviews")
    ingest = pipeline._Ingest(by_customer, capture)
    ingest.open(None)
    records = [b'{"customer": "c-1", "n": 1}', "{\\"customer\\": 42}", b"not json", b'{"other": 1}',
               b'{"customer": "c-2"}']
    out["ingest"] = []
    for i, value in enumerate(records):
        events = ingest.process_element(value, Ctx(1000 + i))
        out["ingest"].append({"event": next(events, None), "sent_before_yield": len(FakeProducer.sent)})
    ingest.close()
    out["captured"], out["warnings"] = FakeProducer.sent, warnings
    strict = pipeline._Ingest(dataclasses.replace(by_customer, bad_records="fail"), None)
    strict.open(None)
    try:
        next(strict.process_element(b'{"other": "' + b"x" * 300 + b'"}', Ctx(5)))
    except ValueError as exc:
        out["strict"] = [str(exc), type(exc.__cause__).__name__]

    extra = {"_replay": {"variant": "candidate", "partition": None, "offset": None}}
    to_json = pipeline._ToJson(lambda o: {"b": o, "a": [1]}, extra)
    out["to_json"] = to_json(2)
    out["to_json_when"] = pipeline._ToJson(lambda o: {"when": o}, None)(__import__("datetime").date(2026, 1, 2))
    try:
        pipeline._ToJson(lambda o: [o], None)(1)
    except TypeError as exc:
        out["not_a_mapping"] = str(exc)
    timed = pipeline._ToJsonTimed(lambda o: {"id": o, "_replay": "the agent's own"}, extra, "_replay")
    out["timed"] = [next(timed.process_element("r-1", Ctx(1700, 1650))),
                    next(timed.process_element("r-2", Ctx(1800, None)))]
    out["extra_after"] = extra

    def field(obj, name):  # a private field of a Java object
        f = obj.getClass().getDeclaredField(name)
        f.setAccessible(True)
        return f.get(obj)

    def graph(env):
        nodes = {}
        for node in env._generate_stream_graph(clear_transformations=True, job_name="g").getStreamNodes().toArray():
            key = node.getStateKeySerializer()
            fields = [] if key is None else [s.getClass().getSimpleName() for s in field(key, "fieldSerializers")]
            nodes[node.getOperatorName()] = {"uid": node.getTransformationUID(), "key": fields,
                                             "max_parallelism": node.getMaxParallelism()}
        return nodes

    plans = []
    env = job_environment()
    source = env.from_collection(['{"id": "p1", "review": "fine"}'], type_info=Types.STRING())
    memory = MemoryBinding("review_memory", "examples.review_agent.common.memory.ReviewMemory")
    job = dataclasses.replace(quickstart.production, memory=memory,
                              config={"num-async-threads": 3, "kafkaActionStateTopic": "job-own"})
    stream = pipeline.apply_agent_job(
        env, source, job, runtime=R("kafka:9092", "as-replay", "ns-fork"),
        pin=AgentPin(uid="afr-agent", max_parallelism=32), plan_hook=lambda plan, stage: plans.append(plan),
        mem0_config={"vector_store": {"provider": "chroma"}})
    out["output_type"] = str(stream.get_type())
    [plan] = plans
    providers = {t.value: d for t, d in plan.resource_providers.items()}
    out["plan"] = {"type": type(plan).__name__, "config": plan.config.get_conf_data(),
                   "resources": {t: sorted(d) for t, d in providers.items()},
                   "memory": providers["vector_store"]["review_memory"].descriptor.arguments}
    out["graph"] = graph(env)

    env = job_environment()
    source = env.from_collection(["{}"], type_info=Types.STRING())
    pipeline.apply_agent_job(env, source, dataclasses.replace(counter.production, key_type="string"),
                             runtime=R("kafka:9092", "as-2"), pin=AgentPin(), output_timing_key="_replay")
    out["string_keyed"] = graph(env)

    try:
        pipeline.agent_plan_of(object())
    except RuntimeError as exc:
        out["no_plan"] = str(exc)
    print(json.dumps(out, default=str))
    """
)


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    return flink_side_facts(SCRIPT)


def test_the_runtime_configuration_is_the_action_state_store_and_identity(built: dict[str, Any]) -> None:
    entries = built["entries"]
    assert entries["full"] == {
        "actionStateStoreBackend": "kafka", "kafkaBootstrapServers": "kafka:9092", "kafkaActionStateTopic": "as-1",
        "kafkaActionStateTopicNumPartitions": 3, "job-identifier": "ns-1", "num-async-threads": 2,
    }  # fmt: skip
    bare = {"actionStateStoreBackend": "kafka", "kafkaBootstrapServers": "kafka:9092", "kafkaActionStateTopic": "as-1"}
    assert entries["bare"] == bare, "no partitions, no identifier: Flink Agents' defaults"
    assert entries["zero_partitions"] == bare, "0 partitions and an empty identifier are not set either"


def test_source_values_are_taken_as_raw_bytes(built: dict[str, Any]) -> None:
    raw = built["raw"]
    assert raw["bytes"] == ['{"id": 1}', True], "bytes as they are, not copied"
    assert raw["bytearray"] == ["ab", False] and raw["memoryview"] == ["cd", False]
    assert raw["text"] == ["café".encode().decode("latin-1"), False], "text as UTF-8"
    assert raw["int"] == (
        "the source gave a int; apply_agent_job takes a stream of the records' raw values (bytes, e.g. a KafkaSource "
        "with ByteArraySchema, or text)"
    )


def test_ingest_hands_the_agent_the_deserialized_record_and_captures_its_bytes_first(built: dict[str, Any]) -> None:
    first, text = built["ingest"][0], built["ingest"][1]
    assert first["event"] == {"customer": "c-1", "n": 1}
    assert first["sent_before_yield"] == 2, "captured and flushed before the agent gets it"
    assert built["captured"][:2] == [
        {"topic": "cap", "key": "c-1", "value": '{"customer": "c-1", "n": 1}', "timestamp": 1000},
        "flush",
    ]
    assert text["event"] == {"customer": 42}
    assert built["captured"][2] == {"topic": "cap", "key": "42", "value": '{"customer": 42}', "timestamp": 1001}


def test_a_record_the_definition_rejects_is_dropped_with_a_warning_and_never_captured(built: dict[str, Any]) -> None:
    not_json, no_key, last = built["ingest"][2], built["ingest"][3], built["ingest"][4]
    assert not_json["event"] is None and no_key["event"] is None
    assert not_json["sent_before_yield"] == no_key["sent_before_yield"] == 4, "nothing captured for them"
    assert last["event"] == {"customer": "c-2"} and built["captured"][4]["key"] == "c-2"
    assert built["captured"][-1] == "flush", "close flushes what is left"
    assert len(built["warnings"]) == 2
    assert built["warnings"][0].startswith("dropping a record the job definition rejects (")
    assert built["warnings"][0].endswith("b'not json'"), "the rejected record, shown"
    assert "'customer'" in built["warnings"][1], "the key selector's error"


def test_with_bad_records_fail_the_record_stops_the_job_showing_its_start(built: dict[str, Any]) -> None:
    message, cause = built["strict"]
    assert message.startswith("record rejected by the job definition ('customer'): b'{\"other\": \"xxx")
    assert message.endswith("x'") and len(message) < 300, "the first 200 bytes of the record"
    assert cause == "KeyError"


def test_outputs_are_sorted_json_objects_with_the_extra_fields(built: dict[str, Any]) -> None:
    assert (
        built["to_json"] == '{"_replay": {"offset": null, "partition": null, "variant": "candidate"}, "a": [1], "b": 2}'
    )
    assert built["to_json_when"] == '{"when": "2026-01-02"}', "what JSON cannot hold, as text"
    assert built["not_a_mapping"] == "output_serializer returned a list, not a JSON object (a mapping)"


def test_timed_outputs_carry_the_event_time_and_watermark_they_were_written_at(built: dict[str, Any]) -> None:
    first, second = (json.loads(line) for line in built["timed"])
    assert first == {"id": "r-1", "_replay": {"variant": "candidate", "partition": None, "offset": None,
                                               "event_time_ms": 1700, "watermark_ms": 1650}}  # fmt: skip
    assert second["_replay"]["event_time_ms"] == 1800 and second["_replay"]["watermark_ms"] is None
    assert built["extra_after"] == {"_replay": {"variant": "candidate", "partition": None, "offset": None}}, (
        "the shared extra fields are not written into"
    )


def test_the_agent_runs_with_the_runtime_s_store_over_the_job_s_own_options(built: dict[str, Any]) -> None:
    plan = built["plan"]
    assert plan["type"] == "AgentPlan", "the plan hook is given the compiled plan"
    config = plan["config"]
    assert config["kafkaActionStateTopic"] == "as-replay", "the runtime's store wins over the job's option"
    assert (config["job-identifier"], config["num-async-threads"]) == ("ns-fork", 3)


def test_env_resources_and_the_memory_binding_reach_the_plan(built: dict[str, Any]) -> None:
    resources = built["plan"]["resources"]
    assert resources["chat_model_connection"] == ["ollama_server"], "the job's env-level resource"
    assert resources["vector_store"] == ["review_memory"]
    assert built["plan"]["memory"] == {"mem0_config": {"vector_store": {"provider": "chroma"}}}


def test_the_job_graph_pins_the_agent_and_keys_it_as_the_definition_says(built: dict[str, Any]) -> None:
    graph = built["graph"]
    assert graph["action-execute-operator"]["uid"] == "afr-agent"
    assert graph["action-execute-operator"]["max_parallelism"] == 32
    assert graph["action-execute-operator"]["key"] == ["BytePrimitiveArraySerializer"], "pickled keys by default"
    assert graph["ingest, _stream_key_by_map_operator"]["uid"] == "afr-ingest"
    assert built["output_type"] == "String"
    string_keyed = built["string_keyed"]
    assert string_keyed["action-execute-operator"]["key"] == ["StringSerializer"]
    assert string_keyed["action-execute-operator"]["uid"] is None, "an empty pin leaves the agent unpinned"


@pytest.mark.xfail(
    strict=True,
    reason="the output serializer's uid afr-agent-output (module docstring, docs/flink-side.md) is not in the built "
    "job graph: PyFlink chains the serializer into Flink Agents' uid-less output Map and keeps that Map's (absent) "
    "uid; harmless for restores today (both operators are stateless)",
)
def test_the_output_serializer_carries_its_uid(built: dict[str, Any]) -> None:
    uids = {node["uid"] for node in built["graph"].values()}
    assert "afr-agent-output" in uids


def test_a_builder_without_a_plan_is_named_as_a_flink_agents_change(built: dict[str, Any]) -> None:
    assert built["no_plan"] == "cannot find the agent plan on the agent builder (flink-agents version changed?)"

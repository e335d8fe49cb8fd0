"""A stateful PyFlink test job: a keyed counter over a Kafka topic, with optional held (buffered) work.

Input records are ``"<key>,<seq>"`` strings on ``--input-topic``. For every record the keyed operator
adds one to the key's counter (ValueState) and emits ``{"kind": "count", "key", "seq", "count"}`` at once.
With ``--hold`` it also keeps the record in ListState ("pending work") and only emits
``{"kind": "held", "key", "seq"}`` when an event-time timer far in the future fires. Such a timer only
fires at end of input: ``stop`` with ``drain`` sends MAX_WATERMARK, which flushes the held work before the
final savepoint; ``stop`` without drain or a plain savepoint keeps it inside the state.

Runs in the Flink-side venv (pyflink), submitted with the PythonDriver; arguments come after the script.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.common.serialization import SimpleStringSchema
from pyflink.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor

#: Event-time timestamp (ms, year 2096) of the "release held work" timer: only MAX_WATERMARK reaches it.
FAR_FUTURE_MS = 4_000_000_000_000


class CountingFunction(KeyedProcessFunction):
    """Counts records per key; optionally holds each record until end of input."""

    def __init__(self, hold: bool, slow_ms: int = 0, gate: str = "") -> None:
        self.hold = hold
        self.slow_ms = slow_ms
        self.gate = gate

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.held = runtime_context.get_list_state(ListStateDescriptor("held", Types.STRING()))

    def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
        key, seq = value
        if self.slow_ms:
            time.sleep(self.slow_ms / 1000)  # a slow operator: barriers queue behind its backlog
        if self.gate and os.path.exists(self.gate):  # a closed gate holds the record and any barrier behind it
            open(f"{self.gate}.held", "w").close()  # tells the test the operator is held
            started = time.time()
            while os.path.exists(self.gate) and time.time() - started < 180:
                time.sleep(0.05)
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield json.dumps({"kind": "count", "key": key, "seq": seq, "count": count})
        if self.hold:
            self.held.add(str(seq))
            ctx.timer_service().register_event_time_timer(FAR_FUTURE_MS)

    def on_timer(self, timestamp, ctx):  # type: ignore[no-untyped-def]
        for seq in self.held.get() or []:
            yield json.dumps({"kind": "held", "key": ctx.get_current_key(), "seq": int(seq)})
        self.held.clear()


def parse(line: str) -> tuple[str, int]:
    """``"a,7"`` → ``("a", 7)``."""
    key, seq = line.split(",", 1)
    return key, int(seq)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input-topic", required=True)
    parser.add_argument("--output-topic", required=True)
    parser.add_argument("--group-id", default="keyed-counter")
    parser.add_argument("--jars", default="", help="comma-separated connector jar paths")
    parser.add_argument("--counter-uid", default="keyed-counter")
    parser.add_argument("--job-name", default="keyed-counter")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--checkpoint-interval-ms", type=int, default=5000)
    parser.add_argument("--slow-ms", type=int, default=0, help="sleep per record (slow savepoints)")
    parser.add_argument("--gate", default="", help="while this file exists, each record waits (stops in flight)")
    parser.add_argument("--fail", default="", help="raise this message before building the job")
    parser.add_argument(
        "--parallelism", type=int, default=1, help="job parallelism; 0 = the submitter's (-p / parallelism.default)"
    )
    args = parser.parse_args(argv)
    if args.fail:
        raise RuntimeError(args.fail)

    config = Configuration()
    config.set_string("python.fn-execution.bundle.size", "20")
    config.set_string("python.fn-execution.bundle.time", "200")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    for jar in filter(None, args.jars.split(",")):
        env.add_jars(jar if "://" in jar else f"file://{jar}")
    env.enable_checkpointing(args.checkpoint_interval_ms)
    if args.parallelism:
        env.set_parallelism(args.parallelism)

    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(args.bootstrap)
        .set_topics(args.input_topic)
        .set_group_id(args.group_id)
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(SimpleStringSchema())
        .set_properties({"partition.discovery.interval.ms": "0"})
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(args.bootstrap)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(args.output_topic)
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE)
        .set_property("linger.ms", "0")
        .build()
    )
    records = env.from_source(source, WatermarkStrategy.no_watermarks(), "input").uid("input-source")
    counted = (
        records.map(parse, output_type=Types.TUPLE([Types.STRING(), Types.LONG()]))
        .uid("parse")
        .key_by(lambda r: r[0], key_type=Types.STRING())
        .process(CountingFunction(args.hold, args.slow_ms, args.gate), output_type=Types.STRING())
        .uid(args.counter_uid)
        .name("keyed-counter")
    )
    counted.sink_to(sink).uid("output-sink").name("output")
    env.execute(args.job_name)


if __name__ == "__main__":
    main()

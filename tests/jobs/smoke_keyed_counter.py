"""A tiny stateful PyFlink job for the stack smoke test.

Reads a Kafka topic (bounded at its current end), counts records per key in keyed ValueState, and writes
``key,count`` lines to another topic. Arguments: --bootstrap, --source, --sink, --jars (comma-separated).
"""

from __future__ import annotations

import argparse

from pyflink.common import Types, WatermarkStrategy
from pyflink.common.serialization import SimpleStringSchema
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.kafka import (
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor


class CountPerKey(KeyedProcessFunction):
    """Emit ``key,n`` where n is how many records this key has seen (keyed state)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield f"{ctx.get_current_key()},{n}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--unbounded", action="store_true", help="keep running (benchmarks)")
    args = parser.parse_args()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_jars(*[f"file://{j}" for j in args.jars.split(",")])
    env.set_parallelism(1)
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(args.bootstrap)
        .set_topics(args.source)
        .set_group_id(f"smoke-{args.source}")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(SimpleStringSchema())
    )
    if not args.unbounded:
        builder = builder.set_bounded(KafkaOffsetsInitializer.latest())
    source = builder.build()
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(args.bootstrap)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(args.sink)
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .build()
    )
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "smoke-source")
        .key_by(lambda line: line.split(",")[0], key_type=Types.STRING())
        .process(CountPerKey(), output_type=Types.STRING())
        .sink_to(sink)
    )
    env.execute("flink-replay-smoke")


if __name__ == "__main__":
    main()

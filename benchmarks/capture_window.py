"""Benchmark: reading a capture window on the local broker (tansu) and sealing its manifest.

Produces --n records into a --partitions topic (linger 0, flush per record: tansu), then times what the
manifest step does: end offsets, counting + first/last timestamps by consuming the whole window, the exact
cut of the first N/2 records, and building + sealing + writing the manifest. Also times the canonical
digest of a 64-partition manifest. Target: reading the window is not the bottleneck of a replay run
(well under the 8-17 s a bounded replay job takes) for windows of a few thousand records.

    .venv/bin/python benchmarks/capture_window.py [--n 5000] [--partitions 4] [--bootstrap 127.0.0.1:9092]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    args = parser.parse_args(argv)
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="afr-bench-cw-"))
    os.environ["AIRFLOW_CONN_AFR_BENCH_KAFKA"] = json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": args.bootstrap}}
    )
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from airflow_flink_replay.core.manifest import (
        AgentVertex,
        CaptureInput,
        PartitionWindow,
        ProductionSide,
        ReplayManifest,
        SavepointInfo,
    )
    from airflow_flink_replay.core.manifest_io import save_manifest
    from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook

    topic = f"bench-capture-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(10)
    hook = KafkaOffsetsHook("afr_bench_kafka")
    results: dict[str, float] = {}
    try:
        producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 0})
        t0 = time.perf_counter()
        base = int(time.time() * 1000)
        for i in range(args.n):
            value = json.dumps({"customer": f"c{i % 50}", "seq": i, "text": "x" * 200})
            producer.produce(topic, key=f"c{i % 50}", value=value, partition=i % args.partitions, timestamp=base + i)
            producer.flush(10)
        results["produce_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        end = hook.end_offsets(topic)
        results["end_offsets_s"] = time.perf_counter() - t0
        start = dict.fromkeys(end, 0)

        t0 = time.perf_counter()
        scans = hook.scan(topic, start, end, timeout=300)
        results["scan_s"] = time.perf_counter() - t0
        counted = sum(s.record_count for s in scans.values())
        assert counted == args.n, f"counted {counted} of {args.n}"
        results["scan_records_per_s"] = args.n / results["scan_s"]

        t0 = time.perf_counter()
        cut = hook.cut_first_records(topic, start, end, args.n // 2, timeout=300)
        results["cut_first_half_s"] = time.perf_counter() - t0
        assert sum(cut.values()) == args.n // 2

        agent = "4aab10bf863e9ada48b1abaa99285148"
        production = ProductionSide(
            job_id="44036137620ed3b3371375cf3538855a",
            job_name="bench",
            savepoint=SavepointInfo(path="file:///tmp/sp", quiesce_mode="drain"),
            agent=AgentVertex(vertex_id=agent, parallelism=1, max_parallelism=128),
        )

        def capture(parts: dict[int, object]) -> CaptureInput:
            return CaptureInput(
                kafka_conn_id="afr_bench_kafka",
                topic=topic,
                partitions=[
                    PartitionWindow(
                        partition=p,
                        start_offset=0,
                        end_offset=end.get(p, 1),
                        record_count=end.get(p, 1),
                        first_timestamp_ms=base,
                        last_timestamp_ms=base + 1,
                    )
                    for p in parts
                ],
            )

        t0 = time.perf_counter()
        manifest = ReplayManifest(run_id="bench", production=production, capture=capture(scans))
        path = Path(tempfile.mkdtemp(prefix="afr-bench-manifest-")) / "manifest.json"
        save_manifest(manifest, f"file://{path}")
        results["build_seal_write_s"] = time.perf_counter() - t0

        big = ReplayManifest(run_id="bench", production=production, capture=capture(dict.fromkeys(range(64))))
        t0 = time.perf_counter()
        for _ in range(100):
            big.compute_digest()
        results["digest_64_partitions_ms"] = (time.perf_counter() - t0) * 10
    finally:
        hook.close()
        admin.delete_topics([topic])[topic].result(10)
    print(
        json.dumps(
            {"n": args.n, "partitions": args.partitions, **{k: round(v, 4) for k, v in results.items()}}, indent=2
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

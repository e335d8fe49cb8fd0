"""The start offsets ARE the savepoint: a real production agent job with the capture tee, under dag.test().

1. production v1 (issue 4's production job: Kafka source, capture tee, agent, Kafka action-state store)
   processes batch A (M events);
2. DAG: QuiesceAndSavepointOperator (drain) → RecordStartOffsetsOperator → ResumeJobOperator (restore from
   the savepoint) → feed batch B (N events) → CaptureWindowSensor (deferrable, N records) →
   CreateReplayManifestOperator;
3. checks: the start offsets = what batch A left in the capture topic; the restored job wrote exactly from
   those offsets on (the record at each start offset and every later one is a batch-B event, none of batch
   A is captured twice); the manifest lists exactly N records per the per-partition counts;
4. a replay source built from the manifest (a small PyFlink job on the cluster, reading the manifest with
   the pure core loader in the Flink-side venv, bounded source from issue 4) reads exactly those N records.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.manifest_io import load_manifest
from airflow_flink_replay.core.replay_job_spec import load_window_from_manifest
from examples.review_agent.common.generator import generate_reviews, produce_reviews
from examples.review_agent.common.tools import ticket_path
from tests.integration import flink_side_helpers as fh
from tests.integration.test_capture_window import register_and_test

pytestmark = pytest.mark.timeout(600)

RESULTS: dict[str, Any] = {}

READER_JOB = """
import sys
from pyflink.common import WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from airflow_flink_replay.core.manifest_io import load_manifest
from airflow_flink_replay.flink.kafka import add_connector_jars, bounded_source, string_sink

manifest_uri, bootstrap, out_topic, jars, name = sys.argv[1:6]
manifest = load_manifest(manifest_uri)  # verifies the digest (pydantic 2.11 on the Flink side)
window = manifest.capture.replay_window()
env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
add_connector_jars(env, jars.split(","))
source = bounded_source(bootstrap, window["capture_topic"], window["start_offsets"], window["end_offsets"],
                        "afr-it-manifest-reader")
env.from_source(source, WatermarkStrategy.no_watermarks(), "manifest-source").sink_to(
    string_sink(bootstrap, out_topic))
env.execute(name)
"""


def test_start_offsets_link_to_the_savepoint_and_manifest_window(stack: Any, airflow_db: Any, tmp_path: Path) -> None:
    from airflow.sdk import DAG, task

    from airflow_flink_replay.core.flink_models import FlinkPythonProgram
    from airflow_flink_replay.hooks.flink_submit import CliPythonSubmitter
    from airflow_flink_replay.operators.flink import (
        QuiesceAndSavepointOperator,
        QuiesceRef,
        Resubmission,
        ResumeJobOperator,
    )
    from airflow_flink_replay.operators.manifest import (
        CaptureFormat,
        CreateReplayManifestOperator,
        ProductionFacts,
        RecordStartOffsetsOperator,
        WindowScan,
    )
    from airflow_flink_replay.sensors.capture_window import CaptureWindowSensor

    run = uuid.uuid4().hex[:8]
    src, cap, out, replay_out = f"cw-src-{run}", f"cw-cap-{run}", f"cw-out-{run}", f"cw-read-{run}"
    action_topic, collection = f"cw-as-{run}", f"afr-cw-{run}"
    m, n = 6, 5
    batch_a = generate_reviews(m, seed=5, customers=3, id_prefix=f"a{run}", customer_prefix=f"c{run}")
    batch_b = generate_reviews(n, seed=6, customers=3, id_prefix=f"b{run}", customer_prefix=f"c{run}", first_index=m)
    args = fh.production_args(
        run,
        uid="afr-agent",
        collection=collection,
        namespace=f"prod-{run}",
        src=src,
        out=out,
        cap=cap,
        action_topic=action_topic,
        name=f"cw-prod-{run}",
        extra=["--max-parallelism", "128"],
    )
    manifest_uri = f"file://{tmp_path}/manifest.json"
    fh.create_topics((src, 2), (cap, 2), (out, 1), (replay_out, 1))
    jobs: list[str] = []
    timings: dict[str, float] = {}
    # `flink run` everywhere: the client runs here, not in the JobManager's single PythonDriver gateway, which
    # concurrent REST submissions of other helpers on the shared cluster can keep taken
    cli = CliPythonSubmitter(stack.flink_home, flink_conf_dir=stack.flink_conf_dir, java_home=stack.java_home)
    try:
        t0 = time.monotonic()
        p1 = cli.submit(FlinkPythonProgram(entry_point=str(fh.PRODUCTION_JOB), program_args=args), timeout=240).job_id
        jobs.append(p1)
        fh.wait_running_tasks(p1)
        produce_reviews(fh.BOOTSTRAP, src, batch_a)
        fh.wait_topic_count(out, 1, m)
        timings["production_batch_a"] = time.monotonic() - t0

        dag_id = f"issue5_capture_flink_{run}"
        with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
            quiesce = QuiesceAndSavepointOperator(task_id="quiesce", job_id=p1, mode="drain", timeout=120)
            start = RecordStartOffsetsOperator(task_id="start_offsets", topic=cap, quiesce_result=quiesce.output)
            resume = ResumeJobOperator(
                task_id="resume",
                program=FlinkPythonProgram(entry_point=str(fh.PRODUCTION_JOB), program_args=args),
                quiesce=QuiesceRef(result=quiesce.output),
                resubmission=Resubmission(submitter="cli"),
                timeout=240,
            )

            @task
            def feed(_resumed: dict) -> None:
                produce_reviews(fh.BOOTSTRAP, src, batch_b)

            window = CaptureWindowSensor(
                task_id="capture_window",
                start_offsets=start.output,
                min_records=n,
                deferrable=True,
                poll_interval=1.0,
                window_timeout=180,
            )
            manifest = CreateReplayManifestOperator(
                task_id="manifest",
                manifest_uri=manifest_uri,
                window=window.output,
                production=quiesce.output,
                production_facts=ProductionFacts(agent_uid="afr-agent", flink_version="2.2.1"),
                scan=WindowScan(expected_records=n),
                capture_format=CaptureFormat(event_time={"source": "kafka_timestamp"},
                                             watermark={"max_out_of_orderness_ms": 0}),
            )

            @task
            def record(q: dict, s: dict, r: dict, w: dict, mf: dict) -> None:
                RESULTS[dag_id] = {"quiesce": q, "start": s, "resume": r, "window": w, "manifest": mf}

            quiesce >> start >> resume
            fed = feed(resume.output)
            fed >> window >> manifest
            record(quiesce.output, start.output, resume.output, window.output, manifest.output)

        t1 = time.monotonic()
        dr = register_and_test(dag, stack.connections_file)
        timings["dag"] = time.monotonic() - t1
        out_ = RESULTS.get(dag_id, {})
        if out_.get("resume"):
            jobs.append(out_["resume"]["job_id"])
        assert dr.state == "success", out_
        q, start_offsets = out_["quiesce"], {int(p): o for p, o in out_["start"]["offsets"].items()}

        # 1. start offsets = exactly batch A in the capture topic at the savepoint
        captured = fh.read_topic(cap, 2)
        assert sum(start_offsets.values()) == m
        ids_below = {
            json.loads(msg.value())["id"]
            for p, msgs in captured.items()
            for msg in msgs
            if msg.offset() < start_offsets[p]
        }
        assert ids_below == {e["id"] for e in batch_a}
        # 2. the restored job wrote exactly from the recorded offsets on: only batch B, once each, from start
        above = [
            (p, msg.offset(), json.loads(msg.value())["id"])
            for p, msgs in captured.items()
            for msg in msgs
            if msg.offset() >= start_offsets[p]
        ]
        assert sorted(i for _, _, i in above) == sorted(e["id"] for e in batch_b)
        for p in start_offsets:
            offs = sorted(o for pp, o, _ in above if pp == p)
            assert offs == list(range(start_offsets[p], start_offsets[p] + len(offs)))
        # 3. the manifest: linked to the savepoint, exactly N records per the per-partition counts
        mf = load_manifest(manifest_uri)
        assert mf.production.savepoint.path == q["savepoint_path"] and mf.production.savepoint.quiesce_mode == "drain"
        assert mf.production.job_id == p1 and mf.production.agent.max_parallelism == 128
        assert mf.capture.start_offsets() == start_offsets
        assert mf.capture.record_count == n
        per_partition = {p: sum(1 for pp, _, _ in above if pp == p) for p in start_offsets}
        assert {w.partition: w.record_count for w in mf.capture.partitions} == per_partition
        assert mf.capture.end_offsets() == {p: start_offsets[p] + c for p, c in per_partition.items()}
        # issue 4's replay-job reader sees the same window
        w4 = load_window_from_manifest(manifest_uri)
        assert (w4.start_offsets, w4.end_offsets) == (mf.capture.start_offsets(), mf.capture.end_offsets())

        # 4. a replay source built from the manifest reads exactly those N records
        t2 = time.monotonic()
        script = tmp_path / "manifest_reader_job.py"
        script.write_text(READER_JOB)
        reader = cli.submit(
            FlinkPythonProgram(
                entry_point=str(script),
                program_args=[manifest_uri, fh.BOOTSTRAP, replay_out, ",".join(fh.JARS), f"cw-read-{run}"],
            ),
            timeout=240,
        ).job_id
        jobs.append(reader)
        fh.wait_state(reader, {"FINISHED"}, timeout=180)
        read = [json.loads(msg.value())["id"] for msgs in fh.read_topic(replay_out, 1).values() for msg in msgs]
        timings["reader"] = time.monotonic() - t2
        assert sorted(read) == sorted(e["id"] for e in batch_b)
        print(f"timings: {timings}")
    finally:
        for jid in jobs:
            fh.cancel(jid)
        fh.delete_topics(src, cap, out, replay_out, action_topic)
        # the quiesce wrote into <cluster savepoint dir>/<dag_id>/<run_id>/: remove the DAG's whole folder,
        # also when the run failed before it could report its savepoint
        shutil.rmtree(Path(stack.savepoint_dir) / f"issue5_capture_flink_{run}", ignore_errors=True)
        for e in batch_a + batch_b:
            ticket_path(e["id"]).unlink(missing_ok=True)
        try:
            import chromadb

            chromadb.HttpClient(host="127.0.0.1", port=8000).delete_collection(collection)
        except Exception:
            pass

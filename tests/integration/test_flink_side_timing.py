"""A replay built from a manifest runs production's event time and watermark strategy (Flink-side venv, no job).

The script below builds the replay job's pipeline exactly as ``replay_job.py`` does (``build_replay`` with a
``ReplayJobSpec`` whose window is a sealed manifest), finds the watermark operator in the built transformation
graph and drives the Java ``WatermarkStrategy`` it carries: events in, periodic emits, a controllable
input-activity clock for idleness. The manifest says event time = ``$.ts``, 1 h out-of-orderness, 30 s
idleness; a second spec overrides all three from the spec (monotonous, never idle, Kafka record timestamp), a
third turns watermarks off. Runs in a subprocess with ``.stack/flink-venv`` (PyFlink 2.2, flink-agents 0.2.0).

The real replay jobs of ``test_flink_side.py`` carry the same manifest; their outputs show the event time
reaching the agent. (Their watermarks are not informative: a bounded replay reads its whole window before the
first periodic watermark, so the outputs see none until the final one.)
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOUR = 3_600_000

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from pyflink.java_gateway import get_gateway
    from airflow_flink_replay.core.manifest import ReplayManifest
    from airflow_flink_replay.core.manifest_io import save_manifest
    from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
    from airflow_flink_replay.flink.environment import job_environment
    from airflow_flink_replay.flink.replay_job import REPLAY_WATERMARK_UID, build_replay

    tmp, jars = Path(sys.argv[1]), sys.argv[2].split(",")
    manifest = ReplayManifest.model_validate({
        "run_id": "timing", "production": {
            "job_id": "4" * 32, "job_name": "prod", "savepoint": {"path": "file:///tmp/sp", "quiesce_mode": "drain"},
            "agent": {"vertex_id": "a" * 32, "parallelism": 1, "max_parallelism": 128}},
        "capture": {"kafka_conn_id": "kafka_default", "topic": "cap", "partitions": [
            {"partition": 0, "start_offset": 0, "end_offset": 2, "record_count": 2,
             "first_timestamp_ms": 1, "last_timestamp_ms": 2}],
            "event_time": {"source": "field", "field": "$.ts"},
            "watermark": {"max_out_of_orderness_ms": 3600000, "idleness_ms": 30000}}})
    save_manifest(manifest, tmp / "manifest.json")


    class Clock:
        def __init__(self): self.ms = 0
        def relativeTimeMillis(self): return self.ms
        def relativeTimeNanos(self): return self.ms * 1_000_000
        class Java: implements = ["org.apache.flink.util.clock.RelativeClock"]


    class Context:
        def __init__(self, clock): self.clock = clock
        def getMetricGroup(self): return get_gateway().jvm.org.apache.flink.metrics.groups.UnregisteredMetricsGroup()
        def getInputActivityClock(self): return self.clock
        class Java: implements = ["org.apache.flink.api.common.eventtime.WatermarkGeneratorSupplier$Context"]


    class Output:
        def __init__(self): self.seen = []
        def emitWatermark(self, watermark): self.seen.append(watermark.getTimestamp())
        def markIdle(self): self.seen.append("idle")
        def markActive(self): self.seen.append("active")
        class Java: implements = ["org.apache.flink.api.common.eventtime.WatermarkOutput"]


    def graph(stream):
        stack, seen, nodes = [stream._j_data_stream.getTransformation()], set(), []
        while stack:
            t = stack.pop()
            if t.getId() not in seen:
                seen.add(t.getId())
                nodes.append(t)
                stack.extend(list(t.getInputs()))
        return nodes


    def drive(strategy):
        clock, out = Clock(), Output()
        gen = strategy.createWatermarkGenerator(Context(clock))
        gen.onPeriodicEmit(out)
        for ts in (10_000_000, 50_000_000, 30_000_000):  # out of order
            gen.onEvent(None, ts, out)
        for ms in (200, 400, 30_000, 30_600):  # then no input: idle once 30 s passed without any
            clock.ms = ms
            gen.onPeriodicEmit(out)
        return out.seen


    result = {}
    for name, overrides in {
        "manifest": {},
        "overridden": {"watermark": "monotonous", "watermark_idleness_ms": 0,
                       "event_time": {"source": "kafka_timestamp"}},
        "no_watermarks": {"watermark": "none", "event_time": {"source": "kafka_timestamp"}},
    }.items():
        spec = ReplayJobSpec(
            variant=name, agent_factory="examples.review_agent.v1.agent:build_agent", job_identifier="ns",
            action_state_topic="as", output_dir=str(tmp / name / "out"), audit_dir=str(tmp / name / "audit"),
            kafka_bootstrap="127.0.0.1:1", manifest=(tmp / "manifest.json").as_uri(), connector_jars=jars,
            agent_uid="afr-agent", **overrides)
        nodes = graph(build_replay(job_environment(), spec))
        assigners = [t for t in nodes if t.getClass().getSimpleName() == "TimestampsAndWatermarksTransformation"]
        result[name] = {
            "names": [t.getName() for t in nodes],
            "watermark_uid": [t.getName() for t in nodes if t.getUid() == REPLAY_WATERMARK_UID],
            "watermarks": [drive(t.getWatermarkStrategy()) for t in assigners],
        }
    print(json.dumps(result))
    """
)


@pytest.fixture(scope="module")
def built(stack, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("timing")
    proc = subprocess.run(
        [stack.flink_python, "-c", SCRIPT, str(tmp), ",".join(stack.connector_jars)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_manifest_strategy_is_the_replays(built) -> None:
    got = built["manifest"]
    # event time from the $.ts field: PyFlink's extract / assign / remove operators, the last one pinned
    assert "Extract-Timestamp" in got["names"] and got["watermark_uid"] == ["Remove-Timestamp"]
    # 1 h out-of-orderness: max event time so far - 1 h - 1 ms; idle after 30 s without input
    # (inactivity counts from the first emit without input, 400 ms: idle at 30 600 ms, not at 30 000 ms)
    assert got["watermarks"] == [[-(2**63)] + [50_000_000 - HOUR - 1] * 3 + ["idle"]]


def test_spec_values_override_the_manifest(built) -> None:
    got = built["overridden"]
    assert "Extract-Timestamp" not in got["names"], "Kafka record timestamps: no Python timestamp extraction"
    assert got["watermark_uid"] == ["Timestamps/Watermarks"]
    assert got["watermarks"] == [[-(2**63)] + [50_000_000 - 1] * 4], "monotonous and never idle"


def test_no_watermarks_means_no_operator(built) -> None:
    got = built["no_watermarks"]
    assert got["watermarks"] == [] and got["watermark_uid"] == []

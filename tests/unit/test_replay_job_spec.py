"""ReplayJobSpec: argv round trip, manifest windows, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from airflow_flink_replay.core.policy import ReplayPolicy
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec, load_window_from_manifest

BASE = {
    "variant": "candidate", "agent_factory": "examples.review_agent.v2.agent:build_agent",
    "job_identifier": "replay-1", "action_state_topic": "as-replay-1", "output_dir": "/tmp/o",
    "audit_dir": "/tmp/a", "kafka_bootstrap": "127.0.0.1:9092",
}


def test_argv_and_file_round_trip(tmp_path: Path) -> None:
    spec = ReplayJobSpec(**BASE, capture_topic="cap", start_offsets={0: 3, 1: 0}, end_offsets={0: 9, 1: 2},
                         policy=ReplayPolicy(by_name={"notify_support": "block"}), agent_uid_hash="A" * 32,
                         max_parallelism=128, mem0_config={"vector_store": {"provider": "chroma"}})
    assert ReplayJobSpec.from_argv(spec.to_argv()) == spec
    assert ReplayJobSpec.from_argv(spec.write(tmp_path / "spec.json")) == spec
    assert spec.agent_uid_hash == "a" * 32
    assert spec.window().record_count == 8


def test_manifest_layouts(tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"capture": {"topic": "cap", "partitions": [
        {"partition": 0, "start_offset": 1, "end_offset": 4}, {"partition": 1, "start": 0, "end": 0}]}}))
    w = load_window_from_manifest(f"file://{a}")
    assert (w.topic, w.start_offsets, w.end_offsets) == ("cap", {0: 1, 1: 0}, {0: 4, 1: 0})
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"capture_topic": "cap2", "start_offsets": {"0": 2}, "end_offsets": {"0": 5}}))
    spec = ReplayJobSpec(**BASE, manifest=str(b))
    assert spec.window().record_count == 3


def test_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="give either manifest or all of capture_topic"):
        ReplayJobSpec(**BASE)
    with pytest.raises(ValidationError, match="agent_factory"):
        ReplayJobSpec(**{**BASE, "agent_factory": "no_colon"}, manifest="m.json")
    with pytest.raises(ValidationError, match="32-hex"):
        ReplayJobSpec(**BASE, manifest="m.json", agent_uid_hash="xyz")
    with pytest.raises(ValidationError, match="not both"):
        ReplayJobSpec(**BASE, manifest="m.json", agent_uid="u", agent_uid_hash="0" * 32)
    with pytest.raises(ValidationError, match="watermark"):
        ReplayJobSpec(**BASE, manifest="m.json", watermark="late")
    with pytest.raises(ValueError, match=r"start \(5\) <= end \(2\)"):
        ReplayJobSpec(**BASE, capture_topic="c", start_offsets={0: 5}, end_offsets={0: 2}).window()
    with pytest.raises(ValueError, match="not found"):
        load_window_from_manifest(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="local files only"):
        load_window_from_manifest("s3://bucket/m.json")


def test_replay_program_is_a_module_unless_a_path_is_given() -> None:
    """The default needs the package in the cluster's Python, not a path shared with the Airflow worker."""
    import importlib.util

    from airflow_flink_replay.operators.replay import REPLAY_JOB_MODULE, SubmitReplayJobOperator

    spec = ReplayJobSpec(**BASE, job_name="afr-replay-x", manifest="/runs/m.json")
    default = SubmitReplayJobOperator(task_id="r", spec=spec, savepoint_path=None)._program(spec)
    assert default.driver_args()[:2] == ["-pym", REPLAY_JOB_MODULE]
    assert importlib.util.find_spec(REPLAY_JOB_MODULE) is not None
    path = SubmitReplayJobOperator(task_id="r2", spec=spec, savepoint_path=None, replay_program="/opt/rj.py")
    assert path._program(spec).driver_args()[:2] == ["-py", "/opt/rj.py"]
    assert default.driver_args()[-2:] == spec.to_argv()[-2:]

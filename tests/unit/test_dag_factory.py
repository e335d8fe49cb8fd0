"""build_replay_dag: the form offers every quiesce mode, ``existing`` branches around the capture path, the
memory forks and production's resume are ordered, production's timing reaches the manifest task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.replay_spec import ReplaySpec, SpecError
from tests.unit.core.test_replay_spec import _spec


def test_dag_offers_every_quiesce_mode_and_branches_for_existing(tmp_path: Path) -> None:
    """The form lists drain|stop|savepoint|existing; ``existing`` skips the capture path, never resumes
    production, and the replays read their savepoint from whichever branch ran."""
    from airflow_flink_replay.dag_factory import build_replay_dag, resolve_run

    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}"))
    dag = build_replay_dag(spec, dag_id="manual_modes", kind="manual")
    assert dag.params.get_param("quiesce_mode").schema["enum"] == ["drain", "stop", "savepoint", "existing"]
    assert "existing_manifest" in dag.params
    tasks = dag.task_dict
    assert tasks["choose_start"].downstream_task_ids == {"offsets_before_quiesce", "reuse_manifest"}
    assert {"reuse_manifest", "start_offsets"} <= tasks["fork_memory_baseline"].upstream_task_ids
    assert tasks["fork_memory_baseline"].trigger_rule == "none_failed_min_one_success"
    assert tasks["isolate_action_state"].trigger_rule == "none_failed_min_one_success"
    assert {"manifest", "reuse_manifest"} <= tasks["isolate_action_state"].upstream_task_ids
    assert tasks["submit_replays"].upstream_task_ids >= {"replay_from"}
    assert "quiesce" not in tasks["submit_replays"].upstream_task_ids  # a skipped quiesce must not skip it
    assert tasks["resume_production"].trigger_rule == "all_done"

    run = resolve_run(
        spec,
        {"quiesce_mode": "existing", "existing_manifest": "file:///r/m.json", "existing_memory": "snapshot-ns"},
        "manual_modes",
        "t2",
    )
    assert run["quiesce_mode"] == "existing" and run["existing_manifest"] == "file:///r/m.json"
    assert run["memory_source"] == "snapshot-ns"
    assert resolve_run(spec, {}, "manual_modes", "t3")["memory_source"] == spec.production.job_identifier
    timed = resolve_run(spec, {"window_records": 12, "window_minutes": 2}, "manual_modes", "t4")
    assert (timed["window_records"], timed["window_seconds"]) == (12, 120)
    with pytest.raises(SpecError, match=r"window\.minutes \(45\) must be below window\.timeout_minutes"):
        spec.with_run_overrides({"window_minutes": 45})
    assert tasks["fork_memory_candidate"].upstream_task_ids >= {"fork_memory_baseline"}  # copies of one fork
    # only the baseline's fork holds production stopped; the copies run after production is back
    resume_up = tasks["resume_production"].upstream_task_ids
    assert "fork_memory_baseline" in resume_up
    assert not {"fork_memory_baseline_2", "fork_memory_candidate"} & resume_up
    assert {"fork_memory_baseline_2", "fork_memory_candidate"} <= tasks["capture_window"].upstream_task_ids
    run_topics_template(tasks)
    # production's event time and watermark strategy reach the manifest (the replays read theirs from it)
    timed_spec = _spec()
    timed_spec["production"] = {
        **timed_spec["production"],
        "event_time": {"source": "field", "field": "$.ts", "unit": "ms"},
        "watermark": {"max_out_of_orderness_ms": 5000, "idleness_ms": 30000},
    }
    manifest_task = build_replay_dag(ReplaySpec.model_validate(timed_spec), dag_id="timed", kind="manual").task_dict[
        "manifest"
    ]
    assert manifest_task.capture_format.event_time == {"source": "field", "field": "$.ts", "unit": "ms"}
    assert manifest_task.capture_format.watermark == {"max_out_of_orderness_ms": 5000, "idleness_ms": 30000}
    sensor = tasks["capture_window"]
    assert "duration_seconds" in sensor.template_fields and "min_records" in sensor.template_fields


def run_topics_template(tasks: dict) -> Any:
    """The delete step's topic list comes from the resolved run (an XComArg), not from isolate's result."""
    from airflow.sdk.definitions.xcom_arg import XComArg

    arg = tasks["delete_replay_topics"].topics
    assert isinstance(arg, XComArg) and arg.operator.task_id == "resolve" and arg.key == "topic_list"
    return arg

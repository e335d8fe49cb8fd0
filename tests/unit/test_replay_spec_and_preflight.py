"""ReplaySpec loading and overrides, the pure preflight rules, the run's resolved names, the run record."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_flink_replay.core.preflight import PreflightError, check_names, check_production
from airflow_flink_replay.core.replay_spec import ReplaySpec, SpecError
from airflow_flink_replay.core.run_record import RunRecord, file_digest


def _spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "review-triage",
        "production": {
            "job_name": "review-triage-production",
            "program": {"entry_point": "/opt/jobs/production_job.py", "program_args": ["--x", "1"]},
            "agent_factory": "examples.review_agent.v1.agent:build_agent",
            "input_topic": "reviews",
            "capture_topic": "reviews-capture",
            "action_state_topic": "reviews-action-state",
            "job_identifier": "review-triage-prod",
            "agent_uid": "afr-agent",
        },
        "candidate_agent_factory": "examples.review_agent.v2.agent:build_agent",
        "kafka_bootstrap": "127.0.0.1:9092",
        "runs_uri": "file:///tmp/replay-runs",
    }
    spec.update(overrides)
    return spec


def test_yaml_round_trip_and_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec()))
    spec = ReplaySpec.from_yaml(path)
    assert spec.quiesce_mode == "drain" and spec.window.records == 40
    assert spec.variants() == ["baseline", "baseline_2", "candidate"]

    bad = _spec(candidate_agent_factory="not a factory", name="Bad Name")
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(SpecError) as err:
        ReplaySpec.from_yaml(path)
    assert "candidate_agent_factory" in str(err.value) and "module:attribute" in str(err.value)
    assert "name" in str(err.value) and str(path) in str(err.value)

    path.write_text(yaml.safe_dump(_spec(quiesce_mode="existing")))
    with pytest.raises(SpecError, match="quiesce_mode=existing needs existing_manifest"):
        ReplaySpec.from_yaml(path)
    path.write_text(yaml.safe_dump(_spec(quiesce_mode="existing", existing_manifest="file:///runs/m.json")))
    reuse = ReplaySpec.from_yaml(path)
    assert reuse.memory_source() == reuse.production.job_identifier  # default: production's memory, now
    assert reuse.with_run_overrides({"existing_memory": "snap-1"}).memory_source() == "snap-1"


def test_run_overrides_apply_and_are_validated() -> None:
    spec = ReplaySpec.model_validate(_spec())
    run = spec.with_run_overrides(
        {"candidate": "pkg.cand:build", "quiesce_mode": "stop", "window_records": 12, "abs_threshold": 0.1,
         "keep_fork": True, "unknown": "ignored", "min_aligned": ""}
    )
    assert run.candidate_agent_factory == "pkg.cand:build" and run.quiesce_mode == "stop"
    assert run.window.records == 12 and run.compare.abs_threshold == 0.1 and run.keep_fork
    assert run.compare.min_aligned == spec.compare.min_aligned  # empty values keep the spec's
    with pytest.raises(SpecError, match="quiesce_mode"):
        spec.with_run_overrides({"quiesce_mode": "yolo"})


def test_replay_names_never_equal_production_names() -> None:
    spec = ReplaySpec.model_validate(_spec())
    assert not check_names(spec, "abc123").problems
    names = {spec.fork_namespace("abc123", v) for v in spec.variants()}
    topics = {spec.action_state_topic("abc123", v) for v in spec.variants()}
    assert len(names) == 3 and len(topics) == 3
    assert spec.production.job_identifier not in names and spec.production.action_state_topic not in topics

    clash = ReplaySpec.model_validate(_spec(production={**_spec()["production"], "capture_topic": "reviews"}))
    assert any("capture_topic equals input_topic" in p for p in check_names(clash, "t").problems)


def test_production_checks_name_each_problem_and_its_fix() -> None:
    spec = ReplaySpec.model_validate(_spec())
    ok_vertices = ["Source: source -> normalise", "action-execute-operator -> Map"]
    topics = {"reviews", "reviews-capture", "reviews-action-state"}
    running = [("j1", "review-triage-production"), ("j2", "other")]
    assert not check_production(spec, running, ok_vertices, topics).problems

    none = check_production(spec, [("j2", "other")], None, topics).problems
    assert any("no RUNNING Flink job named 'review-triage-production'" in p and "other" in p for p in none)
    dup = check_production(spec, [("a", "review-triage-production"), ("b", "review-triage-production")],
                           ok_vertices, topics).problems
    assert any("cancel the duplicates" in p for p in dup)
    no_agent = check_production(spec, running, ["Source: source -> Map"], topics).problems
    assert any("Flink Agents job" in p for p in no_agent)
    windows = check_production(spec, running, [*ok_vertices, "Window(TumblingEventTimeWindows(60000))"], topics)
    assert any("use quiesce_mode=stop" in p for p in windows.problems)
    stop = spec.with_run_overrides({"quiesce_mode": "stop"})
    assert not check_production(stop, running, [*ok_vertices, "Window(TumblingEventTimeWindows)"], topics).problems
    savepoint = spec.with_run_overrides({"quiesce_mode": "savepoint"})
    findings = check_production(savepoint, running, ok_vertices, topics)
    assert not findings.problems and any("race the savepoint" in w for w in findings.warnings)
    reuse = spec.with_run_overrides({"quiesce_mode": "existing", "existing_manifest": "file:///r/m.json"})
    assert not check_production(reuse, [], None, topics).problems  # replaying an old savepoint needs no production
    missing = check_production(spec, running, ok_vertices, {"reviews"}).problems
    assert sum("does not exist on the broker" in p for p in missing) == 2


def test_preflight_error_lists_every_problem() -> None:
    from airflow_flink_replay.core.preflight import PreflightFindings

    found = PreflightFindings(problems=["first: fix a", "second: fix b"])
    with pytest.raises(PreflightError) as err:
        found.raise_if_any()
    assert "first: fix a" in str(err.value) and "second: fix b" in str(err.value)


def test_resolve_run_gives_each_variant_its_own_fork_topic_and_files(tmp_path: Path) -> None:
    from airflow_flink_replay.dag_factory import resolve_run

    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}"))
    run = resolve_run(spec, {"candidate": ""}, "gate", "tag1")
    assert run["run_dir"] == str(tmp_path / "gate" / "tag1")
    assert run["manifest_uri"] == f"file://{tmp_path}/gate/tag1/manifest.json"
    assert len({run[f"fork_{v}"] for v in ("baseline", "baseline_2", "candidate")}) == 3
    assert run["job_spec_candidate"]["agent_factory"] == "examples.review_agent.v2.agent:build_agent"
    assert run["job_spec_baseline_2"]["agent_factory"] == "examples.review_agent.v1.agent:build_agent"
    assert run["job_spec_baseline"]["action_state_topic"] == run["topics"]["baseline"]
    assert run["job_spec_baseline"]["manifest"] == str(tmp_path / "gate" / "tag1" / "manifest.json")
    for v in ("baseline", "baseline_2", "candidate"):
        assert Path(run[f"output_{v}"]).parent == Path(run[f"job_spec_{v}"]["output_dir"]).parent
    # Without a candidate (nightly), the candidate slot replays production's agent: an A/A/A run.
    nightly = resolve_run(spec.model_copy(update={"candidate_agent_factory": None}), {}, "nightly", "t")
    assert nightly["job_spec_candidate"]["agent_factory"] == spec.production.agent_factory


def test_run_record_digest_is_stable_and_files_are_digested(tmp_path: Path) -> None:
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"id": 1}\n')
    (folder / "b.jsonl").write_text('{"id": 2}\n')
    digest = file_digest(folder)
    assert digest == file_digest(f"file://{folder}") and len(digest or "") == 64
    (folder / "b.jsonl").write_text('{"id": 3}\n')
    assert file_digest(folder) != digest
    assert file_digest(tmp_path / "absent") is None

    when = datetime(2026, 11, 29, tzinfo=UTC)
    one = RunRecord(spec_name="s", dag_id="d", run_id="r", created_at=when, verdict="PASS")
    two = RunRecord.model_validate_json(one.model_dump_json())
    assert one.digest() == two.digest()
    assert one.digest() != one.model_copy(update={"verdict": "FAIL"}).digest()


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
    assert tasks["replay_candidate"].upstream_task_ids >= {"replay_from"}
    assert "quiesce" not in tasks["replay_candidate"].upstream_task_ids  # a skipped quiesce must not skip it
    assert tasks["resume_production"].trigger_rule == "all_done"

    run = resolve_run(spec, {"quiesce_mode": "existing", "existing_manifest": "file:///r/m.json",
                             "existing_memory": "snapshot-ns"}, "manual_modes", "t2")
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
    timed_spec["production"] = {**timed_spec["production"],
                                "event_time": {"source": "field", "field": "$.ts", "unit": "ms"},
                                "watermark": {"max_out_of_orderness_ms": 5000, "idleness_ms": 30000}}
    manifest_task = build_replay_dag(ReplaySpec.model_validate(timed_spec), dag_id="timed", kind="manual").task_dict[
        "manifest"]
    assert manifest_task.event_time == {"source": "field", "field": "$.ts", "unit": "ms"}
    assert manifest_task.watermark == {"max_out_of_orderness_ms": 5000, "idleness_ms": 30000}
    sensor = tasks["capture_window"]
    assert "duration_seconds" in sensor.template_fields and "min_records" in sensor.template_fields


def run_topics_template(tasks: dict) -> Any:
    """The delete step's topic list comes from the resolved run (an XComArg), not from isolate's result."""
    from airflow.sdk.definitions.xcom_arg import XComArg

    arg = tasks["delete_replay_topics"].topics
    assert isinstance(arg, XComArg) and arg.operator.task_id == "resolve" and arg.key == "topic_list"
    return arg


def test_resume_is_skipped_when_the_run_never_stopped_production() -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_flink_replay.operators.flink import ResumeJobOperator

    op = ResumeJobOperator(task_id="r", program={"entry_point": "/x.py"}, quiesce_mode="existing",
                           flink_conn_id="no_such_conn")
    with pytest.raises(AirflowSkipException):
        op.execute({})  # skips before any connection is looked up
    # a run that failed before preflight named production's job: nothing was stopped, nothing to resume
    never = ResumeJobOperator(task_id="r2", program={"entry_point": "/x.py"}, production_job_id="",
                              flink_conn_id="no_such_conn")
    with pytest.raises(AirflowSkipException, match="never stopped"):
        never.execute({})

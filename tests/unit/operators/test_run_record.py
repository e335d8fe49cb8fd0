"""RunRecordOperator writes run_record.json from the run's XComs and fails the run when a task failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay.operators.run_record import RunRecordOperator


class RecordTI:
    """A task instance whose ``xcom_pull`` answers from ``xcoms[(task_id, key)]``."""

    dag_id, run_id, task_id = "gate", "manual__1", "run_record"

    def __init__(self, xcoms: dict[tuple[str, str], Any], states: dict[str, str]) -> None:
        self.xcoms, self.states, self.pushed = xcoms, states, {}

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.xcoms.get((task_ids, key))

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def get_task_states(self, dag_id: str, run_ids: list[str]) -> dict[str, dict[str, str]]:
        return {self.run_id: self.states}


def _xcoms(run_dir: Path) -> dict[tuple[str, str], Any]:
    return {
        ("resolve", "run_dir"): str(run_dir),
        ("resolve", "topics"): {"candidate": "afr-t-candidate"},
        ("resolve", "fork_candidate"): "replay-t-candidate",
        ("resume_production", "return_value"): {"job_id": "p", "downtime_seconds": 1.5},
        ("compare", "comparison"): {"verdict": "FAIL", "reasons": [{"code": "x"}]},  # a gate FAIL: no return value
        ("replay_candidate", "flink_job_id"): "c" * 32,  # the replay task failed after submitting
        ("cancel_leftover_replays", "return_value"): ["c" * 32],
    }


def test_record_is_written_then_the_run_fails_naming_the_failed_tasks(tmp_path: Path) -> None:
    ti = RecordTI(_xcoms(tmp_path / "run"), {"compare": "failed", "approve": "upstream_failed", "run_record": None})
    op = RunRecordOperator(task_id="run_record", spec_name="review-triage")
    assert op.trigger_rule == "all_done"
    with pytest.raises(AirflowFailException, match=r"failed at approve, compare \(verdict: FAIL\)"):
        op.execute({"ti": ti})
    record = json.loads((tmp_path / "run" / "run_record.json").read_text())
    assert (record["verdict"], record["downtime_s"], record["spec_name"]) == ("FAIL", 1.5, "review-triage")
    candidate = record["variants"][2]
    assert (candidate["job_id"], candidate["action_state_topic"]) == ("c" * 32, "afr-t-candidate")
    assert record["cleanup"]["cancelled_jobs"] == ["c" * 32]
    assert ti.pushed["failed_tasks"] == ["approve", "compare"] and ti.pushed["run_record"].endswith("run_record.json")


def test_a_clean_run_returns_the_summary(tmp_path: Path) -> None:
    ti = RecordTI({("resolve", "run_dir"): str(tmp_path)}, {"compare": "success", "run_record": None})
    summary = RunRecordOperator(task_id="run_record", spec_name="s").execute({"ti": ti})
    assert summary["failed_tasks"] == [] and Path(summary["run_record"]).exists() and len(summary["digest"]) == 64


def test_the_agent_check_s_report_is_recorded_also_when_it_refused(tmp_path: Path) -> None:
    refused = {"refused": True, "report": "agent check (job side): REFUSED\nproblems:\n  - empty plan",
               "checked": {"problems": ["candidate's agent Plain has an empty plan"]}}
    xcoms = {("resolve", "run_dir"): str(tmp_path), ("agent_check", "agent_check"): refused}  # pushed, then failed
    ti = RecordTI(xcoms, {"agent_check": "failed", "run_record": None})
    with pytest.raises(AirflowFailException, match="failed at agent_check"):
        RunRecordOperator(task_id="run_record", spec_name="s").execute({"ti": ti})
    record = json.loads((tmp_path / "run_record.json").read_text())
    assert record["agent_check"] == refused
    assert record["refusal"] == "agent check refused: candidate's agent Plain has an empty plan"
    assert record["verdict"] is None


def test_the_lease_is_recorded_as_the_last_task_that_held_it_left_it(tmp_path: Path) -> None:
    """Issue 42 §10: the run record names production's lease: its holder, when it was taken and released, how long
    the run waited for it; or, for a run that never got it, the run that held it."""
    taken = {"holder": "gate/manual__1", "generation": 4, "acquired_at": "2026-12-01T10:00:00+00:00",
             "released_at": None, "waited_s": 12.5}
    released = {**taken, "released_at": "2026-12-01T10:00:20+00:00", "released_by": "resume_production"}
    xcoms = {("resolve", "run_dir"): str(tmp_path), ("quiesce", "lease"): taken,
             ("resume_production", "lease"): released}
    RunRecordOperator(task_id="run_record", spec_name="s").execute({"ti": RecordTI(xcoms, {"run_record": None})})
    assert json.loads((tmp_path / "run_record.json").read_text())["lease"] == released
    refused = {"holder": None, "waited_s": 300.0, "held_by": "flink_agents_replay/manual__2"}
    xcoms = {("resolve", "run_dir"): str(tmp_path), ("quiesce", "lease"): refused}
    with pytest.raises(AirflowFailException):
        RunRecordOperator(task_id="run_record", spec_name="s").execute(
            {"ti": RecordTI(xcoms, {"quiesce": "failed", "run_record": None})})
    assert json.loads((tmp_path / "run_record.json").read_text())["lease"] == refused


def test_every_variant_of_the_run_is_recorded_with_its_fork_and_drop(tmp_path: Path) -> None:
    """aa_replays=2: the record lists baseline_3 beside the others (its replay, fork and drop), whether the DAG
    passes the variants or they come from the resolved spec."""
    variants = ["baseline", "baseline_2", "baseline_3", "candidate"]
    xcoms = {
        ("resolve", "run_dir"): str(tmp_path),
        ("resolve", "spec"): {"name": "s", "aa_replays": 2},
        ("resolve", "topics"): {v: f"afr-t-{v}" for v in variants},
        ("resolve", "fork_baseline_3"): "replay-s-t-baseline-3",
        ("fork_memory_baseline_3", "return_value"): {"count": 112},
        ("replay_baseline_3", "return_value"): {"job_id": "3" * 32, "state": "FINISHED", "output_records": 20},
        ("drop_forks", "return_value"): {v: {"dropped": 112, "kept": False} for v in variants},
    }
    for given in (variants, None):
        op = RunRecordOperator(task_id="run_record", spec_name="s", variants=given)
        op.execute({"ti": RecordTI(xcoms, {"run_record": None})})
        record = json.loads((tmp_path / "run_record.json").read_text())
        assert [v["variant"] for v in record["variants"]] == variants
        extra = record["variants"][2]
        assert (extra["job_id"], extra["output_records"]) == ("3" * 32, 20)
        assert (extra["fork_namespace"], extra["action_state_topic"]) == ("replay-s-t-baseline-3", "afr-t-baseline_3")
        assert record["memory_forks"][2] == {"count": 112} and len(record["memory_forks"]) == 4
        assert list(record["cleanup"]["forks_dropped"]) == variants

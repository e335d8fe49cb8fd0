"""The console view of a replay run: one line per chain step with its duration and key figure, the verdict,
its reasons (bounded), the report and the run record — from task instances and the run record only."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_flink_replay.local.airflow_runner import TaskTiming
from airflow_flink_replay.local.run_view import MAX_REASONS, chain_steps, render_run

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _task(task_id: str, start: float, end: float, state: str = "success") -> TaskTiming:
    return TaskTiming(task_id=task_id, state=state, start=T0 + timedelta(seconds=start),
                      end=T0 + timedelta(seconds=end))


def _tasks(**states: str) -> list[TaskTiming]:
    """Every task of a gate run, one second each, in chain order; reuse_manifest skipped, others as given."""
    tasks, t = [], 0.0
    states = {"reuse_manifest": "skipped", **states}
    for _, ids in chain_steps():
        for task_id in ids:
            tasks.append(_task(task_id, t, t + 1, states.get(task_id, "success")))
            t += 1
    return tasks


def _record(tmp_path: Path, verdict: str = "FAIL", reasons: int = 2) -> dict:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"capture": {"partitions": [{"record_count": 12}, {"record_count": 8}]}}))
    return {
        "run_id": "manual__x",
        "manifest": f"file://{manifest}",
        "savepoint": {"savepoint_path": "file:/sp/savepoint-1", "mode": "drain", "reused": False,
                      "job_name": "prod", "job_id": "4b75"},
        "downtime_s": 41.764,
        "memory_forks": [{"count": 112}, {"count": 112}, {"count": 112}],
        "variants": [
            {"variant": "baseline", "job_id": "a", "output_records": 20},
            {"variant": "baseline_2", "job_id": "b", "output_records": 20},
            {"variant": "candidate", "job_id": "c", "output_records": 19},
        ],
        "verdict": verdict,
        "reasons": [{"code": f"R{i}", "severity": "fail", "message": "x" * 400} for i in range(reasons)]
        + [{"code": "NOTE", "severity": "info", "message": "not shown"}],
        "report_dir": "/runs/compare-x",
        "agent_check": {"refused": False, "checked": {"facts": {"definitions": [
            {"role": "production", "actions": [{}, {}], "resources": [{}, {}, {}]},
            {"role": "candidate", "actions": [{}, {}], "resources": [{}, {}]}]}}},
        "cleanup": {"forks_dropped": {"baseline": {"kept": False}, "baseline_2": {"kept": False},
                                      "candidate": {"kept": True}}},
        "action_state": {"cleanup": {"deleted": ["t1", "t2", "t3"]}},
    }


def test_one_line_per_chain_step_with_duration_and_figure(tmp_path: Path) -> None:
    # the gate on FAIL: compare fails the run, approve does not run, run_record fails the run after writing
    tasks = _tasks(compare="failed", approve="upstream_failed", run_record="failed")
    lines = render_run(tasks, _record(tmp_path), "/runs/x/run_record.json")
    steps = {line.split()[0]: line for line in lines[:9]}
    assert [line.split()[0] for line in lines[:9]] == [
        "preflight", "agent", "savepoint", "production", "capture", "memory", "replays", "compare", "cleanup"
    ]
    assert "OK: production 2 actions, 3 resources; candidate 2 actions, 2 resources" in steps["agent"]
    assert "4.0s" in steps["preflight"]  # four tasks of one second each, back to back
    assert "production prod (Flink job 4b75)" in steps["preflight"]
    assert "file:/sp/savepoint-1 (drain)" in steps["savepoint"] and "1.0s" in steps["savepoint"]  # skipped reuse
    assert "downtime 41.8 s" in steps["production"]
    assert "20 records in the window" in steps["capture"]
    assert "112 memories in each of 3 forks" in steps["memory"]
    assert "baseline 20, baseline_2 20, candidate 19" in steps["replays"]
    assert steps["compare"].endswith("verdict FAIL") and "FAILED" not in steps["cleanup"]
    assert "2 memory forks dropped, 3 replay topics deleted" in steps["cleanup"]  # a kept fork is not dropped
    assert lines[9] == "  => FAIL"
    noisy = render_run(tasks, {**_record(tmp_path), "noise": {"$.summary": 0.31, "$.label": 0.06},
                               "fidelity": 0.7, "fidelity_self": 0.72}, None)
    assert noisy[7].endswith("verdict FAIL, A/A noise summary 31%, label 6%, baseline = production for 70.0% of "
                              "its outputs (= baseline-2 for 72.0%)")
    assert [line.split()[0] for line in lines[10:12]] == ["[R0]", "[R1]"]  # info reasons are not shown
    assert all(len(line) < 200 for line in lines[10:12])  # long messages are cut
    assert lines[-2:] == ["  report: /runs/compare-x/report.html", "  run record: /runs/x/run_record.json"]


def test_reasons_are_bounded(tmp_path: Path) -> None:
    lines = render_run(_tasks(), _record(tmp_path, reasons=MAX_REASONS + 3), None)
    assert sum(line.strip().startswith("[R") for line in lines) == MAX_REASONS
    assert "(+3 more reasons in the report)" in lines[-2]


def test_failed_step_names_its_task_and_a_run_without_record_still_shows_its_steps() -> None:
    tasks = [_task("resolve", 0, 1), _task("preflight", 1, 3, "failed"), _task("quiesce", 3, 3, "upstream_failed")]
    lines = render_run(tasks, None, None)
    assert lines[0].split()[:2] == ["preflight", "3.0s"] and "FAILED: preflight" in lines[0]
    assert lines[1].split()[0] == "savepoint" and lines[1].endswith("not run (a step before it failed)")
    assert lines[-1] == "  => no verdict"


def test_a_compare_that_fails_without_a_fail_verdict_is_a_failure(tmp_path: Path) -> None:
    lines = render_run(_tasks(compare="failed", run_record="failed"), _record(tmp_path, verdict="INCONCLUSIVE"),
                       None)
    assert "FAILED: compare" in next(line for line in lines if line.split()[0] == "compare")
    lines = render_run(_tasks(run_record="failed"), None, None)  # no record written: run_record's own failure
    assert "FAILED: run_record" in next(line for line in lines if line.split()[0] == "cleanup")


def test_a_refused_agent_check_says_why_and_an_unknown_task_is_still_shown() -> None:
    record = {"agent_check": {"refused": True, "checked": {"problems": [
        "candidate: the plan has no actions (a plain subclass?)\nFix: ..."]}}}
    tasks = [_task("agent_check", 0, 2, "failed"), _task("quiesce", 2, 2, "upstream_failed"),
             _task("a_new_task", 2, 3)]
    lines = render_run(tasks, record, None)
    assert lines[0].split()[:3] == ["agent", "check", "2.0s"]
    assert lines[0].endswith("FAILED: REFUSED: candidate: the plan has no actions (a plain subclass?)")
    assert lines[2].split()[:3] == ["other", "tasks", "1.0s"]


def test_unfinished_tasks_are_named() -> None:
    lines = render_run([_task("capture_window", 0, 5, "running")], None, None)
    assert "not finished: capture_window" in lines[0]


@pytest.mark.parametrize("aa_replays", [1, 4])
def test_every_task_of_the_gate_dag_is_in_a_chain_step(tmp_path: Path, aa_replays: int) -> None:
    """A task the view does not know would fail, or take time, without a line saying so (the extra A/A
    baselines' forks and replays too, up to the most a spec can ask for)."""
    from airflow_flink_replay.core.replay_spec import ReplaySpec
    from airflow_flink_replay.dag_factory import build_replay_dag
    from tests.unit.core.test_replay_spec import _spec

    spec = ReplaySpec.model_validate(_spec(runs_uri=f"file://{tmp_path}", aa_replays=aa_replays))
    dag = build_replay_dag(spec, dag_id="g", kind="gate")
    shown = {task_id for _, task_ids in chain_steps() for task_id in task_ids}
    assert {t.task_id for t in dag.tasks} <= shown, {t.task_id for t in dag.tasks} - shown


def test_a_run_with_an_extra_a_a_replay_shows_every_variant(tmp_path: Path) -> None:
    """aa_replays=2: the forks, the replays and the cleanup name baseline_3 with the others (the record lists the
    forks in its variants' order)."""
    record = _record(tmp_path)
    record["memory_forks"] = [{"count": 112}, {"count": 112}, {"count": 90}, {"count": 112}]
    record["variants"].insert(2, {"variant": "baseline_3", "job_id": "d", "output_records": 18})
    record["cleanup"]["forks_dropped"]["baseline_3"] = {"kept": False}
    steps = {line.split()[0]: line for line in render_run(_tasks(), record, None)[:9]}
    assert "memories per fork: baseline 112, baseline_2 112, baseline_3 90, candidate 112" in steps["memory"]
    assert "baseline 20, baseline_2 20, baseline_3 18, candidate 19" in steps["replays"]
    assert "3 memory forks dropped" in steps["cleanup"]


def test_a_refused_run_says_so_and_drops_no_fork_it_never_made(tmp_path: Path) -> None:
    record = {"refusal": "agent check refused: empty plan", "verdict": None, "reasons": [],
              "cleanup": {"forks_dropped": {"baseline": {"existed": False, "dropped": 0}, "candidate": None}},
              "action_state": {"cleanup": {"deleted": []}}}
    path = tmp_path / "run_record.json"
    path.write_text(json.dumps(record))
    lines = render_run([_task("agent_check", 1, 2, "failed")], record, str(path))
    assert "  => REFUSED by the agent check" in lines
    assert not any(line.split()[0] == "cleanup" and "dropped" in line for line in lines if line.strip())

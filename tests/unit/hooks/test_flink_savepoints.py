"""The savepoint/stop procedures (``hooks/flink_savepoints.py``) over FlinkRestHook, against the scripted Flink
(``tests/fake_flink.py``): a savepoint wait ends on Flink's failure cause or the timeout; one run's stop is found
by its per-attempt trigger ids, the savepoint of a run in the statistics (one matching rule), and
``stop_outcome`` never calls a job with a stop in flight "running". Called through the hook's methods of the
same names, as the operators call them.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_flink_replay.core.flink_models import CheckpointStats
from airflow_flink_replay.exceptions import FlinkOperationFailedError, FlinkOperationTimeoutError
from airflow_flink_replay.hooks.flink_rest import FlinkRestError
from airflow_flink_replay.hooks.flink_savepoints import savepoint_in
from airflow_flink_replay.operators.flink import run_path_segment, savepoint_of_run
from tests.fake_flink import JAVA_ERROR, JOB, FakeFlink, make_hook
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)


def test_savepoint_wait_reports_failure_cause_and_timeout(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("POST", "/jobs/j1/savepoints", (202, {"request-id": "t1"}))
    state.on(
        "GET",
        "/jobs/j1/savepoints/t1",
        (200, {"status": {"id": "IN_PROGRESS"}}),
        (
            200,
            {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": {"class": "x", "stack-trace": JAVA_ERROR}}},
        ),
    )
    state.on("GET", "/jobs/j1/savepoints/t2", (200, {"status": {"id": "IN_PROGRESS"}}))
    hook = make_hook(url)
    assert hook.trigger_savepoint("j1", "file:///sp", trigger_id="t1") == "t1"
    with pytest.raises(
        FlinkRestError, match=r"(?s)failed \(trigger t1\); no checkpoint is used instead\. Cause: .*Cannot map"
    ):
        hook.wait_for_savepoint("j1", "t1", timeout=60, poll_interval=0.01)  # ends on the failure, not the time
    with pytest.raises(FlinkRestError, match=r"did not complete within 0\.2 s \(trigger t2\)"):
        hook.wait_for_savepoint("j1", "t2", timeout=0.2, poll_interval=0.05)


# ------------------------------------------------------------------------------------ one run's stop
# FlinkRestHook's view of one run's stop, against the scripted Flink (``tests/fake_flink.py``): the operation
# found by its per-attempt trigger ids, the savepoint of a run found in the statistics (one matching rule),
# and ``stop_outcome``, which never calls a job with a stop in flight "running".

IN_PROGRESS = {"status": {"id": "IN_PROGRESS"}}
FAILED = {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": {"stack-trace": "java.lang.Exception: boom"}}}


def _done(location: str) -> dict[str, Any]:
    return {"status": {"id": "COMPLETED"}, "operation": {"location": location}}


def _job(state: str, end: int = -1) -> dict[str, Any]:
    return {**JOB, "state": state, "end-time": end}


def _stats(*paths: str) -> dict[str, Any]:
    history = [{"id": i, "status": "COMPLETED", "is_savepoint": True, "external_path": p} for i, p in enumerate(paths)]
    return {"counts": {}, "latest": {"savepoint": None}, "history": history}


def test_find_operation_skips_failed_attempts_and_stops_at_the_first_unknown_id(fake: Any) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1/savepoints/t0", (200, FAILED))
    hook = make_hook(url)
    assert hook.find_operation("j1", ["t0", "t1", "t2"]) == ("t1", None)  # t1 unknown: the next attempt's id
    state.on("GET", "/jobs/j1/savepoints/t1", (200, IN_PROGRESS))
    trigger, status = hook.find_operation("j1", ["t0", "t1", "t2"])
    assert trigger == "t1" and status is not None and status.status == "IN_PROGRESS"
    with pytest.raises(FlinkOperationFailedError, match="boom"):
        hook.find_operation("j1", ["t0"])


def test_one_rule_matches_a_savepoint_of_this_run_whole_directory_or_run_segment() -> None:
    run = "manual__2026-11-29T09:00:00+00:00"
    segment = run_path_segment("replay", run)  # /replay/manual__2026-11-29T09_00_00_00_00/
    stats = CheckpointStats.model_validate(
        _stats(f"file:/sp/other_dag{segment}savepoint-1", f"file:/sp/replay{segment}sp-7", "file:/sp/replay/x/sp-8")
    )
    assert savepoint_of_run(stats, "replay", run) == f"file:/sp/replay{segment}sp-7"
    assert savepoint_of_run(stats, "replay", "manual__2026-11-30T09:00:00+00:00") is None
    whole = savepoint_in(stats, f"file:///sp/replay{segment}")
    assert whole is not None and whole.external_path == f"file:/sp/replay{segment}sp-7"
    assert savepoint_in(stats, "file:///sp/replay/manual__2026-11-29") is None  # segments, not prefixes
    s3 = CheckpointStats.model_validate(_stats(f"s3://bucket/sp/replay{segment}savepoint-2"))
    assert savepoint_of_run(s3, "replay", run) == f"s3://bucket/sp/replay{segment}savepoint-2"
    found = savepoint_in(s3, f"s3://bucket/sp/replay{segment}")
    assert found is not None and found.id == 0


def test_stop_outcome_waits_while_the_stop_is_in_flight_then_reports_its_savepoint(fake: Any) -> None:
    """The job RUNS while its stop is in progress: not "running" — wait, then the stop's savepoint."""
    state, url = fake
    state.on("GET", "/jobs/j1/savepoints/t0", (200, IN_PROGRESS), (200, IN_PROGRESS), (200, _done("file:/sp/d/r/sp-1")))
    state.on("GET", "/jobs/j1", (200, _job("RUNNING")), (200, _job("FINISHED", 1_700_000_000_000)))
    outcome = make_hook(url).stop_outcome("j1", ["t0", "t1"], "/d/r/", timeout=30, poll_interval=0.01)
    assert (outcome.job_state, outcome.savepoint, outcome.kept_running) == ("FINISHED", "file:/sp/d/r/sp-1", False)
    assert outcome.end_time == 1_700_000_000_000
    assert state.calls[("GET", "/jobs/j1/savepoints/t0")] == 3


def test_stop_outcome_after_a_failed_stop_says_the_job_kept_running(fake: Any) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1/savepoints/t0", (200, FAILED))
    state.on("GET", "/jobs/j1", (200, _job("RUNNING")))
    outcome = make_hook(url).stop_outcome("j1", ["t0", "t1"], "/d/r/", timeout=5, poll_interval=0.01)
    assert outcome.kept_running and outcome.savepoint is None and outcome.trigger_id == "t1"


def test_stop_outcome_finds_the_savepoint_in_the_statistics_when_flink_forgot_the_stop(fake: Any) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, _job("FINISHED", 5)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _stats("file:/sp/other/r/sp-0", "file:/sp/d/r/sp-2")))
    outcome = make_hook(url).stop_outcome("j1", ["t0"], "/d/r/", timeout=5, poll_interval=0.01)
    assert (outcome.kept_running, outcome.savepoint) == (False, "file:/sp/d/r/sp-2")


def test_stop_outcome_times_out_naming_the_stop_still_in_flight(fake: Any) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1/savepoints/t0", (200, IN_PROGRESS))
    with pytest.raises(FlinkOperationTimeoutError, match=r"still in progress .* production may still be stopping"):
        make_hook(url).stop_outcome("j1", ["t0"], "/d/r/", timeout=0.2, poll_interval=0.05)

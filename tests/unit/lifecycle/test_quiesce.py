"""The quiesce procedure without Airflow's task machinery, against the scripted Flink of ``tests/fake_flink.py``
(a real ``FlinkRestHook`` over HTTP): a first try stops production once with this run's deterministic trigger id
and finishes once the job is FINISHED; a retry reattaches to the stop Flink still runs, or reuses the savepoint
of this run Flink's statistics list, and never stops twice; the refusals come before anything is stopped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_flink_replay.exceptions import LifecycleError, LifecycleRefusedError
from airflow_flink_replay.lifecycle.quiesce import (
    Quiesce,
    SavepointOperation,
    TaskRun,
    operation_trigger_id,
    run_path_segment,
)
from tests.fake_flink import JOB, FakeFlink, make_hook
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)

RUN = TaskRun("replay", "manual__2026-12-01", "quiesce")
RETRY = TaskRun("replay", "manual__2026-12-01", "quiesce", try_number=2)
END_MS = 1_795_000_000_123


def _quiesce(url: str, task: TaskRun = RUN, **kwargs: Any) -> Quiesce:
    mode, target = kwargs.pop("mode", "drain"), kwargs.pop("target_directory", "file:///sp")
    return Quiesce(make_hook(url, retries=0), "j1", mode, task, target_directory=target, poll_interval=0.01, **kwargs)


def _first_id(mode: str = "drain") -> str:
    return operation_trigger_id(RUN.dag_id, RUN.run_id, RUN.task_id, -1, "j1", mode, 0)


def _stops(state: FakeFlink) -> list[Any]:
    return state.bodies.get(("POST", "/jobs/j1/stop"), [])


def test_a_first_try_stops_production_once_and_finishes_when_the_job_finished(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, JOB), (200, {**JOB, "state": "FINISHED", "end-time": END_MS}))
    state.on("POST", "/jobs/j1/stop", (202, {"request-id": "echoed"}))
    done = {"status": {"id": "COMPLETED"}, "operation": {"location": "file:/sp/replay/run/savepoint-1"}}
    state.on("GET", "/jobs/j1/savepoints/*", (200, {"status": {"id": "IN_PROGRESS"}}), (200, done))
    quiesce = _quiesce(url, format_type="NATIVE")
    job = quiesce.flink.get_job("j1")

    pending = quiesce.start(job)
    assert (pending.trigger_id, pending.location, pending.reused) == (_first_id(), None, False)
    assert quiesce.touched  # production may be stopping: a failure from here on keeps the lease
    assert _stops(state) == [{"drain": True, "formatType": "NATIVE", "triggerId": _first_id(),
                              "targetDirectory": "file:///sp" + run_path_segment(RUN.dag_id, RUN.run_id).rstrip("/")}]
    assert not [p for p in state.paths("GET") if "/savepoints/" in p or p.endswith("/checkpoints")]  # no look-ups

    quiesced = quiesce.finish(quiesce.wait(pending))
    result = quiesced.result
    assert quiesced.job_state == "FINISHED" and result.production_stopped and not result.in_flight_work_possible
    assert (result.savepoint_path, result.trigger_id, result.format_type) == (
        "file:/sp/replay/run/savepoint-1", _first_id(), "NATIVE")
    assert result.job_stopped_at is not None and int(result.job_stopped_at.timestamp() * 1000) == END_MS
    assert result.plan.agent_vertex_id == "v2" and result.note.startswith("Drained")
    assert len(_stops(state)) == 1


def test_the_wait_hands_over_to_a_trigger_and_back_through_the_carry(fake: tuple[FakeFlink, str]) -> None:
    """What the deferral carries is enough to finish: the operation comes back from the carry alone."""
    state, url = fake
    state.on("GET", "/jobs/j1", (200, JOB))
    state.on("POST", "/jobs/j1/savepoints", (202, {"request-id": "echoed"}))
    quiesce = _quiesce(url, mode="savepoint")
    pending = quiesce.start(quiesce.flink.get_job("j1"))
    carry = json.loads(json.dumps(pending.carry()))  # as the triggerer stores it
    back = SavepointOperation.completed(carry, location="file:/sp/s-1", completed_at=pending.requested_at)
    result = quiesce.finish(back)
    assert result.job_state is None and not result.result.production_stopped  # production ran on
    assert result.result.in_flight_work_possible and result.result.requested_at == pending.requested_at
    assert state.bodies[("POST", "/jobs/j1/savepoints")][0]["cancel-job"] is False


def test_a_retry_reattaches_to_the_stop_flink_still_runs(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, JOB))
    state.on("GET", f"/jobs/j1/savepoints/{_first_id()}", (200, {"status": {"id": "IN_PROGRESS"}}))
    quiesce = _quiesce(url, RETRY)
    operation = quiesce.start(quiesce.flink.get_job("j1"))
    assert (operation.trigger_id, operation.reused, operation.location) == (_first_id(), True, None)
    assert _stops(state) == []


def test_a_retry_reuses_the_savepoint_of_this_run_that_flink_forgot_the_stop_of(fake: tuple[FakeFlink, str]) -> None:
    """The stop's trigger ids are unknown to Flink now (404): the job's statistics list this run's savepoint."""
    state, url = fake
    segment = run_path_segment(RUN.dag_id, RUN.run_id)
    state.on("GET", "/jobs/j1", (200, {**JOB, "state": "FINISHED"}))
    ours = {"id": 9, "status": "COMPLETED", "is_savepoint": True, "trigger_timestamp": 1_000,
            "latest_ack_timestamp": 2_000, "external_path": f"file:/sp{segment}savepoint-9"}  # fmt: skip
    other = {"id": 8, "status": "COMPLETED", "is_savepoint": True, "external_path": "file:/sp/other/run/savepoint-8"}
    state.on("GET", "/jobs/j1/checkpoints", (200, {"counts": {}, "history": [ours, other]}))
    quiesce = _quiesce(url, RETRY)
    operation = quiesce.start(quiesce.flink.get_job("j1"))
    assert operation.location == f"file:/sp{segment}savepoint-9" and operation.reused
    assert operation.trigger_id == _first_id()  # the first id Flink does not know
    assert operation.completed_at is not None and operation.completed_at.timestamp() == 2.0
    assert _stops(state) == [] and quiesce.touched


def test_a_job_that_does_not_run_and_has_no_savepoint_of_this_run_is_refused(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, {**JOB, "state": "FINISHED"}))
    state.on("GET", "/jobs/j1/checkpoints", (200, {"counts": {}, "history": []}))
    quiesce = _quiesce(url, RETRY)
    with pytest.raises(LifecycleError, match="is FINISHED and has no savepoint of this run under file:///sp/replay/"):
        quiesce.start(quiesce.flink.get_job("j1"))
    assert _stops(state) == []


def test_without_a_savepoint_directory_nothing_is_stopped(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, JOB))
    state.on("GET", "/jobmanager/config", (200, [{"key": "web.refresh-interval", "value": "3000"}]))
    quiesce = _quiesce(url, target_directory=None)
    with pytest.raises(LifecycleError, match="no target_directory given and the Flink cluster has no"):
        quiesce.start(quiesce.flink.get_job("j1"))
    assert _stops(state) == [] and not quiesce.touched


def test_a_jobmanager_without_room_for_the_resubmission_is_never_stopped(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, JOB))
    used, size = 500 * 2**20, 512 * 2**20  # 12 MB free, below the connection's 96 MB
    state.on("GET", "/jobmanager/metrics*", (200, [{"id": "Status.JVM.Memory.Metaspace.Used", "value": str(used)},
                                                   {"id": "Status.JVM.Memory.Metaspace.Max", "value": str(size)}]))
    quiesce = _quiesce(url, mode="stop")
    with pytest.raises(LifecycleRefusedError, match=r"^Production was NOT stopped: its JobManager at .* has 12 MB"):
        quiesce.start(quiesce.flink.get_job("j1"))
    assert _stops(state) == [] and not quiesce.touched

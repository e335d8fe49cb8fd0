"""Admission by free task slots: a submission asking for slots is admitted only when they are free, waits for them
outside the JobManager's submission lock (recording the wait) and keeps the lock until its jobs hold them; one that
could never fit, or finds no room in time, fails having submitted nothing.

Flink is the scripted HTTP server of ``tests/fake_flink.py``; the lock is the real lease in a real folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.flink_models import ClusterOverview, FlinkPythonProgram, JobsOverview
from airflow_flink_replay.exceptions import FlinkSubmissionError
from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter
from airflow_flink_replay.hooks.slot_admission import never_fits, pending_jobs
from airflow_flink_replay.hooks.submission_lease import SharedSubmissionLease
from tests.fake_flink import FakeFlink, make_hook
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)

pytestmark = pytest.mark.unit
JARS = (200, {"files": [{"id": "py_flink-python.jar", "name": "flink-python-2.2.1.jar", "uploaded": 1}]})
RUN = "/jars/py_flink-python.jar/run"
PROGRAM = FlinkPythonProgram(module="airflow_flink_replay.flink.replay_job", job_name="afr-replay-gate-r1-baseline")


def overview(total: int, free: int) -> tuple[int, dict[str, Any]]:
    return 200, {"taskmanagers": 1, "slots-total": total, "slots-available": free, "jobs-running": 0}


def jobs(*pending: str) -> tuple[int, dict[str, Any]]:
    listed = [{"jid": f"{i:032x}", "name": n, "state": "RUNNING", "start-time": 1,
               "tasks": {"running": 1, "scheduled": 1, "created": 0, "deploying": 0}} for i, n in enumerate(pending)]
    return 200, {"jobs": listed}


def _a_jobmanager(state: FakeFlink) -> None:
    """The flink-python jar uploaded, the JobManager's metrics without a metaspace limit."""
    state.on("GET", "/jars", JARS)
    state.on("GET", "/jobmanager/metrics", (200, []))


def test_pure_decisions_of_the_admission() -> None:
    assert never_fits(ClusterOverview.model_validate(overview(4, 4)[1]), 5)
    assert not never_fits(ClusterOverview.model_validate(overview(0, 0)[1]), 5)  # a TaskManager coming back
    listing = JobsOverview.model_validate({"jobs": [
        {"jid": "a", "name": "waits", "state": "RUNNING", "start-time": 1, "tasks": {"scheduled": 2, "running": 0}},
        {"jid": "b", "name": "runs", "state": "RUNNING", "start-time": 1, "tasks": {"running": 3}},
        {"jid": "c", "name": "ended", "state": "CANCELED", "start-time": 1, "tasks": {"created": 1}},
    ]})  # fmt: skip
    assert pending_jobs(listing) == ["waits"]


def test_a_submission_waits_for_free_slots_outside_the_lock_and_records_the_wait(
    fake: tuple[FakeFlink, str], tmp_path: Path
) -> None:
    state, url = fake
    _a_jobmanager(state)
    # 1 of 4 slots free twice, then 3: the submission of 3 slots waits, then runs once
    state.on("GET", "/overview", overview(4, 1), overview(4, 1), overview(4, 1), overview(4, 3))
    state.on("POST", RUN, (200, {"jobid": "f" * 32}))
    state.on("GET", "/jobs/overview", jobs("afr-replay-x"), (200, {"jobs": []}))
    sub = RestPythonSubmitter(make_hook(url, submission_lease_uri=f"file://{tmp_path}"))
    done = sub.submit(PROGRAM, slots=3, capacity_timeout=60)
    assert done.job_id == "f" * 32 and done.slots == 3
    assert done.capacity_wait_s > 1.0  # waited (poll 2 s) for the slots
    assert state.calls[("POST", RUN)] == 1
    assert state.calls[("GET", "/jobs/overview")] >= 2  # kept the lock until the new job held its slots
    # the lease was free while it waited: a hold at once succeeds now, and the lease's history has its holds
    with SharedSubmissionLease(url, f"file://{tmp_path}").hold(0):
        pass


def test_a_submission_that_never_fits_fails_at_once_having_submitted_nothing(
    fake: tuple[FakeFlink, str], tmp_path: Path
) -> None:
    state, url = fake
    _a_jobmanager(state)
    state.on("GET", "/overview", overview(2, 2))
    with pytest.raises(FlinkSubmissionError) as info:
        RestPythonSubmitter(make_hook(url), lock_dir=tmp_path).submit(PROGRAM, slots=3)
    assert "need 3 task slots" in str(info.value) and "has only 2" in str(info.value) and "Fix:" in str(info.value)
    assert state.calls[("POST", RUN)] == 0


def test_a_submission_that_finds_no_room_in_time_fails_having_submitted_nothing(
    fake: tuple[FakeFlink, str], tmp_path: Path
) -> None:
    state, url = fake
    _a_jobmanager(state)
    state.on("GET", "/overview", overview(4, 0))
    with pytest.raises(FlinkSubmissionError) as info:
        RestPythonSubmitter(make_hook(url), lock_dir=tmp_path).submit(PROGRAM, slots=1, capacity_timeout=0.5)
    assert "no room for 1 task slots" in str(info.value) and "capacity_wait_minutes" in str(info.value)
    assert state.calls[("POST", RUN)] == 0

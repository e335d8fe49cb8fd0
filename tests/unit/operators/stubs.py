"""A stubbed Flink REST hook and task-instance context for operator unit tests: the hook answers from
real pydantic models of Flink's JSON and records every call; no network, no Airflow database."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from airflow_flink_replay.core.flink_models import (
    AsyncOperationStatus,
    CheckpointStats,
    JobDetails,
    JobManagerMemory,
    JobsOverview,
    SubmittedJob,
)
from airflow_flink_replay.exceptions import FlinkJobNotFoundError
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

AGENT = "action-execute-operator"


def job(jid: str, name: str, state: str = "RUNNING", *, vertices: bool = True) -> JobDetails:
    """Job details as ``GET /jobs/{id}`` returns them (a source and the agent vertex, all RUNNING)."""
    verts = [
        {"id": "src", "name": "Source: reviews", "parallelism": 1, "status": state},
        {"id": "agent", "name": AGENT, "parallelism": 1, "maxParallelism": 128, "status": state},
    ]
    return JobDetails.model_validate(
        {"jid": jid, "name": name, "state": state, "start-time": 1, "vertices": verts if vertices else []}
    )


class StubFlinkHook:
    """The methods of ``FlinkRestHook`` the Flink operators call, answered from ``jobs`` and ``savepoints``.

    The hook's own logic over those calls (``find_operation``, ``run_savepoint``, ``stop_outcome``,
    ``wait_for_job_state``, ``metaspace_short``) is ``FlinkRestHook``'s, unchanged.
    """

    log = logging.getLogger("tests.stub_flink_hook")
    settings = FlinkRestSettings(base_url="http://flink.test", min_metaspace_headroom_mb=96.0)
    base_url = settings.base_url
    operation_status = FlinkRestHook.operation_status
    find_operation = FlinkRestHook.find_operation
    run_savepoint = FlinkRestHook.run_savepoint
    stop_outcome = FlinkRestHook.stop_outcome
    wait_for_job_state = FlinkRestHook.wait_for_job_state
    job_failure_cause = FlinkRestHook.job_failure_cause
    metaspace_short = FlinkRestHook.metaspace_short

    def __init__(self, jobs: list[JobDetails] | None = None) -> None:
        self.jobs = {j.jid: j for j in jobs or []}
        self.savepoints: dict[str, AsyncOperationStatus] = {}  # trigger id -> status
        self.checkpoints: dict[str, Any] = {}  # job id -> GET /jobs/{id}/checkpoints JSON
        self.restored: dict[str, str] = {}  # job id -> the savepoint it restored from
        self.metaspace_free_mb = 400.0
        self.calls: list[tuple[str, Any]] = []

    def jobmanager_memory(self) -> JobManagerMemory:
        self.calls.append(("jobmanager_memory", None))
        return JobManagerMemory(metaspace_max=512 * 2**20, metaspace_used=(512 - self.metaspace_free_mb) * 2**20)

    def get_exceptions(self, job_id: str) -> Any:
        from airflow_flink_replay.core.flink_models import JobExceptions

        return JobExceptions.model_validate({})

    def job_ui_url(self, job_id: str, state: str | None = None) -> str:
        return f"http://flink.test/#/job/{job_id}"

    def all_running_since(self, job: JobDetails) -> Any:
        """Flink's own instant every task ran (``running_since``: job id -> datetime), None when not given."""
        return getattr(self, "running_since", {}).get(job.jid)

    def first_running_at(self, job: JobDetails) -> Any:
        """Flink's own instant the first task ran (``running_since`` too; None when not given)."""
        return getattr(self, "running_since", {}).get(job.jid)

    def rest_cache_seconds(self) -> float:
        """The REST API's cache age (a real cluster's ``web.refresh-interval``): none here."""
        return 0.0

    def get_job(self, job_id: str) -> JobDetails:
        self.calls.append(("get_job", job_id))
        if job_id not in self.jobs:
            raise FlinkJobNotFoundError(f"job {job_id} not found", operation="get job", job_id=job_id, status_code=404)
        return self.jobs[job_id]

    def list_jobs(self) -> JobsOverview:
        self.calls.append(("list_jobs", None))
        return JobsOverview.model_validate(
            {"jobs": [{"jid": j.jid, "name": j.name, "state": j.state, "start-time": j.start_time}
                      for j in self.jobs.values()]}
        )

    def get_savepoint_status(self, job_id: str, trigger_id: str) -> AsyncOperationStatus:
        from airflow_flink_replay.hooks.flink_rest import FlinkRestError

        self.calls.append(("get_savepoint_status", trigger_id))
        if trigger_id not in self.savepoints:
            raise FlinkRestError("unknown trigger", operation="savepoint status", status_code=404)
        return self.savepoints[trigger_id]

    def get_checkpoints(self, job_id: str) -> CheckpointStats:
        self.calls.append(("get_checkpoints", job_id))
        return CheckpointStats.model_validate(self.checkpoints.get(job_id) or {"counts": {}, "history": []})

    def restored_savepoint(self, job_id: str) -> str | None:
        self.calls.append(("restored_savepoint", job_id))
        return self.restored.get(job_id)

    def stop_with_savepoint(self, job_id: str, target: str, **kwargs: Any) -> str:
        self.calls.append(("stop_with_savepoint", kwargs["trigger_id"]))
        self.savepoints[kwargs["trigger_id"]] = AsyncOperationStatus.model_validate({"status": {"id": "IN_PROGRESS"}})
        return str(kwargs["trigger_id"])

    def trigger_savepoint(self, job_id: str, target: str, **kwargs: Any) -> str:
        self.calls.append(("trigger_savepoint", kwargs["trigger_id"]))
        return str(kwargs["trigger_id"])

    def cancel_job(self, job_id: str) -> None:
        self.calls.append(("cancel_job", job_id))


class StubSubmitter:
    """A ``FlinkJobSubmitter`` that records the submission and returns ``job_id``."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.submitted: list[dict[str, Any]] = []

    def submit(self, program: Any, **kwargs: Any) -> SubmittedJob:
        self.submitted.append({"program": program, **kwargs})
        return SubmittedJob(job_id=self.job_id, submitter="rest", submitted_at=datetime.now(UTC),
                            savepoint_path=kwargs.get("savepoint_path"))


class StubTI:
    """The task-instance fields the operators read, and the XComs they push."""

    def __init__(self, task_id: str, *, try_number: int = 1) -> None:
        self.dag_id, self.run_id, self.task_id = "dag", "manual__2026-12-01", task_id
        self.map_index, self.try_number = -1, try_number
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def context(task_id: str, *, try_number: int = 1) -> dict[str, Any]:
    """A minimal execution context."""
    ti = StubTI(task_id, try_number=try_number)
    return {"ti": ti, "run_id": ti.run_id}

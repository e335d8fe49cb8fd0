"""The Flink REST models parse Flink's JSON shapes; the Python program model builds PythonDriver's arguments."""

from __future__ import annotations

import pytest

from airflow_flink_replay.core.flink_models import (
    AsyncOperationStatus,
    CheckpointStats,
    FlinkPythonProgram,
    JobDetails,
    JobExceptions,
    ProductionPlan,
)
from airflow_flink_replay.hooks.flink_rest import flink_cause
from tests.fake_flink import JAVA_ERROR, JOB


def test_models_parse_flink_shapes() -> None:
    job = JobDetails.model_validate(JOB)
    plan = ProductionPlan.from_job(job)
    assert plan.agent_vertex_id == "v2" and plan.agent_vertex and plan.agent_vertex.max_parallelism == 256
    assert (
        ProductionPlan.from_job(JobDetails.model_validate({**JOB, "vertices": JOB["vertices"][:1]})).agent_vertex_id
        is None
    )
    assert AsyncOperationStatus.model_validate(
        {"status": {"id": "COMPLETED"}, "operation": {"location": "x"}}
    ).succeeded
    stats = CheckpointStats.model_validate(
        {
            "counts": {"completed": 2},
            "latest": {"savepoint": {"id": 4, "status": "COMPLETED", "is_savepoint": True, "external_path": "file:/a"}},
            "history": [
                {"id": 5, "status": "FAILED", "is_savepoint": True},
                {"id": 3, "status": "COMPLETED", "is_savepoint": True, "external_path": "file:/b"},
                {"id": 2, "status": "COMPLETED", "is_savepoint": False, "external_path": "file:/chk"},
            ],
        }
    )
    assert [s.external_path for s in stats.savepoints()] == ["file:/a", "file:/b"]
    exc = JobExceptions.model_validate({"exceptionHistory": {"entries": [{"stacktrace": JAVA_ERROR, "timestamp": 1}]}})
    assert exc.summary() == "java.lang.IllegalStateException: Cannot map checkpoint/savepoint state for operator abc"
    assert flink_cause(JAVA_ERROR).splitlines()[-1].startswith("Caused by: java.lang.IllegalStateException")


def test_python_program_model() -> None:
    program = FlinkPythonProgram(
        module="jobs.prod", pyfs=["/a", "/b.py"], program_args=["--x", "1"], parallelism=2, job_name="prod",
        extra_jars=["/j/k.jar"], flink_config={"python.fn-execution.bundle.size": 20, "x.enabled": True},
    )  # fmt: skip
    assert program.driver_args() == ["-pym", "jobs.prod", "-pyfs", "/a,/b.py", "--x", "1"]
    assert program.configuration() == {
        "python.fn-execution.bundle.size": "20",
        "x.enabled": "true",
        "parallelism.default": "2",
        "pipeline.name": "prod",
        "pipeline.classpaths": "file:///j/k.jar",
    }
    with pytest.raises(ValueError, match="exactly one of 'entry_point'"):
        FlinkPythonProgram(entry_point="a.py", module="a")
    with pytest.raises(ValueError, match=r"entry_point must be a \.py file"):
        FlinkPythonProgram(entry_point="a.jar")

"""The Flink REST models parse Flink's JSON shapes; the Python program model builds PythonDriver's arguments."""

from __future__ import annotations

import pytest

from airflow_flink_replay.core.flink_models import (
    PYTHON_TRACEBACK,
    AsyncOperationStatus,
    CheckpointStats,
    FlinkPythonProgram,
    JobDetails,
    JobExceptions,
    ProductionPlan,
    python_traceback,
)
from airflow_flink_replay.hooks.flink_rest_base import flink_cause
from tests.fake_flink import JAVA_ERROR, JOB, PYTHON_WORKER_ERROR


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


def test_a_python_worker_s_failure_is_its_traceback_without_the_worker_s_machinery() -> None:
    """Flink reports a Python worker's error as Java exceptions around the worker's traceback: the traceback is
    what the user needs (the job's module and line, the Python exception), without Beam's and PyFlink's frames."""
    found = python_traceback(PYTHON_WORKER_ERROR)
    lines = found.splitlines()
    assert lines[0] == PYTHON_TRACEBACK
    assert lines[1] == '  File "/tmp/python-files/afr_build_8392043e/gateway_import.py", line 18, in <module>'
    assert lines[2] == "    from flink_agents.api.core_options import AgentExecutionOptions"
    assert lines[-1].startswith("Exception: It's launching the PythonGatewayServer during Python UDF execution")
    assert "apache_beam" not in found and "beam_operations_fast" not in found and "^^^" not in found
    assert "\tat " not in found and "CompletableFuture" not in found
    exc = JobExceptions.model_validate({"exceptionHistory": {"entries": [
        {"stacktrace": JAVA_ERROR, "timestamp": 1}, {"stacktrace": PYTHON_WORKER_ERROR, "timestamp": 2}]}})
    assert exc.python_error() == found and exc.newest() is not None and exc.newest().timestamp == 2
    assert exc.summary(1) == lines[-1]  # the root cause of a Python failure is the Python exception
    assert python_traceback(JAVA_ERROR) == ""


CHAINED = (
    "Caused by: java.lang.RuntimeException: Error received from SDK harness for instruction 3: "
    "Traceback (most recent call last):\n"
    '  File "apache_beam/runners/worker/operations.py", line 567, in apache_beam.runners.worker.operations.Op\n'
    '  File "/srv/pkg/job.py", line 24, in strict_review\n'
    "    raise ValueError(REFUSAL)\n"
    "ValueError: a review needs a text\n"
    "\n"
    "The above exception was the direct cause of the following exception:\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/airflow_flink_replay/flink/pipeline.py", line 124, in process_element\n'
    '    raise ValueError(f"record rejected by the job definition ({exc}): {raw[:200]!r}") from exc\n'
    "ValueError: record rejected by the job definition (a review needs a text): b'{}'\n"
    "\n"
    "\tat java.base/java.util.concurrent.CompletableFuture.reportGet(CompletableFuture.java:396)\n"
)


def test_a_chained_python_error_keeps_the_exception_it_was_raised_from() -> None:
    found = python_traceback(CHAINED).splitlines()
    assert found[:4] == [PYTHON_TRACEBACK, '  File "/srv/pkg/job.py", line 24, in strict_review',
                         "    raise ValueError(REFUSAL)", "ValueError: a review needs a text"]
    assert "The above exception was the direct cause of the following exception:" in found
    assert found[-1] == "ValueError: record rejected by the job definition (a review needs a text): b'{}'"
    exc = JobExceptions.model_validate({"exceptionHistory": {"entries": [{"stacktrace": CHAINED, "timestamp": 1}]}})
    assert exc.summary() == found[-1]  # the root cause is the exception that failed the task


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

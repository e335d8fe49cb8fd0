"""Both submitters on the real local Flink: a job runs, and a failing Python program shows its own error.

The CLI path costs ~12 s of JVM start per call, so it is exercised once each way here; the rest of the
suite submits over REST.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
from airflow_flink_replay.hooks.flink_submit import FlinkSubmissionError, get_submitter
from tests.jobs import harness

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def flink(stack: Any) -> FlinkRestHook:
    # where Flink is on this host comes with the connection, as the stack writes it (never from stack.json)
    return FlinkRestHook(settings=FlinkRestSettings(
        base_url=stack.flink_rest_url, retries=2, flink_home=stack.flink_home, flink_conf_dir=stack.flink_conf_dir,
        java_home=stack.java_home,
    ))  # fmt: skip


@pytest.mark.parametrize("kind", ["rest", "cli"])
def test_failing_python_program_surfaces_its_own_error(stack: Any, flink: FlinkRestHook, kind: str) -> None:
    marker = harness.unique("boom")
    program = harness.counter_program(
        stack.kafka_bootstrap, "unused-in", "unused-out", [], job_name=marker, extra_args=["--fail", marker]
    )
    with pytest.raises(FlinkSubmissionError) as info:
        get_submitter(kind, flink).submit(program)
    assert info.value.cause == f"RuntimeError: {marker}"
    assert f"RuntimeError: {marker}" in str(info.value).splitlines()[0]
    assert "Python process exits with code" not in str(info.value).splitlines()[0]


def test_cli_submission_runs_the_job_with_name_and_parallelism(stack: Any, flink: FlinkRestHook) -> None:
    name = harness.unique("cp-cli")
    harness.create_topics(stack.kafka_bootstrap, f"{name}-in", f"{name}-out")
    program = harness.counter_program(
        stack.kafka_bootstrap, f"{name}-in", f"{name}-out", stack.connector_jars, job_name=name,
        hold=False, extra_args=["--parallelism", "0"],  # the job takes the submitter's parallelism (-p)
    )  # fmt: skip
    submitted = get_submitter("cli", flink).submit(program, parallelism=2)
    try:
        assert submitted.submitter == "cli" and len(submitted.job_id) == 32
        job = flink.wait_for_job_state(submitted.job_id, ("RUNNING",), timeout=120)
        assert job.name == name
        assert len(job.vertices) >= 2  # the source chain, and the keyed counter after key_by
        assert [v.parallelism for v in job.vertices] == [2] * len(job.vertices), job.vertices
        harness.produce(stack.kafka_bootstrap, f"{name}-in", range(3))
        out = harness.wait_outputs(stack.kafka_bootstrap, f"{name}-out", lambda o: len(harness.counts(o)) == 3)
        assert harness.counts(out) == {0: 1, 1: 1, 2: 1}
    finally:
        flink.cancel_job(submitted.job_id)
        harness.delete_topics(stack.kafka_bootstrap, f"{name}-in", f"{name}-out")

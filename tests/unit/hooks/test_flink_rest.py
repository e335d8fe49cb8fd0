"""FlinkRestHook's endpoints against a real local HTTP server that plays a Flink REST endpoint
(``tests/fake_flink.py``): request bodies, typed answers, the job-state waits. The transport under them (retries,
calls never resent, errors, settings) is tested in ``test_flink_rest_base.py``, the savepoint/stop procedures
in ``test_flink_savepoints.py``.

Flink-shaped answers are scripted per path; everything else (requests, pydantic) is real.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_flink_replay.exceptions import FlinkJobFailedError, FlinkOperationTimeoutError
from airflow_flink_replay.hooks.flink_rest import FlinkRestError
from tests.fake_flink import JAVA_ERROR, JOB, PYTHON_WORKER_ERROR, FakeFlink, make_hook
from tests.fake_flink import fake as fake  # the scripted Flink (a fixture)


def _failures(*timestamps: int, stacktrace: str = PYTHON_WORKER_ERROR) -> dict[str, Any]:
    return {"exceptionHistory": {"entries": [{"stacktrace": stacktrace, "timestamp": t} for t in timestamps]}}


def _checkpoints(*triggered: int) -> dict[str, Any]:
    history = [{"id": i + 1, "status": "COMPLETED", "is_savepoint": False, "trigger_timestamp": t}
               for i, t in enumerate(triggered)]  # fmt: skip
    return {"counts": {"completed": len(history)}, "latest": {}, "history": history}


def test_a_job_runs_once_it_checkpointed_after_its_newest_failure(fake: tuple[FakeFlink, str]) -> None:
    """Flink Agents' action-state store often restarts a job once at start: a checkpoint taken before that
    failure does not count, one taken after it does."""
    state, url = fake
    state.on("GET", "/jobs/j1", (200, {**JOB, "state": "RESTARTING"}), (200, JOB))
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(100, stacktrace=JAVA_ERROR)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _checkpoints(50)), (200, _checkpoints(50)),
             (200, _checkpoints(50, 150)))
    running = make_hook(url).wait_until_checkpointed("j1", timeout=30, poll_interval=0.01)
    assert (running.checkpoint_id, running.failures) == (2, 1)
    assert running.newest_failure.startswith("java.lang.IllegalStateException: Cannot map")
    assert state.calls[("GET", "/jobs/j1")] == 3  # restarting, then twice running: without, then with a checkpoint


def test_a_long_running_production_that_recovered_from_old_failures_runs(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, JOB))
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(1, 2, 3, 4)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _checkpoints(5, 9)))
    running = make_hook(url).wait_until_checkpointed("j1", timeout=30, poll_interval=0.01)
    assert (running.checkpoint_id, running.failures) == (2, 4)


def test_a_job_that_fails_or_keeps_restarting_is_reported_with_its_python_error(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, {**JOB, "state": "FAILED"}))
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(1, 2)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _checkpoints()))
    hook = make_hook(url)
    with pytest.raises(FlinkJobFailedError) as failed:
        hook.wait_until_checkpointed("j1", timeout=30, poll_interval=0.01)
    text = str(failed.value)
    assert text.startswith("Flink job prod (j1) ended FAILED after 2 failure(s):\nTraceback (most recent call last):")
    assert 'gateway_import.py", line 18, in <module>' in text and "PythonGatewayServer during Python UDF" in text
    assert failed.value.cause and failed.value.cause in text

    state.on("GET", "/jobs/j1", (200, {**JOB, "state": "RESTARTING"}))
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(1, 2, 3)))
    with pytest.raises(FlinkJobFailedError, match=r"is failing: 3 failures in a row, since it started \(state RESTA"):
        hook.wait_until_checkpointed("j1", timeout=30, poll_interval=0.01)
    # a production that recovered from old failures (checkpoints after them) and fails anew is not failing yet
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(1, 2, 3, 20)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _checkpoints(10)))
    with pytest.raises(FlinkOperationTimeoutError, match=r"\(state RESTARTING, tasks RUNNING, 1 failure\(s\) so far"):
        hook.wait_until_checkpointed("j1", timeout=0.2, poll_interval=0.05)


def test_a_job_without_a_checkpoint_in_time_says_its_state_and_failures(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("GET", "/jobs/j1", (200, JOB))
    state.on("GET", "/jobs/j1/exceptions", (200, _failures(10)))
    state.on("GET", "/jobs/j1/checkpoints", (200, _checkpoints(5)))  # before the failure: not counted
    with pytest.raises(FlinkOperationTimeoutError) as late:
        make_hook(url).wait_until_checkpointed("j1", timeout=0.2, poll_interval=0.05)
    assert str(late.value).startswith("Flink job prod (j1) completed no checkpoint within 0.2 s (state RUNNING, "
                                      "tasks RUNNING, 1 failure(s) so far):\nTraceback")


# ------------------------------------------------------------------------------------- request bodies


def test_savepoint_and_stop_bodies(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("POST", "/jobs/j1/savepoints", (202, {"request-id": "t1"}))
    state.on("POST", "/jobs/j1/stop", (202, {"request-id": "t2"}))
    hook = make_hook(url)
    hook.trigger_savepoint("j1", "file:///sp/a", format_type="NATIVE", trigger_id="t1")
    hook.trigger_savepoint("j1")
    hook.stop_with_savepoint("j1", "file:///sp/b", drain=True, trigger_id="t2")
    hook.stop_with_savepoint("j1", "file:///sp/c", format_type="NATIVE")
    assert state.bodies[("POST", "/jobs/j1/savepoints")] == [
        {"cancel-job": False, "formatType": "NATIVE", "target-directory": "file:///sp/a", "triggerId": "t1"},
        {"cancel-job": False, "formatType": "CANONICAL"},
    ]
    assert state.bodies[("POST", "/jobs/j1/stop")] == [
        {"drain": True, "formatType": "CANONICAL", "targetDirectory": "file:///sp/b", "triggerId": "t2"},
        {"drain": False, "formatType": "NATIVE", "targetDirectory": "file:///sp/c"},
    ]


def test_run_jar_and_jar_plan_bodies(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on("POST", "/jars/x/run", (200, {"jobid": "j9"}))
    state.on("POST", "/jars/x/plan", (200, {"plan": {"jid": "p", "name": "prod", "nodes": []}}))
    hook = make_hook(url)
    args = ["-pym", "jobs.prod", "--x", "1"]
    assert hook.run_jar("x", entry_class="Main", program_args=args, savepoint_path="file:/sp/savepoint-1",
                        allow_non_restored_state=True, parallelism=3,
                        flink_configuration={"pipeline.name": "prod"}) == "j9"  # fmt: skip
    hook.run_jar("x", entry_class="Main", savepoint_path="file:/sp/savepoint-2")
    hook.run_jar("x", program_args=args, allow_non_restored_state=True)
    hook.jar_plan("x", entry_class="Main", program_args=args, parallelism=2)
    assert state.bodies[("POST", "/jars/x/run")] == [
        {"entryClass": "Main", "programArgsList": args, "savepointPath": "file:/sp/savepoint-1",
         "allowNonRestoredState": True, "parallelism": 3, "flinkConfiguration": {"pipeline.name": "prod"}},
        {"entryClass": "Main", "savepointPath": "file:/sp/savepoint-2", "allowNonRestoredState": False},
        {"programArgsList": args},  # the flag only means something with a savepoint
    ]  # fmt: skip
    assert state.bodies[("POST", "/jars/x/plan")] == [{"entryClass": "Main", "programArgsList": args, "parallelism": 2}]


def test_plan_jars_list_and_delete(fake: tuple[FakeFlink, str]) -> None:
    state, url = fake
    state.on(
        "GET",
        "/jobs/j1/plan",
        (200, {"plan": {"jid": "j1", "name": "prod", "type": "STREAMING", "nodes": [
            {"id": "v2", "parallelism": 2, "description": "action-execute-operator<br/>+- Map",
             "inputs": [{"id": "v1", "ship_strategy": "HASH"}]},
            {"id": "v1", "parallelism": 1, "description": "Source: source", "inputs": []}]}}),
    )  # fmt: skip
    state.on("GET", "/jars", (200, {"address": url, "files": [{"id": "a_x.jar", "name": "x.jar", "uploaded": 7,
                                                                "entry": [{"name": "Main"}]}]}))  # fmt: skip
    state.on("DELETE", "/jars/a_x.jar", (200, {}))
    state.on("PATCH", "/jobs/j1?mode=cancel", (202, {}))
    state.on("PATCH", "/jobs/j2?mode=cancel", (409, {"errors": ["Job j2 is not running"]}))
    hook = make_hook(url)
    plan = hook.get_plan("j1")
    assert (plan.jid, plan.name, plan.type) == ("j1", "prod", "STREAMING")
    assert [(n.id, n.parallelism, [i.id for i in n.inputs]) for n in plan.nodes] == [("v2", 2, ["v1"]), ("v1", 1, [])]
    assert "action-execute-operator" in plan.nodes[0].description
    jars = hook.list_jars()
    assert [(j.id, j.name, j.uploaded) for j in jars] == [("a_x.jar", "x.jar", 7)]
    hook.delete_jar("a_x.jar")
    assert state.calls[("DELETE", "/jars/a_x.jar")] == 1
    with pytest.raises(FlinkRestError, match=r"Flink delete jar gone\.jar failed \(HTTP 404"):
        hook.delete_jar("gone.jar")
    hook.cancel_job("j1")
    hook.cancel_job("j2")  # an ended job is left alone
    assert state.calls[("PATCH", "/jobs/j1?mode=cancel")] == 1 and state.calls[("PATCH", "/jobs/j2?mode=cancel")] == 1


def test_job_ui_url_follows_the_flink_dashboard_routes() -> None:
    hook = make_hook("http://flink:8081")
    assert hook.job_ui_url("j1") == "http://flink:8081/#/job/running/j1/overview"
    assert hook.job_ui_url("j1", "RUNNING") == "http://flink:8081/#/job/running/j1/overview"
    assert hook.job_ui_url("j1", "INITIALIZING") == "http://flink:8081/#/job/running/j1/overview"
    for ended in ("FINISHED", "CANCELED", "FAILED", "finished"):
        assert hook.job_ui_url("j1", ended) == "http://flink:8081/#/job/completed/j1/overview"


def test_restored_savepoint_reads_the_restore_of_the_statistics(fake: Any) -> None:
    state, url = fake
    restored = {"latest": {"restored": {"id": 3, "is_savepoint": True, "external_path": "file:/sp/d/r/sp-1"}}}
    state.on("GET", "/jobs/j2/checkpoints", (200, restored))
    state.on("GET", "/jobs/j3/checkpoints", (200, {"latest": {"restored": None}}))
    hook = make_hook(url)
    assert hook.restored_savepoint("j2") == "file:/sp/d/r/sp-1"
    assert hook.restored_savepoint("j3") is None

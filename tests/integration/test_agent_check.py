"""The agent check on the real stack: the job-side program runs in the replay cluster's JobManager (REST
``/plan``) or through ``flink run`` (CLI), imports job definitions written by a user (tests/jobs/agent_check),
builds their Flink Agents plans, reads records from a real capture topic, and the Airflow task logs the
report — or fails with it: the Python error's text with the file and line that raised, the subclassing trap
explained, a deserializer that cannot read a captured record.

All checks of one module run as tasks of ONE DAG under ``dag.test()`` (each is a few seconds of PythonDriver
on the replay cluster); each test then reads its own task's state, its report and its log.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.jobs import harness

pytestmark = pytest.mark.timeout(600)

#: The test's job definitions (they import Flink Agents: the job side imports them, this process reads them).
JOBS = Path(__file__).resolve().parents[1] / "jobs" / "agent_check"
DEFS = "tests.jobs.agent_check.definitions"
HEALTHY = f"{DEFS}:healthy"
TOOL_IDS = "tests.jobs.agent_check.tool_ids"
#: task id -> (candidate job definition, submitter[, production's job definition: HEALTHY if not given])
CHECKS: dict[str, tuple[str, ...]] = {
    "healthy": (f"{DEFS}:redeclared_subclass", "rest"),
    "healthy_cli": (f"{DEFS}:redeclared_subclass", "cli"),
    "plain_subclass": (f"{DEFS}:plain_subclass", "rest"),
    "lost_tool": (f"{DEFS}:lost_tool", "rest"),
    "import_fails": ("tests.jobs.agent_check.import_fails:job", "rest"),
    "build_fails": (f"{DEFS}:build_fails", "rest"),
    "wrong_input": (f"{DEFS}:wrong_input", "rest"),
    "gateway_import": ("tests.jobs.agent_check.gateway_import:job", "rest"),
    "tool_ids": (f"{TOOL_IDS}:recorded_ids", "rest", f"{TOOL_IDS}:uuid_ids"),
}
REVIEWS = [
    {"id": f"r{i}", "customer": f"c{i}", "product": "kettle", "rating": 1 + i, "text": "fine", "ts": 1_700_000_000 + i}
    for i in range(3)
]


def _constant(path: Path, name: str) -> str:
    """A module-level string constant of a test definition (read, not imported: they need Flink Agents)."""
    tree = ast.parse(path.read_text())
    return next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets)
    )


def _source_line(needle: str, path: Path) -> int:
    """The line of ``path`` that holds ``needle`` (where a test definition raises)."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _spec(stack: Any, capture_topic: str, candidate: str, work: Path, production: str = HEALTHY) -> dict[str, Any]:
    return {
        "name": "agent-check",
        "production": {
            "job_name": "agent-check-production",
            "program": {"module": "airflow_flink_replay.flink.production_job"},
            "agent_job": production,
            "input_topic": f"{capture_topic}-in",
            "capture_topic": capture_topic,
            "action_state_topic": f"{capture_topic}-state",
            "job_identifier": "agent-check-production",
            "agent_uid": "afr-agent",
        },
        "candidate_agent_job": candidate,
        "policy": {"by_name": {"notify_support": "block"}},
        "kafka_bootstrap": stack.kafka_bootstrap,
        "replay_flink_conn_id": "flink_replay",
        "runs_uri": f"file://{work}",
    }


#: The one run of the DAG, shared by the tests of this module (filled by the first test that asks).
_RESULTS: dict[str, Any] = {}


@pytest.fixture
def checked(stack: Any, airflow_db: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every check of :data:`CHECKS` as a task of one DAG run (once per module): task id -> its state, its
    result (the return value, or what it pushed before failing) and its log (what ``dag.test()`` printed
    between the task's start and end)."""
    if not _RESULTS:
        _RESULTS.update(_run_checks(stack, tmp_path_factory.mktemp("agent-check")))
    return _RESULTS


def _run_checks(stack: Any, work: Path) -> dict[str, Any]:
    """Run the checks' DAG in a Python process of its own and read what it printed.

    In-process, Airflow's log handlers keep the streams of the test that first configured logging, so in a
    full session the task logs never reached this test's capture (the module passed alone and failed in the
    suite); a fresh process prints everything to its own stdout. Same metadata DB (``AIRFLOW_HOME``)."""
    from confluent_kafka import Producer

    topic = f"afr-agent-check-{uuid.uuid4().hex[:8]}"
    harness.create_topics(stack.kafka_bootstrap, topic)
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "linger.ms": 0})
    for review in REVIEWS:
        producer.produce(topic, key=review["customer"], value=json.dumps(review).encode())
        producer.flush(10)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.integration.test_agent_check", topic, str(work)],
            cwd=Path(__file__).resolve().parents[2], env=os.environ.copy(), capture_output=True, text=True,
            timeout=540, check=False,
        )
    finally:
        harness.delete_topics(stack.kafka_bootstrap, topic)
    printed = done.stdout + done.stderr
    found = re.search(rf"^{_RESULTS_MARK} (.*)$", done.stdout, re.M)
    assert found, (done.returncode, printed[-4000:])
    out: dict[str, Any] = {"topic": topic}
    for task_id, info in json.loads(found.group(1)).items():
        out[task_id] = {**info, "log": _task_log(printed, task_id)}
    return out


#: The line the checks' DAG process prints its results on (JSON after the mark).
_RESULTS_MARK = "AFR-AGENT-CHECK-RESULTS"


def _run_checks_here(topic: str, work: Path) -> None:
    """The checks' DAG, run in this process (``python -m tests.integration.test_agent_check TOPIC WORK``)."""
    from airflow.sdk import DAG

    from airflow_flink_replay.ids import XCOM_AGENT_CHECK_KEY
    from airflow_flink_replay.local.stack import LocalStack, StackConfig
    from airflow_flink_replay.operators.agent_check import AgentCheckOperator

    stack = LocalStack(StackConfig()).info()
    assert stack is not None, "no local stack"
    dag_id = f"agent_check_{uuid.uuid4().hex[:6]}"
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        for task_id, (candidate, submitter, *production) in CHECKS.items():
            AgentCheckOperator(
                task_id=task_id, spec=_spec(stack, topic, candidate, work, *production), submitter=submitter,
                retries=0,
            )
    dr = harness.run_dag_test(dag, stack.connections_file)
    results = {}
    for ti in dr.get_task_instances():
        result = ti.xcom_pull(task_ids=ti.task_id) or ti.xcom_pull(task_ids=ti.task_id, key=XCOM_AGENT_CHECK_KEY)
        results[ti.task_id] = {"state": str(ti.state), "result": result}
    print(f"{_RESULTS_MARK} {json.dumps(results, default=str)}", flush=True)


def _task_log(printed: str, task_id: str) -> str:
    """What ``dag.test()`` printed while ``task_id`` ran (its task log)."""
    match = re.search(
        rf"\[DAG TEST\] starting task_id={task_id} .*?\[DAG TEST\] end task task_id={task_id} ", printed, re.S
    )
    assert match, f"no log of {task_id} in the output"
    return match.group(0)


def _refused(checked: dict[str, Any], task_id: str) -> tuple[str, str]:
    """The failed task's report and its log; the log holds the task's failure with the report as message."""
    info = checked[task_id]
    assert info["state"] == "failed", info
    assert info["result"]["refused"] is True
    log = info["log"]
    assert "Task failed with exception" in log and "AirflowFailException" in log
    return info["result"]["report"], log


def test_a_healthy_definition_reports_actions_resources_and_the_decision_each_will_get(checked: dict[str, Any]) -> None:
    for task_id in ("healthy", "healthy_cli"):  # the same report through REST (/plan) and the CLI (flink run)
        info = checked[task_id]
        assert info["state"] == "success", info
        report = info["result"]["report"]
        assert info["result"]["refused"] is False and report in info["log"]
        assert re.fullmatch(r"agent check \(flink-agents 0\.2\.0, Python [\d.]+\): OK", report.splitlines()[0])
        for role in ("production", "candidate"):
            section = report.split(f"{role}: ", 1)[1]
            assert "actions: process_input (InputEvent), process_response (ChatResponseEvent)" in section
            assert re.search(r"chat_model +review_model +agent +allow", section)
            assert re.search(r"tool +notify_support +agent +block", section)  # the spec's policy, by name
            assert re.search(r"chat_model_connection +env_review_llm +env +- used through a chat model setup", section)
            assert "input: 3 captured record(s) -> dict, key c2 (str, serialised pickled)" in section  # the key's text
            assert "sample run: skipped (the agent uses review_memory (vector store or long-term memory)" in section
        assert "agent operator identity: uid 'afr-agent'" in report
        assert f"captured records tried: 3 from {checked['topic']}" in report


def test_a_plain_subclass_is_refused_saying_why_and_how_to_fix_it(checked: dict[str, Any]) -> None:
    report, log = _refused(checked, "plain_subclass")
    for text in (report, log):
        assert "candidate's agent tests.jobs.agent_check.definitions.PlainSubclass has an empty plan" in text
        assert "ReviewAgent.process_input (action)" in text and "ReviewAgent.notify_support (tool)" in text
        assert "flink-agents builds an agent's plan from the class's own __dict__" in text
        assert "Fix: declare the actions and resources on the agent class itself, or re-declare" in text


def test_a_candidate_that_lost_production_s_tool_is_refused(checked: dict[str, Any]) -> None:
    report, _ = _refused(checked, "lost_tool")
    assert (
        "lost what production's (tests.jobs.agent_check.definitions:healthy) has: resources tool 'notify_support'"
        in report
    )
    assert "ReviewAgent.notify_support (tool), which flink-agents does not see" in report


def test_a_definition_that_raises_at_import_fails_the_task_with_its_python_error(checked: dict[str, Any]) -> None:
    path = JOBS / "import_fails.py"
    line = _source_line("raise ImportError(IMPORT_ERROR)", path)
    report, log = _refused(checked, "import_fails")
    for text in (report, log):
        assert f"ImportError: {_constant(path, 'IMPORT_ERROR')}" in text
        assert f'File "{path}", line {line}, in <module>' in text
        assert "Python process exits with code" not in text


def test_a_factory_that_raises_at_build_fails_the_task_with_its_python_error(checked: dict[str, Any]) -> None:
    path = JOBS / "definitions.py"
    line = _source_line("raise RuntimeError(BUILD_ERROR)", path)
    report, log = _refused(checked, "build_fails")
    for text in (report, log):
        assert "raised while building the agent" in text
        assert f"RuntimeError: {_constant(path, 'BUILD_ERROR')}" in text
        assert f'File "{path}", line {line}, in agent_factory_that_raises' in text


def test_a_definition_flink_s_python_worker_cannot_import_is_refused_with_pyflink_s_error(
    checked: dict[str, Any],
) -> None:
    """The module imports flink_agents.api.core_options at its top: fine in the JobManager's PythonDriver (it has a
    gateway), fatal in Flink's Python worker, which the check imitates (issue 48)."""
    path = JOBS / "gateway_import.py"
    line = _source_line("from flink_agents.api.core_options import AgentExecutionOptions", path)
    report, log = _refused(checked, "gateway_import")
    for text in (report, log):
        assert ("candidate job definition tests.jobs.agent_check.gateway_import:job cannot be imported the way "
                "Flink's Python worker imports it") in text
        assert "Exception: It's launching the PythonGatewayServer during Python UDF execution" in text
        assert f'File "{path}", line {line}, in <module>' in text
        assert 'Fix: a module Flink\'s Python worker imports starts PyFlink\'s Java gateway' in text
        assert 'config={"num-async-threads": 2}' in text


def test_tool_call_ids_that_are_not_uuids_are_refused_by_the_sample_run(checked: dict[str, Any]) -> None:
    """One captured record through each agent, the tool recorded (never executed): the candidate's chat answers
    carry recorded ids ('call_0'), which Flink Agents refuses; production's UUID ids pass (issue 48)."""
    report, _ = _refused(checked, "tool_ids")
    problems = checked["tool_ids"]["result"]["checked"]["problems"]
    assert len(problems) == 1 and problems[0].startswith("candidate's sample run on a captured record (")
    assert "Flink Agents refused an event built from what the agent's resources returned: ValidationError: 2 " \
           "validation errors for ToolResponseEvent" in problems[0]
    assert "Input should be a valid UUID" in problems[0] and "input_value='call_0'" in problems[0]
    assert "Fix: Flink Agents keys tool calls by UUID" in problems[0]
    production = report.split("production: ", 1)[1].split("candidate: ", 1)[0]
    calls = ("calls: chat_model review_analysis_model.chat: allow (ok), tool notify_shipping_manager.call: record "
             "(recorded)")
    assert re.search(rf"sample run on {checked['topic']}/\d@\d+: 1 output\(s\); " + re.escape(calls), production)
    assert "FAILED: ValidationError: 2 validation errors for ToolResponseEvent; " + calls in report


def test_a_deserializer_that_cannot_read_a_captured_record_is_refused(checked: dict[str, Any]) -> None:
    report, _ = _refused(checked, "wrong_input")
    topic = checked["topic"]
    assert f"candidate's deserializer or key selector cannot produce the agent's input from {topic}/0@" in report
    assert "ValueError: invalid literal for int()" in report and "in review_number" in report
    assert "lost what production's" not in report  # only the input differs from production's definition


def test_a_check_program_that_dies_before_it_can_report_raises_with_its_own_traceback(stack: Any) -> None:
    """The program itself missing on the job side (an old airflow-flink-replay there, say): no report comes
    back, and the error is the Python error from the JobManager's log, not "Python process exits with code"."""
    from airflow_flink_replay.core.flink_models import FlinkPythonProgram
    from airflow_flink_replay.exceptions import FlinkSubmissionError
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter

    url = stack.replay_flink_rest_url or stack.flink_rest_url
    submitter = RestPythonSubmitter(
        FlinkRestHook(settings=FlinkRestSettings(base_url=url, flink_home=stack.flink_home))
    )
    missing = f"afr_no_such_check_{uuid.uuid4().hex[:6]}"
    with pytest.raises(FlinkSubmissionError) as info:
        submitter.run_check(FlinkPythonProgram(module=missing, program_args=["--production", "x:y"]))
    first_line = str(info.value).splitlines()[0]
    assert f"No module named {missing}" in info.value.cause and f"No module named {missing}" in first_line
    assert "Python process exits with code" not in first_line


if __name__ == "__main__":
    _run_checks_here(sys.argv[1], Path(sys.argv[2]))

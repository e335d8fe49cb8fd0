"""``flink-replay deploy`` says whether production runs, on the stack (issue 48).

- A job definition module that imports ``flink_agents.api.core_options`` at its top (as the Flink Agents
  quickstart does) imports fine on the client and kills every task attempt in Flink's Python worker, where
  PyFlink refuses to start a Java gateway. ``deploy`` runs the agent check first, imports the definition's
  worker-side code the way that worker does, and refuses it with PyFlink's error and the fix: nothing is
  submitted, exit 1. (Before, it printed "submitted" and exited 0, and the job died on its first record.)
- A definition that passes the check but fails on a record already waiting in the input: ``deploy`` waits for
  production's first checkpoint, sees the job fail again and again, cancels it (it started it) and exits 1
  with the Python error of the failing task.
- ``produce`` to that dead production sends nothing and exits 1.

Cost: ~10 s for the refusal, 30-60 s for the failing production (three task attempts, 2 s apart).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.jobs import harness

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / ".venv" / "bin" / "flink-replay"


def _cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def _jobs(stack: Any, name: str) -> list[Any]:
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    return FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url)).list_jobs().by_name(name)


def _topics(name: str) -> list[str]:
    return [f"{name}-{suffix}" for suffix in ("input", "outputs", "capture", "action-state", "cassette")]


def test_a_definition_flink_s_python_worker_cannot_import_is_refused_before_anything_is_submitted(stack: Any) -> None:
    name = f"afr-gateway-{uuid.uuid4().hex[:6]}"
    try:
        done = _cli("deploy", "--agent-job", "tests.jobs.agent_check.gateway_import:job", "--name", name)
        assert done.returncode == 1, (done.stdout, done.stderr)
        err = done.stderr
        assert err.startswith("deploy: production's job definition tests.jobs.agent_check.gateway_import:job would "
                              "not run in Flink; nothing was submitted."), err
        assert "cannot be imported the way Flink's Python worker imports it" in err
        assert "Exception: It's launching the PythonGatewayServer during Python UDF execution" in err
        assert 'tests/jobs/agent_check/gateway_import.py", line 18, in <module>' in err
        assert 'Fix: a module Flink\'s Python worker imports starts PyFlink\'s Java gateway' in err
        assert 'config={"num-async-threads": 2}' in err
        assert "submitted" not in done.stdout and _jobs(stack, name) == []
    finally:
        harness.delete_topics(stack.kafka_bootstrap, *_topics(name))


def test_a_production_that_fails_on_its_input_is_reported_cancelled_and_not_fed(stack: Any, tmp_path: Path) -> None:
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    name = f"afr-rejects-{uuid.uuid4().hex[:6]}"
    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    spec = tmp_path / "spec.yaml"
    try:
        harness.create_topics(stack.kafka_bootstrap, f"{name}-input")
        record = tmp_path / "bad.jsonl"
        record.write_text(json.dumps({"id": "r1", "customer": "c1"}) + "\n")  # no "text": the definition refuses it
        assert _cli("produce", "--topic", f"{name}-input", "--file", str(record)).returncode == 0
        done = _cli("deploy", "--agent-job", "tests.jobs.agent_check.rejects_records:job", "--name", name,
                    "--spec-out", str(spec), "--wait", "240")
        assert done.returncode == 1, (done.stdout, done.stderr)
        err = done.stderr
        assert err.startswith(f"deploy: production does not run: Flink job {name} ("), err
        assert "failure(s)" in err or "failures in a row, since it started" in err, err  # FAILED, or still restarting
        assert "ValueError: a review needs a text" in err and 'rejects_records.py", line ' in err, err
        assert "ValueError: record rejected by the job definition (a review needs a text)" in err, err
        assert "Fix: correct the error above in your job definition, then deploy again" in err
        assert not spec.exists()  # no spec for a production that does not run
        jobs = _jobs(stack, name)
        state = hook.get_job(jobs[0].jid).state if len(jobs) == 1 else jobs
        assert state in ("CANCELLING", "CANCELED", "FAILED"), state  # failing in a loop is not left behind
        if "deploy cancelled the job (it had started it)" in err:
            assert state != "FAILED"

        spec.write_text(_spec_text(stack, name))
        fed = _cli("produce", "--spec", str(spec), "--file", str(record))
        assert fed.returncode == 1 and f"production '{name}' does not run on the stack" in fed.stderr, fed.stderr
        assert "a review needs a text" in fed.stderr and "nothing was sent" in fed.stderr
    finally:
        for job in _jobs(stack, name):
            if job.state not in ("FAILED", "CANCELED", "FINISHED"):
                hook.cancel_job(job.jid)
        harness.delete_topics(stack.kafka_bootstrap, *_topics(name))


def _spec_text(stack: Any, name: str) -> str:
    """A spec naming the failed production (``deploy`` wrote none)."""
    return (f"name: {name}\nproduction:\n  job_name: {name}\n  job_identifier: {name}\n"
            f"  agent_job: tests.jobs.agent_check.rejects_records:job\n"
            f"  program: {{module: airflow_flink_replay.flink.production_job}}\n  input_topic: {name}-input\n"
            f"  capture_topic: {name}-capture\n  action_state_topic: {name}-action-state\n"
            f"kafka_bootstrap: '{stack.kafka_bootstrap}'\nruns_uri: file:///tmp/afr-{name}\n")

"""The audit key hook: its name table is per task thread (one job's audit never depends on other jobs' inputs), and a
job definition's key selector names keys by their text in audit records and cassette entries."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from airflow_flink_replay.flink import audit_context


def _on_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", fn()))
    t.start()
    t.join()
    return out["v"]


def test_hashes_map_back_to_the_key_learnt_on_this_thread() -> None:
    key = f"cust-{uuid.uuid4().hex[:6]}"
    h = audit_context.java_string_hash(key)
    assert h == _java_hash(key)

    def learn_and_resolve():
        audit_context.learn_key(key)
        return [audit_context.key_text(x) for x in (h, h + 31, h + 62)]

    assert _on_thread(learn_and_resolve) == [key] * 3


def test_another_threads_names_are_not_used() -> None:
    """A key learnt by one task (another job) stays unknown to the next: its hash, as text, every time."""
    key = f"cust-{uuid.uuid4().hex[:6]}"
    _on_thread(lambda: audit_context.learn_key(key))
    h = audit_context.java_string_hash(key) + 62
    assert _on_thread(lambda: audit_context.key_text(h)) == str(h)
    assert audit_context.key_text("text") == "text" and audit_context.key_text(None) == ""


def test_current_key_is_per_thread() -> None:
    audit_context.set_current_key("main-key")
    assert _on_thread(audit_context.current_key) == ""
    assert audit_context.current_key() == "main-key"


def _java_hash(text: str) -> int:
    h = 0
    for ch in text:  # ASCII keys: UTF-16 units = code points
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


# ------------------------------------------------------------------------ a job definition's key selector
ROOT = Path(__file__).resolve().parents[3]
FLINK_PYTHON = Path(os.environ.get("FLINK_REPLAY_STACK_DIR") or ROOT / ".stack") / "flink-venv" / "bin" / "python"

#: A TaskManager task, as far as the key goes, for the counter agent's job definition (``key_selector`` a
#: function of the input object) with each key type: the task thread loads the plan (the key hook's marker), the
#: runtime wraps an input record and switches the action context with the int it passes for the key — the
#: hashCode of ``Row(key)``, i.e. of the key's Flink value + 62 — and the action calls a tool. Production records
#: the call to its cassette, a replay audits it: both must name the key by its text.
SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, sys, threading
    import cloudpickle
    from flink_agents.api.resource import ResourceType
    from flink_agents.plan.agent_plan import AgentPlan
    from flink_agents.runtime import flink_runner_context as frc, python_java_utils as pju
    from airflow_flink_replay.core.audit import java_bytes_hash, java_string_hash, read_audit
    from airflow_flink_replay.core.cassette import CassetteRecording
    from airflow_flink_replay.core.policy import ReplayPolicy
    from airflow_flink_replay.flink import cassette_io, proxies
    from airflow_flink_replay.flink.agent_job import AgentJob, audit_key_source
    from airflow_flink_replay.flink.capture import key_bytes
    from tests.jobs.counter_agent import job as counter

    audit_dir = sys.argv[1]
    recorded = []
    cassette_io.CassetteRecorder._produce = lambda self, entry: recorded.append(entry.key)

    def int32(v):
        v &= 0xFFFFFFFF
        return v - (1 << 32) if v >= (1 << 31) else v

    def runtime_hash(key, key_type):  # Row(key).hashCode() of the key's Flink value
        if key_type is None:
            return int32(java_bytes_hash(cloudpickle.dumps(key)) + 62)
        if key_type == "string":
            return int32(java_string_hash(key) + 62)
        return int32((key ^ (key >> 32)) + 62)  # Long.hashCode, a non-negative key

    class Config:  # no unmediated-call guard entry in these plans
        def get_str(self, key, default):
            return default

    class Ctx:  # the runner context the switch is given
        long_term_memory = None
        config = Config()

    def task(plan_json, job, review):
        plan = AgentPlan.model_validate_json(plan_json)  # the task loads its plan: the marker
        pju.wrap_to_input_event(cloudpickle.dumps(review))
        frc.flink_runner_context_switch_action_context(Ctx(), runtime_hash(job.key_selector(review), job.key_type))
        plan.get_resource("open_ticket", ResourceType.TOOL).call(review_id=review.id, total=1)

    def run(job, role, review):
        plan = job.build_plan()
        key_field, selector = audit_key_source(job)
        if role == "production":
            recording = CassetteRecording(bootstrap="127.0.0.1:1", topic="cassette", record=("tool",))
            proxies.record_plan_resources(plan, recording, key_field, selector)
        else:
            proxies.rewrite_plan_resources(plan, ReplayPolicy(), role, audit_dir, key_field, key_selector=selector)
        t = threading.Thread(target=task, args=(plan.model_dump_json(serialize_as_any=True), job, review))
        t.start()
        t.join()

    by_length = lambda review: len(review.id) * 1000 + 7  # pickled by value: a lambda of the job module
    jobs = {
        "pickled": counter.production,
        "string": dataclasses.replace(counter.production, key_type="string"),
        "long": AgentJob(agent=counter.CounterAgent, key_selector=by_length, deserializer=counter.parse_review,
                         key_type="long"),
    }
    out = {}
    for name, job in jobs.items():
        review = counter.Review(id="B014IBJKNO", review="fine", review_score=4.0)
        run(job, "production", review)
        run(job, f"replay-{name}", review)
        audit = [r.key for r in read_audit(audit_dir) if r.variant == f"replay-{name}"]
        out[name] = {"cassette": recorded[-1:], "audit": audit,
                     "capture": key_bytes(job.key_selector(review)).decode()}
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(not FLINK_PYTHON.exists(), reason="no Flink-side venv (flink-replay stack up writes it)")
def test_a_job_definition_s_key_selector_names_keys_by_text_in_audit_and_cassette(tmp_path: Path) -> None:
    """An AgentJob keyed by a function (the issue's case: the audit named ``-1297144253``): production's cassette
    entries, the replay's audit records and the capture topic's record keys all name the key by its text, for
    pickled (the default), string and long keys."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([str(FLINK_PYTHON), "-c", SCRIPT, str(tmp_path / "audit")], capture_output=True,
                          text=True, timeout=300, env=env, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for key_type in ("pickled", "string"):
        assert out[key_type] == {"cassette": ["B014IBJKNO"], "audit": ["B014IBJKNO"], "capture": "B014IBJKNO"}
    assert out["long"] == {"cassette": ["10007"], "audit": ["10007"], "capture": "10007"}

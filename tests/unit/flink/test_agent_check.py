"""The agent check's job-side program, in the parts that need no Flink Agents: errors as traceback text, the
input trial on captured records, a definition that fails at import, the arguments and the stdout carrier.
(Building real plans, reading the capture topic and the REST/CLI round trip: tests/integration/test_agent_check.py;
real plans' resource fingerprints: the last test, in the Flink-side venv without a cluster.)"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.agent_check import decode_facts
from airflow_flink_replay.flink import agent_check
from airflow_flink_replay.flink.agent_check import CapturedRecord, inspect_definition, python_error, try_inputs

IMPORT_FAILS = "tests.jobs.agent_check.import_fails:job"
ROOT = Path(__file__).resolve().parents[3]


def _raise_here() -> None:
    raise ValueError("the threshold must be positive")


def test_a_python_error_keeps_its_type_message_and_where_it_was_raised() -> None:
    try:
        _raise_here()
    except ValueError as exc:
        err = python_error(exc)
    assert (err.type, err.message) == ("ValueError", "the threshold must be positive")
    assert err.headline() == "ValueError: the threshold must be positive"
    assert f'File "{__file__}"' in err.traceback and ", in _raise_here" in err.traceback
    assert err.traceback.splitlines()[-1] == "ValueError: the threshold must be positive"


def test_a_long_traceback_keeps_its_innermost_frames() -> None:
    error: BaseException | None = None
    for level in range(40):  # a chain of 40 causes: far more lines than are kept
        try:
            raise RuntimeError(f"level {level}") from error
        except RuntimeError as exc:
            error = exc
    assert error is not None
    lines = python_error(error).traceback.splitlines()
    assert len(lines) == agent_check.TRACEBACK_LINES
    assert lines[0] == "Traceback (most recent call last):" and "lines left out" in lines[1]
    assert lines[-1] == "RuntimeError: level 39"


@dataclass
class _Job:
    deserializer: Any
    key_selector: Any


def _records(*values: bytes) -> list[CapturedRecord]:
    return [CapturedRecord("capture", 0, 40 + i, v) for i, v in enumerate(values)]


def test_the_input_trial_reports_the_agent_s_input_type_and_typed_key() -> None:
    job = _Job(deserializer=json.loads, key_selector=lambda r: r["id"])
    trial = try_inputs(job, _records(b'{"id": 1}', b'{"id": 2}'))
    assert (trial.records, trial.input_type, trial.key, trial.key_type, trial.error) == (2, "dict", "2", "int", None)


def test_the_input_trial_stops_at_the_first_record_it_cannot_read_and_names_it() -> None:
    job = _Job(deserializer=json.loads, key_selector=lambda r: r["customer"])
    trial = try_inputs(job, _records(b'{"customer": "a"}', b'{"id": 2}', b"not json"))
    assert trial.records == 1 and trial.failed_record == "capture/0@41"
    assert trial.error is not None and (trial.error.type, trial.error.message) == ("KeyError", "'customer'")


def test_an_unhashable_key_fails_the_trial() -> None:
    trial = try_inputs(_Job(deserializer=json.loads, key_selector=lambda r: r), _records(b'{"id": 1}'))
    assert trial.error is not None and trial.error.type == "TypeError" and "unhashable" in trial.error.message


def test_a_definition_whose_module_raises_at_import_is_reported_with_the_line_that_raised() -> None:
    facts = inspect_definition("candidate", IMPORT_FAILS, "job", [])
    assert facts.stage == "import" and facts.error is not None
    assert facts.error.headline() == "ImportError: cannot reach the feature store at import time"
    assert 'tests/jobs/agent_check/import_fails.py", line 7, in <module>' in facts.error.traceback
    assert "<frozen importlib" not in facts.error.traceback


def test_a_missing_module_is_reported_not_raised() -> None:
    facts = inspect_definition("production", "no_such_pkg.jobs:job", "factory", [])
    assert facts.stage == "import" and facts.error is not None and facts.error.type == "ModuleNotFoundError"


def test_arguments_carry_names_only_and_default_to_the_plan_carrier() -> None:
    args = agent_check.parse_args(["--production", "pkg.jobs:production", "--candidate", "pkg.jobs:candidate"])
    assert (args.production_form, args.candidate_form, args.emit, args.samples) == ("job", "job", "plan", 3)
    with pytest.raises(SystemExit):
        agent_check.parse_args(["--candidate", "pkg.jobs:candidate"])  # production is required


def test_the_cli_carrier_is_one_line_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    args = agent_check.parse_args(["--production", IMPORT_FAILS, "--emit", "stdout"])
    agent_check.emit(agent_check.collect(args), args.emit)
    out = capsys.readouterr().out
    facts = decode_facts(out)
    assert facts is not None and [d.role for d in facts.definitions] == ["production"]
    assert facts.definitions[0].error is not None and facts.sample is None  # no capture topic given: no records


def test_a_definition_that_exits_at_import_is_reported_not_ended_with(tmp_path: Any, monkeypatch: Any) -> None:
    (tmp_path / "afr_exits_at_import.py").write_text("import sys\nsys.exit('no settings file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    facts = inspect_definition("production", "afr_exits_at_import:job", "job", [])
    assert facts.stage == "import" and facts.error is not None
    assert (
        facts.error.headline() == "SystemExit: no settings file" and "afr_exits_at_import.py" in facts.error.traceback
    )


FLINK_PYTHON = Path(os.environ.get("FLINK_REPLAY_STACK_DIR") or ROOT / ".stack") / "flink-venv" / "bin" / "python"
PAIRS = {
    # the quickstart's candidate changed its prompt, nothing else (docs/your-agent.md)
    "quickstart": ("tests.jobs.quickstart_job.job:production", "tests.jobs.quickstart_job.job:candidate"),
    # the wheel's built-in ReActAgent: the candidate's prompt is a resource the framework names (tests/jobs/react_job)
    "react": ("tests.jobs.react_job.job:production", "tests.jobs.react_job.job:candidate"),
    **{name: ("tests.jobs.agent_check.definitions:healthy", f"tests.jobs.agent_check.definitions:{candidate}")
       for name, candidate in (("redeclared", "redeclared_subclass"), ("changed_tool", "changed_tool"),
                               ("commented_tool", "commented_tool"))},
}  # fmt: skip
FINGERPRINT_SCRIPT = """
import json, sys
from airflow_flink_replay.core.agent_check import CheckFacts, changed_resources
from airflow_flink_replay.flink.agent_check import inspect_definition

found = {}
for name, (production, candidate) in json.loads(sys.argv[1]).items():
    facts = CheckFacts(definitions=[inspect_definition("production", production, "job", []),
                                    inspect_definition("candidate", candidate, "job", [])])
    found[name] = {"changed": changed_resources(facts),
                   "errors": [d.error.headline() for d in facts.definitions if d.error],
                   "fingerprinted": all(r.fingerprint for d in facts.definitions for r in d.resources)}
print(json.dumps(found))
"""


@pytest.mark.skipif(not FLINK_PYTHON.exists(), reason="no Flink-side venv (flink-replay stack up writes it)")
def test_real_plans_are_fingerprinted_and_only_what_the_candidate_changed_differs() -> None:
    """Real Flink Agents plans built in the Flink-side venv (no cluster): every resource is fingerprinted, a
    re-declared or commented tool is unchanged, another tool body or prompt text is changed."""
    proc = subprocess.run([str(FLINK_PYTHON), "-c", FINGERPRINT_SCRIPT, json.dumps(PAIRS)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(f["errors"] == [] and f["fingerprinted"] for f in found.values()), found
    assert {name: f["changed"] for name, f in found.items()} == {
        "quickstart": {"review_analysis_prompt": "changed"},
        "react": {"_default_user_prompt": "changed"},
        "redeclared": {},
        "changed_tool": {"notify_support": "changed"},
        "commented_tool": {},
    }


RUNTIME_SCRIPT = """
import json
from airflow_flink_replay.flink.agent_check import CapturedRecord, inspect_definition

record = [CapturedRecord("capture", 0, 4, json.dumps({"id": "r1", "customer": "c1", "text": "late"}).encode())]
found = {}
for ref in ("tests.jobs.agent_check.gateway_import:job", "tests.jobs.agent_check.tool_ids:recorded_ids",
            "tests.jobs.agent_check.tool_ids:uuid_ids", "tests.jobs.agent_check.definitions:healthy"):
    facts = inspect_definition("candidate", ref, "job", record)
    found[ref.rsplit(".", 1)[1]] = facts.model_dump(mode="json", include={"stage", "error", "sample"})
print(json.dumps(found))
"""


@pytest.mark.skipif(not FLINK_PYTHON.exists(), reason="no Flink-side venv (flink-replay stack up writes it)")
def test_what_fails_only_in_flink_s_python_worker_or_when_the_agent_runs_is_found() -> None:
    """In the Flink-side venv (no cluster): a job definition module importing flink_agents.api.core_options
    stops at the worker stage with PyFlink's own error; a chat model whose tool-call ids are not UUIDs fails the
    sample run in Flink Agents' own validation; UUID ids pass; an agent with memory is not sampled."""
    proc = subprocess.run([str(FLINK_PYTHON), "-c", RUNTIME_SCRIPT], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    gateway = found["gateway_import:job"]
    assert gateway["stage"] == "worker" and gateway["sample"] is None
    assert "PythonGatewayServer during Python UDF execution" in gateway["error"]["message"]
    assert 'tests/jobs/agent_check/gateway_import.py", line 18, in <module>' in gateway["error"]["traceback"]
    recorded = found["tool_ids:recorded_ids"]
    assert recorded["stage"] == "done" and recorded["error"] is None
    sample = recorded["sample"]
    assert sample["rejected_by_flink_agents"] and "ToolResponseEvent" in sample["error"]["message"]
    assert "Input should be a valid UUID" in sample["error"]["message"]
    assert sample["calls"] == ["chat_model review_analysis_model.chat: allow (ok)",
                               "tool notify_shipping_manager.call: record (recorded)"]  # not executed
    uuid_sample = found["tool_ids:uuid_ids"]["sample"]
    assert uuid_sample["outputs"] == 1 and uuid_sample["error"] is None
    assert "review_memory" in found["definitions:healthy"]["sample"]["skipped"]


REACT_SCRIPT = """
import json
from airflow_flink_replay.flink.agent_check import CapturedRecord, inspect_definition

review = {"id": "B000TEST", "review": "The box arrived crushed and the shoes were wet. Love the colour.", "ts": 1}
facts = inspect_definition("production", "tests.jobs.react_job.job:production", "job",
                           [CapturedRecord("capture", 0, 4, json.dumps(review).encode())])
print(facts.model_dump_json())
"""


@pytest.mark.skipif(not FLINK_PYTHON.exists(), reason="no Flink-side venv (flink-replay stack up writes it)")
def test_the_built_in_react_agent_is_checked_like_a_declared_one() -> None:
    """The wheel's ``ReActAgent`` (an instance configured by arguments, its first action added to the instance, its
    prompts named by the framework, a pydantic output schema, the tool and the connection on the environment),
    checked in the Flink-side venv (no cluster): both actions and all five resources are seen and fingerprinted,
    the chat model setup and the tool are mediated, and the sample run on a shipping complaint gives one output
    with the tool call recorded, not executed."""
    proc = subprocess.run([str(FLINK_PYTHON), "-c", REACT_SCRIPT], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["stage"] == "done" and facts["error"] is None, facts["error"]
    assert facts["agent_class"] == "flink_agents.api.agents.react_agent.ReActAgent"
    assert {a["name"] for a in facts["actions"]} == {"start_action", "stop_action"}
    resources = {r["name"]: r for r in facts["resources"]}
    assert set(resources) == {"_default_chat_model", "_default_user_prompt", "_default_schema_prompt",
                              "ollama_server", "notify_shipping_manager"}  # fmt: skip
    assert all(r["fingerprint"] for r in resources.values()), resources
    assert resources["_default_chat_model"]["mediated"] and resources["notify_shipping_manager"]["mediated"]
    assert resources["notify_shipping_manager"]["level"] == "env"
    sample = facts["sample"]
    assert sample["error"] is None and sample["outputs"] == 1, sample
    assert sample["calls"] == ["chat_model _default_chat_model.chat: allow (ok)",
                               "tool notify_shipping_manager.call: record (recorded)"]  # fmt: skip

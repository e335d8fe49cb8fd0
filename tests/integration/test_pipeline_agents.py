"""A pipeline this project did not write — Flink Agents' quickstart multi-agent workflow — deployed, fed and gated.

``tests/jobs/pipeline_job/job.py`` is the workflow as an ``AgentPipeline``: the review analysis agent, a 4-hour
event-time window per product, the product suggestion agent; the chat model a deterministic stand-in. The
section "Pipelines" of docs/your-agent.md is run as it is written: its ``pipeline-deploy`` block deploys
production from the definition and feeds it the quickstart's first reviews; its ``pipeline-gate`` block runs
the release gate three times while reviews keep coming — production's own pipeline must PASS, two suggestions
instead of three must FAIL on the last stage's ``$.suggestions``, the analysis prompt's 1-10 scale must FAIL
naming the first agent's stage (``analysis:$.score``). Only the work folder and production's name are replaced.

The window restored from the savepoint, in detail: test_pipeline_window_state.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.dag_testing import running_jobs
from tests.integration import walkthrough

pytestmark = pytest.mark.timeout(1800)

DOC_FOLDER, DOC_NAME = ".stack/pipeline", "quickstart-pipeline"
WINDOW = 24


def doc_step(step: str, folder: Path, name: str) -> str:
    """The page's shell block ``step`` with its work folder and production name replaced."""
    return walkthrough.doc_step(step, folder, name, doc_folder=DOC_FOLDER, doc_name=DOC_NAME)


@pytest.fixture(scope="module")
def production(stack, tmp_path_factory) -> Any:
    """The page's ``pipeline-deploy`` block: the pipeline as production, fed the quickstart's first reviews."""
    yield from walkthrough.deployed(stack, tmp_path_factory.mktemp("pipeline"), step="pipeline-deploy",
                                    doc_folder=DOC_FOLDER, doc_name=DOC_NAME, prefix="pipeline")  # fmt: skip


def test_deploy_writes_the_pipelines_time_into_the_spec(stack, production) -> None:
    import yaml

    spec = yaml.safe_load(production["spec_path"].read_text())
    assert spec["production"]["agent_job"] == "tests.jobs.pipeline_job.job:production"
    assert spec["production"]["event_time"] == {"source": "field", "field": "$.ts", "unit": "s"}
    assert spec["quiesce_mode"] == "stop", "drain would fire the open windows before the savepoint"
    assert len(running_jobs(stack, production["job_name"])) == 1


def _failing(record: dict[str, Any]) -> set[str]:
    return {f for r in record["reasons"] if r["severity"] == "fail" for f in r["fields"]}


def test_the_gate_passes_production_and_fails_each_changed_stage(stack, production) -> None:
    from airflow_flink_replay.core.replay_spec import ReplaySpec

    started = time.monotonic()
    done = walkthrough.run_step(doc_step("pipeline-gate", production["folder"], production["job_name"]), timeout=1500)
    took = time.monotonic() - started
    out = done.stdout
    runs = Path(ReplaySpec.from_yaml(production["spec_path"]).runs_uri.removeprefix("file://"))
    records = sorted((json.loads(p.read_text()) for p in runs.rglob("run_record.json")), key=lambda r: r["run_id"])
    assert [r["verdict"] for r in records] == ["PASS", "FAIL", "FAIL"], (out[-8000:], took)
    aa, suggestion, analysis = records
    assert _failing(aa) == set(), aa["reasons"]
    # two suggestions instead of three: the last stage's suggestions, nothing of the analysis stage
    assert "$.suggestions" in {f.split("[", 1)[0] for f in _failing(suggestion)}, suggestion["reasons"]
    assert not any(f.startswith("analysis:") for f in _failing(suggestion)), suggestion["reasons"]
    # the 1-10 analysis: the first agent's stage is named
    assert "analysis:$.score" in _failing(analysis), analysis["reasons"]
    assert any("analysis:$.score" in r["message"] for r in analysis["reasons"]), analysis["reasons"]
    for run in records:
        assert all(v["output_records"] > 0 for v in run["variants"]), run["variants"]
    # every agent of the pipeline is mediated: its calls are audited, each with its stage
    for variant in aa["variants"]:
        audits = [json.loads(line) for line in Path(variant["audit"]).read_text().splitlines() if line.strip()]
        stages = {(a["stage"], a["resource_name"]) for a in audits if a["outcome"] == "ok"}
        assert stages >= {("analysis", "review_analysis_model"), ("suggestion", "generate_suggestion_model")}, stages
    assert len(running_jobs(stack, production["job_name"])) == 1, "production came back after each run, once"
    print(f"deploy {production['deploy_s']:.0f}s, three gate runs {took:.0f}s")


def test_a_candidate_that_drops_the_windows_state_is_refused_before_production_stops(stack, production) -> None:
    """``dropped_window`` gives the window another uid: production's open windows would not be restored. The
    agent check refuses it (before anything is stopped), naming the stage."""
    spec = production["folder"] / "spec.yaml"
    done = walkthrough.run_step(f".venv/bin/flink-replay run-dag gate --spec {spec} "
                    "--candidate tests.jobs.pipeline_job.job:dropped_window", timeout=600)
    assert done.returncode != 0, done.stdout[-4000:]
    assert "drops production's stateful stage 'per-product' (window, uid afr-window-per-product)" in done.stdout, (
        done.stdout[-4000:]
    )
    assert len(running_jobs(stack, production["job_name"])) == 1

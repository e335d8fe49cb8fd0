"""A Flink Agents job this project did not write, through the job-definition contract, gated on the stack.

The agent is the quickstart's ``ReviewAnalysisAgent`` shipped in the flink-agents 0.2.0 wheel, with its
``ProductReview`` input and its chat model connection ``"ollama_server"`` registered at environment level.
Nothing of the quickstart is copied or edited: ``tests/jobs/quickstart_job/`` holds the job definitions
(``production``, and ``candidate`` whose prompt asks for a 1-10 score) and a deterministic stand-in for the
Ollama server (not reachable here), registered under the quickstart's connection name.

The walkthrough docs/your-agent.md is run as it is written: its ``deploy`` block deploys production from the
definition and feeds it the quickstart's own reviews; its ``gate`` block runs the release gate twice with
``flink-replay run-dag`` while reviews keep coming — production as its own candidate must PASS, the changed
prompt must FAIL on ``$.score`` alone. Only the work folder and production's name are replaced (unique per
run). Cost: one production deploy and two gate runs over a 12-record window, 6-10 minutes (measured 382 s
and 598 s on a shared 2-core machine: deploy block 27-65 s, gate block 315-488 s, of which ~40 s per run are
`airflow db migrate` + `airflow dags test` starting).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.dag_testing import production_outputs, running_jobs
from tests.integration import walkthrough

pytestmark = pytest.mark.timeout(1500)

#: what the page's shell blocks call the work folder and production; the test replaces both
DOC_FOLDER, DOC_NAME = ".stack/quickstart", "quickstart-reviews"
WINDOW = 12
INITIAL = 10


def quickstart_reviews(stack: Any) -> list[str]:
    """The quickstart's own input: ``resources/product_review.txt`` of the installed flink-agents wheel
    (JSON lines ``{"id", "review", "ts"}``), read where the Flink side's Python finds it."""
    where = subprocess.run(
        [stack.flink_python, "-c", "import flink_agents.examples.quickstart as q; print(q.__path__[0])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    return (Path(where) / "resources" / "product_review.txt").read_text(encoding="utf-8").splitlines()


def test_the_stand_in_scores_follow_the_prompt_only(stack) -> None:
    """Both definitions build their plan with the environment-level stand-in connection, in Flink Agents'
    local runner on the Flink side's Python; same reviews, same agent code: only the prompt's scale differs,
    and with it every score (1-5 vs 1-10), while the reasons stay the same."""
    program = """
import json, sys
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from tests.jobs.quickstart_job.job import candidate, production
lines = [l.encode() for l in sys.stdin.read().splitlines()]
out = {}
for name, job in (("production", production), ("candidate", candidate)):
    env = AgentsExecutionEnvironment.get_execution_environment()
    for r in job.env_resources:
        env.add_resource(r.name, r.type, r.descriptor)
    records = [{"key": job.key_selector(job.deserializer(raw)), "value": job.deserializer(raw)} for raw in lines]
    results = env.from_list(records).apply(job.build_agent()).to_list()
    env.execute()
    out[name] = [job.output_serializer(next(iter(r.values()))) for r in results]
print(json.dumps(out))
"""
    lines = quickstart_reviews(stack)[:8]
    done = subprocess.run([stack.flink_python, "-c", program], input="\n".join(lines), capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    prod, cand = out["production"], out["candidate"]
    assert [o["id"] for o in prod] == [json.loads(line)["id"] for line in lines]
    assert [o["reasons"] for o in prod] == [o["reasons"] for o in cand]
    assert all(1 <= o["score"] <= 5 for o in prod) and all(1 <= o["score"] <= 10 for o in cand)
    assert all(a["score"] != b["score"] for a, b in zip(prod, cand, strict=True)), (prod, cand)



def doc_step(step: str, folder: Path, name: str) -> str:
    """The page's shell block ``step`` with its work folder and production name replaced."""
    return walkthrough.doc_step(step, folder, name, doc_folder=DOC_FOLDER, doc_name=DOC_NAME)


@pytest.fixture(scope="module")
def production(stack, tmp_path_factory) -> Any:
    """The page's ``deploy`` block: production from the job definition, fed the quickstart's first reviews."""
    yield from walkthrough.deployed(stack, tmp_path_factory.mktemp("walkthrough"), step="deploy",
                                    doc_folder=DOC_FOLDER, doc_name=DOC_NAME, prefix="quickstart")  # fmt: skip


def test_production_runs_the_quickstart_agent_from_its_definition(stack, production) -> None:
    """The agent gets the quickstart's ProductReview and answers its ProductReviewAnalysisRes, scored 1-5 by the
    stand-in behind the env-level connection; the spec names both definitions."""
    import yaml

    deadline, outputs = time.monotonic() + 180, []
    while time.monotonic() < deadline and len(outputs) < INITIAL:
        outputs = production_outputs(stack.kafka_bootstrap, production["topics"].outputs)
    # one output per review (a restart before a checkpoint may repeat some: the sink is at-least-once)
    first = [json.loads(line) for line in (production["folder"] / "first.jsonl").read_text().splitlines()]
    assert len(outputs) >= INITIAL == len(first), outputs
    assert {o["id"] for o in outputs} == {r["id"] for r in first}
    assert all(set(o) == {"id", "score", "reasons"} and 1 <= o["score"] <= 5 for o in outputs), outputs
    spec = yaml.safe_load(production["spec_path"].read_text())
    assert spec["production"]["agent_job"] == "tests.jobs.quickstart_job.job:production"
    assert spec["candidate_agent_job"] == "tests.jobs.quickstart_job.job:candidate"
    assert len(running_jobs(stack, production["job_name"])) == 1


def test_the_gate_passes_production_as_its_own_candidate_and_fails_the_changed_prompt(stack, production) -> None:
    from airflow_flink_replay.core.replay_spec import ReplaySpec

    started = time.monotonic()
    done = walkthrough.run_step(doc_step("gate", production["folder"], production["job_name"]), timeout=1200)
    took = time.monotonic() - started
    out = done.stdout
    runs = Path(ReplaySpec.from_yaml(production["spec_path"]).runs_uri.removeprefix("file://"))
    records = sorted((json.loads(p.read_text()) for p in runs.rglob("run_record.json")),
                     key=lambda r: r["run_id"])
    assert [r["verdict"] for r in records] == ["PASS", "FAIL"], (out[-6000:], took)
    aa, ab = records
    assert "=> PASS" in out and "=> FAIL" in out, out[-4000:]
    assert [v["output_records"] for v in aa["variants"]] == [WINDOW] * 3, aa["variants"]
    assert [v["output_records"] for v in ab["variants"]] == [WINDOW] * 3, ab["variants"]
    # the changed prompt fails on its scores and on nothing else
    failing = {f for r in ab["reasons"] if r["severity"] == "fail" for f in r["fields"]}
    assert failing == {"$.score"}, ab["reasons"]
    # the replays called the model (allowed) and never the tool: production's recorded answers were served
    # (deploy records its tool calls to a cassette topic), or it was recorded (audited, not executed)
    for variant in aa["variants"] + ab["variants"]:
        audits = [json.loads(line) for line in Path(variant["audit"]).read_text().splitlines() if line.strip()]
        outcomes = {(a["resource_name"], a["outcome"]) for a in audits}
        assert ("review_analysis_model", "ok") in outcomes, outcomes
        assert outcomes <= {("review_analysis_model", "ok"), ("notify_shipping_manager", "recorded"),
                            ("notify_shipping_manager", "replayed")}, outcomes
    # the window may hold no tool call at all; those it holds were served alike to both baselines, and in the
    # A/A run every one of them (nothing unmatched)
    for run in (aa, ab):
        served = [v["cassette_calls"] for v in run["variants"]]
        assert served[0] == served[1], served
    assert not any(v["cassette_calls"].get("unmatched") for v in aa["variants"]), aa["variants"]
    # production came back after both runs, once
    assert len(running_jobs(stack, production["job_name"])) == 1
    print(f"deploy {production['deploy_s']:.0f}s, two gate runs {took:.0f}s")

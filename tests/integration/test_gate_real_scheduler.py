"""The release gate as CI runs it: triggered over Airflow's REST API on a real scheduler, twice in a row.

``airflow standalone`` (api-server, scheduler with the LocalExecutor, DAG processor, triggerer; operators
deferrable) loads ``dags/flink_agents_release_gate.py`` for a production of this module's own — the review
agent v1 on the local stack's production Flink cluster. The gate is triggered with ``POST
/api/v2/dags/flink_agents_release_gate/dagRuns``: candidate v2 must FAIL (labels changed for the documented
late-delivery subset, notify_support called for new keys), then v1 must PASS. The three replay jobs, submitted
by one job-side run, run at the same time on the replay cluster, never production's. After each run
production is RUNNING (one job), no replay job is left, no replay topic or memory fork remains, and
production's state and Mem0 namespace are intact. The Airflow UI then shows the failed run and its verdict.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.airflow_server import AirflowStandalone
from tests.dag_testing import (
    assert_no_replay_leftovers,
    assert_production_state_intact,
    deploy_planned_production,
    plan_test_production,
    running_jobs,
    stop_production,
)

pytestmark = pytest.mark.timeout(2400)
GATE = "flink_agents_release_gate"


#: A secret planted in the spec by reference (the Mem0 LLM's api_key, read from a file on the Flink host):
#: after both gate runs it must be nowhere an operator of Airflow or Flink can read.
PLANTED_SECRET = f"afr-planted-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def planned(stack, tmp_path_factory) -> Any:
    """This module's production, planned (names, spec with the planted secret reference), not deployed."""
    import yaml

    work = tmp_path_factory.mktemp("sched")
    prod = plan_test_production(stack, work, "sched")
    key_file = work / "llm-api-key"
    key_file.write_text(PLANTED_SECRET)
    spec = yaml.safe_load(Path(prod["spec_path"]).read_text())
    spec["mem0_config"]["llm"] = {"provider": "openai", "config": {
        "api_key": f"${{file:{key_file}}}", "openai_base_url": "http://127.0.0.1:9/v1"}}  # never called
    Path(prod["spec_path"]).write_text(yaml.safe_dump(spec, sort_keys=False))
    prod["secret_reference"] = f"${{file:{key_file}}}"
    return prod


@pytest.fixture(scope="module")
def standalone(stack, planned, tmp_path_factory) -> Any:
    """``airflow standalone`` on the planned spec, launched (it starts while production is deployed)."""
    server = AirflowStandalone(tmp_path_factory.mktemp("airflow"), stack.connections_file, planned["spec_path"])
    try:
        server.launch()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def production(stack, planned, standalone) -> Any:
    prod = deploy_planned_production(stack, planned)
    yield prod
    stop_production(stack, prod)


@pytest.fixture(scope="module")
def airflow(standalone, production) -> Any:
    standalone.wait_healthy()
    standalone.wait_for_dag(GATE)
    return standalone


def _run_gate(stack, production, airflow: AirflowStandalone, candidate: str, feed_from: int) -> dict[str, Any]:
    """Trigger the gate over the REST API while reviews keep flowing into production; wait for its end."""
    from airflow_flink_replay.core.replay_spec import ReplaySpec
    from airflow_flink_replay.local.demo import ReviewFeeder

    with ReviewFeeder(stack.kafka_bootstrap, production["topics"].reviews, start_index=feed_from, rate=5):
        run_id = airflow.trigger(GATE, {"candidate": candidate})
        state = airflow.wait_for_run(GATE, run_id, timeout=1200)
    tis = airflow.task_instances(GATE, run_id)
    spec = ReplaySpec.from_yaml(production["spec_path"])
    runs = Path(spec.runs_uri.removeprefix("file://"))
    records = [p for p in runs.rglob("run_record.json") if json.loads(p.read_text())["run_id"] == run_id]
    assert records, (f"no run record for {run_id}", {t: ti["state"] for t, ti in tis.items()}, airflow.tail())
    # what both Flink clusters know of this run's jobs, read now (a later recycle of the replay cluster
    # forgets its finished jobs)
    flink_jobs = {
        cluster: [j for j in requests.get(f"{url}/jobs/overview", timeout=10).json()["jobs"] if run_id in j["name"]]
        for cluster, url in (("production", stack.flink_rest_url), ("replay", stack.replay_flink_rest_url))
    }
    return {"run_id": run_id, "state": state, "tis": tis, "states": {t: str(ti["state"]) for t, ti in tis.items()},
            "record": json.loads(records[0].read_text()), "flink_jobs": flink_jobs}


@pytest.fixture(scope="module")
def gate_runs(stack, production, airflow) -> dict[str, dict[str, Any]]:
    """v2, then v1, each triggered over the REST API on the real scheduler (built once for the module)."""
    from airflow_flink_replay.local.demo import V1, V2

    runs = {"v2": _run_gate(stack, production, airflow, V2, feed_from=10_000)}
    runs["v2"]["production_after"] = running_jobs(stack, production["job_name"])
    runs["v1"] = _run_gate(stack, production, airflow, V1, feed_from=30_000)
    runs["v1"]["production_after"] = running_jobs(stack, production["job_name"])
    return runs


def _assert_replays_ran_in_parallel_on_the_replay_cluster(stack, run: dict[str, Any]) -> None:
    assert run["states"]["submit_replays"] == "success", run["states"]
    assert stack.replay_flink_rest_url and stack.replay_flink_rest_url != stack.flink_rest_url
    on_replay_cluster = {j["jid"]: j for j in run["flink_jobs"]["replay"]}
    for variant in run["record"]["variants"]:
        job = on_replay_cluster.get(variant["job_id"])
        assert job and job["state"] == "FINISHED" and job["name"].endswith(variant["variant"]), (variant, job)
    # one submission task submitted all three (one job-side run) and the three jobs ran at the same time
    jobs = [on_replay_cluster[v["job_id"]] for v in run["record"]["variants"]]
    assert len(jobs) == 3 and max(j["start-time"] for j in jobs) < min(j["end-time"] for j in jobs), jobs
    # nothing of this run ever reached production's cluster, and no replay job was left running
    assert not run["flink_jobs"]["production"], run["flink_jobs"]["production"]
    assert all(j["state"] == "FINISHED" for j in on_replay_cluster.values()), on_replay_cluster


def test_gate_over_the_rest_api_fails_v2_then_passes_v1(stack, production, airflow, gate_runs) -> None:
    from airflow_flink_replay.hooks.mem0 import Mem0Hook
    from airflow_flink_replay.links.flink import FlinkJobLink

    # --- candidate v2: FAIL, for the documented reasons; the run fails, nothing is approved
    v2 = gate_runs["v2"]
    record = v2["record"]
    assert v2["state"] == "failed", v2["states"]
    assert record["verdict"] == "FAIL", record.get("reasons")
    assert v2["states"]["compare"] == "failed" and v2["states"]["approve"] == "upstream_failed", v2["states"]
    failing = {f for r in record["reasons"] if r["severity"] == "fail" for f in r["fields"]}
    assert "$.label" in failing, record["reasons"]
    # the new notify_support calls show in the comparison (the label change drives them) and the audits
    assert {"$.tools", "tool:notify_support.call"} & failing, record["reasons"]

    def support_calls(variant: dict[str, Any]) -> int:
        lines = Path(variant["audit"]).read_text().splitlines()
        return sum(json.loads(line)["resource_name"] == "notify_support" for line in lines if line.strip())

    baseline, _, candidate = record["variants"]
    assert support_calls(candidate) > support_calls(baseline), record["variants"]
    # the replay task's Flink link follows its job to the replay cluster web UI's "completed" page
    link = airflow.xcom(GATE, v2["run_id"], "replay_baseline", FlinkJobLink().xcom_key)
    assert link == f"{stack.replay_flink_rest_url}/#/job/completed/{baseline['job_id']}/overview", link
    _assert_replays_ran_in_parallel_on_the_replay_cluster(stack, v2)
    # production came back, once, and the downtime was measured
    assert v2["states"]["resume_production"] == "success"
    assert len(v2["production_after"]) == 1, v2["production_after"]
    assert 0 < record["downtime_s"] < 120
    # ... inside the one stop-window task: the same figure, and no scheduling step between stop and RUNNING
    window = record["savepoint"]["window"]
    assert window["resumed"]["downtime_seconds"] == record["downtime_s"] and window["error"] is None, window
    assert record["production_resumed"]["job_id"] == window["resumed"]["job_id"] == v2["production_after"][0]
    for task in ("cancel_leftover_replays", "delete_replay_topics", "drop_forks", "verify_production_memory"):
        assert v2["states"][task] == "success", (task, v2["states"])
    assert v2["states"]["run_record"] == "failed"  # written, then fails the run: compare failed
    # every variant replayed exactly the manifest's window
    assert [v["output_records"] for v in record["variants"]] == [30, 30, 30]
    assert record["manifest_digest"] and all(v["output_digest"] for v in record["variants"])
    # action-state evidence in the run record: the replays wrote to their own topics; production's topic
    # end offsets before and after the replay are recorded, and what happened there meanwhile is said
    cleanup = record["action_state"]["cleanup"]
    assert cleanup["production_topic"] == production["topics"].action_state
    assert cleanup["production_end_offsets_before"] and cleanup["production_end_offsets_after"]
    assert cleanup["note"].startswith("production's action-state topic advanced by"), cleanup["note"]
    held = cleanup["replay_topic_end_offsets"]
    assert set(held) == {v["action_state_topic"] for v in record["variants"]}
    assert all(sum(offsets.values()) > 0 for offsets in held.values()), held

    # --- candidate v1 (production's own agent), right after on the same scheduler: PASS, the gate approves
    v1 = gate_runs["v1"]
    assert v1["record"]["verdict"] == "PASS", v1["record"]["reasons"]
    assert v1["state"] == "success", v1["states"]
    assert v1["states"]["approve"] == "success" and v1["states"]["run_record"] == "success"
    assert len(v1["production_after"]) == 1, v1["production_after"]
    _assert_replays_ran_in_parallel_on_the_replay_cluster(stack, v1)

    # --- nothing of the replays is left behind
    for rec in (record, v1["record"]):
        assert_no_replay_leftovers(stack, rec)

    # --- production: running, state intact (per-customer counters continue, never reset), and its memory
    # holds one memory per review it processed: the replays wrote nothing into it.
    assert len(running_jobs(stack, production["job_name"])) == 1
    outputs = assert_production_state_intact(stack, production)
    rows = Mem0Hook(config=stack.mem0_config()).list_memories({"user_id": production["identifier"]})
    review_ids = [r.payload.get("review_id") or (r.payload.get("metadata") or {}).get("review_id") for r in rows]
    assert len(review_ids) == len(set(review_ids)) >= 24
    assert set(review_ids) == {o["id"] for o in outputs}


def test_ui_shows_the_failed_gate_run_its_verdict_and_its_report(airflow, gate_runs, tmp_path) -> None:
    """The Airflow UI of the same standalone renders the failed gate run's grid and its verdict, and the
    HTML report renders too — each in headless Chromium, driven over CDP (tests/browser.py): each page is
    polled in real time until it shows what is expected, then screenshotted."""
    from tests.browser import CHROMIUM, Browser, Dom

    assert CHROMIUM.exists(), "Debian's chromium is missing: `make system-deps` installs it"
    v2 = gate_runs["v2"]
    run_id, report = v2["run_id"], str(Path(v2["record"]["report_dir"]) / "report.html")
    base = airflow.base

    def verdict_row_fails(dom: Dom) -> bool:
        """The XCom table's ``verdict`` row holds FAIL (key and value in the same row)."""
        rows = re.findall(r"<tr\b.*?</tr>", dom.html, re.S)
        return any(">verdict</td>" in row and ">FAIL<" in row for row in rows)

    grid_texts = ("compare", "approve", "resume_production", "Failed", GATE)
    pages: dict[str, tuple[str, Any, str]] = {
        "grid": (
            f"{base}/dags/{GATE}/runs/{run_id}",
            lambda d: d.contains(*grid_texts) and all(t in d.text for t in grid_texts),
            f"the run's grid with {list(grid_texts)}",
        ),
        "verdict": (
            f"{base}/dags/{GATE}/runs/{run_id}/tasks/run_record/xcom",
            lambda d: verdict_row_fails(d) and "verdict" in d.text and "FAIL" in d.text,
            "run_record's XCom table with the row verdict = FAIL",
        ),
        "report": (
            Path(report).as_uri(),
            lambda d: d.contains("FAIL", "$.label") and "FAIL" in d.text and "$.label" in d.text,
            "the report with FAIL and $.label",
        ),
    }
    with Browser(tmp_path / "chromium", width=1600, height=1000) as browser:
        for name, (url, shows, what) in pages.items():
            started = time.monotonic()
            browser.goto(url)
            browser.wait_for(shows, timeout=90, what=f"{name}: {what}")
            png = browser.screenshot(tmp_path / f"{name}.png")
            assert png.stat().st_size > 20_000, (name, png.stat().st_size)
            print(f"{name}: shown and screenshotted in {time.monotonic() - started:.1f}s")


def test_a_secret_given_by_reference_is_nowhere_after_the_gate_runs(stack, production, airflow, gate_runs) -> None:
    """The replays resolved the planted reference inside Flink (their memory was built with it: the runs
    got verdicts); XCom, the run folders, the task logs, Flink's logs and job configs hold only the reference."""
    assert {gate_runs["v2"]["record"]["verdict"], gate_runs["v1"]["record"]["verdict"]} == {"FAIL", "PASS"}
    found: dict[str, list[str]] = {"secret": [], "reference": []}

    def look(where: str, text: str) -> None:
        if PLANTED_SECRET in text:
            found["secret"].append(where)
        if production["secret_reference"] in text:
            found["reference"].append(where)

    for run in gate_runs.values():
        for task_id in run["tis"]:
            entries = airflow.api("GET", f"/dags/{GATE}/dagRuns/{run['run_id']}/taskInstances/{task_id}/xcomEntries")
            for entry in entries["xcom_entries"]:
                value = airflow.xcom(GATE, run["run_id"], task_id, entry["key"])
                look(f"xcom {task_id}/{entry['key']}", json.dumps(value))
        run_dir = Path(run["record"]["manifest"].removeprefix("file://")).parent
        for path in run_dir.rglob("*"):
            if path.is_file():
                look(str(path), path.read_text(errors="replace"))
        for variant in run["record"]["variants"]:
            for route in ("config", "plan", ""):
                url = f"{stack.replay_flink_rest_url}/jobs/{variant['job_id']}/{route}".rstrip("/")
                look(url, requests.get(url, timeout=10).text)
    workdir = Path(stack.workdir)
    for folder in (airflow.home / "logs", workdir / "logs", workdir / "replay-cluster" / "logs"):
        for path in folder.rglob("*"):
            if path.is_file():
                look(str(path), path.read_text(errors="replace"))
    look("standalone output", airflow.tail(10**9))
    assert not found["secret"], found["secret"]
    assert any(w.startswith("xcom") for w in found["reference"]), found["reference"]  # we looked where it travels

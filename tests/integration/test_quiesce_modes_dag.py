"""The replay DAG in the quiesce modes not covered by the release-gate tests (drain), on the real stack.

- ``savepoint``: production keeps running (same Flink job before and after, no resubmission); the manifest
  says how many capture records raced the savepoint and the report carries that note; baseline-2 and the
  candidate (production's own agent) agree with the baseline.
- ``existing``: the savepoint and window of that run are replayed again with candidate v2 — the capture,
  quiesce and resume tasks are skipped, the verdict is FAIL for the documented label change, and production
  is not touched.
- a bad ``existing_manifest`` fails the run before anything is forked or submitted, naming the problem.
- ``stop`` in the nightly DAG (no candidate in the spec: production's agent, an A/A run): production is
  stopped without drain and resubmitted from that savepoint, its keyed state intact; the verdict is PASS.

One production serves the module. The savepoint-mode run is a module fixture: the tests that replay its
savepoint build it themselves when selected alone (``-k``), and it runs once when the module runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.dag_testing import (
    assert_no_replay_leftovers,
    assert_production_state_intact,
    deploy_test_production,
    run_replay_dag,
    running_jobs,
    stop_production,
)

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def production(stack, airflow_db, tmp_path_factory) -> Any:
    prod = deploy_test_production(stack, tmp_path_factory.mktemp("modes"), "modes")
    yield prod
    stop_production(stack, prod)


@pytest.fixture(scope="module")
def savepoint_run(stack, production) -> dict[str, Any]:
    """The UI-triggered DAG in ``savepoint`` mode with production's own agent as the candidate; the
    existing-mode tests replay its savepoint and window again."""
    from airflow_flink_replay.local.demo import V1

    before = running_jobs(stack, production["job_name"])
    # no review reaches production until its savepoint is taken: the savepoint holds no agent run in flight
    # (Flink Agents 0.2.0 can crash the replay TaskManager natively restoring one: docs/limitations.md)
    dagrun, run = run_replay_dag(stack, production, {"quiesce_mode": "savepoint", "candidate": V1}, kind="manual",
                                 feed_from=50_000, feed_after_savepoint=True)
    return {"state": str(dagrun.state), "before": before, "after": running_jobs(stack, production["job_name"]),
            **run}


def _manifest(record: dict[str, Any]) -> dict[str, Any]:
    return json.loads(Path(record["manifest"].removeprefix("file://")).read_text())


def _report_codes(record: dict[str, Any]) -> set[str]:
    """Every reason code of the report, the info notes included (the XCom summary keeps only decisive ones)."""
    summary = json.loads((Path(record["report_dir"]) / "summary.json").read_text())
    assert all(r["code"] in (Path(record["report_dir"]) / "report.html").read_text() for r in summary["reasons"])
    return {r["code"] for r in summary["reasons"]}


def test_savepoint_mode_replays_without_stopping_production(production, savepoint_run) -> None:
    from airflow_flink_replay.core.manifest_io import local_path

    states, record = savepoint_run["states"], savepoint_run["record"]
    assert savepoint_run["state"] == "success", states
    assert states["reuse_manifest"] == "skipped" and states["quiesce"] == "success"
    # production was never stopped: the same job runs, nothing was resubmitted
    assert savepoint_run["after"] == savepoint_run["before"] == [production["job_id"]]
    assert record["production_resumed"]["reattached"] is True
    assert record["savepoint"]["production_stopped"] is False
    manifest = _manifest(record)
    savepoint = manifest["production"]["savepoint"]
    assert savepoint["quiesce_mode"] == "savepoint" and isinstance(savepoint["racing_records"], int)
    assert Path(local_path(savepoint["path"]) or "", "_metadata").exists()
    assert manifest["production"]["plan_vertices"], "the plan is recorded for a later existing-mode run"
    assert "SAVEPOINT_WHILE_RUNNING" in _report_codes(record)
    # the fidelity figure is reported; its floor is not enforced here (records raced the savepoint)
    assert record["fidelity"] is not None and "FIDELITY" in _report_codes(record)
    assert record["verdict"] == "PASS", record["reasons"]
    counts = [v["output_records"] for v in record["variants"]]
    assert len(set(counts)) == 1 and counts[0] >= 30, counts  # + in-flight runs the savepoint held, if any


def test_existing_mode_replays_the_earlier_savepoint_again(stack, production, savepoint_run) -> None:
    from airflow_flink_replay.local.demo import V2

    earlier = savepoint_run["record"]
    before = running_jobs(stack, production["job_name"])
    dagrun, run = run_replay_dag(
        stack, production, {"quiesce_mode": "existing", "existing_manifest": earlier["manifest"], "candidate": V2},
        kind="manual", feed_from=60_000,
    )
    states, record = run["states"], run["record"]
    assert str(dagrun.state) == "success", states  # the manual DAG reports FAIL without failing the run
    for task in ("offsets_before_quiesce", "quiesce", "start_offsets", "resume_production", "capture_window",
                 "manifest"):
        assert states[task] == "skipped", (task, states)
    assert states["reuse_manifest"] == "success" and states["isolate_action_state"] == "success"
    assert running_jobs(stack, production["job_name"]) == before  # production untouched
    manifest, old = _manifest(record), _manifest(earlier)
    assert manifest["capture"] == old["capture"]
    assert manifest["production"]["savepoint"]["path"] == old["production"]["savepoint"]["path"]
    assert manifest["production"]["savepoint"]["quiesce_mode"] == "existing"
    assert manifest["reused_from"] == f"{old['run_id']} {old['digest']}"
    assert record["verdict"] == "FAIL", record["reasons"]
    failing = {f for r in record["reasons"] if r["severity"] == "fail" for f in r["fields"]}
    assert "$.label" in failing, record["reasons"]
    assert "REUSED_SAVEPOINT" in _report_codes(record)
    # the same window, replayed from the same savepoint: the baseline reproduces the earlier baseline
    assert record["variants"][0]["output_records"] == earlier["variants"][0]["output_records"]
    for task in ("delete_replay_topics", "drop_forks"):
        assert states[task] == "success", (task, states)


def test_existing_mode_with_a_tampered_manifest_fails_before_anything_is_created(
    stack, production, savepoint_run, tmp_path, capfd
) -> None:
    from airflow_flink_replay.hooks.mem0 import Mem0Hook

    edited = _manifest(savepoint_run["record"])
    edited["capture"]["partitions"][0]["end_offset"] += 5  # someone widened the window by hand
    path = _in_runs(production, tmp_path.name) / "manifest.json"  # earlier manifests load from the runs location
    path.write_text(json.dumps(edited))
    before = running_jobs(stack, production["job_name"])
    dagrun, run = run_replay_dag(
        stack, production, {"quiesce_mode": "existing", "existing_manifest": f"file://{path}"}, kind="manual",
        feed_from=70_000,
    )
    states = run["states"]
    assert str(dagrun.state) == "failed"
    assert states["reuse_manifest"] == "failed"
    log = "".join(capfd.readouterr())
    assert "edited by hand" in log and str(path) in log, log[-3000:]  # names the file and the problem
    assert {states[f"fork_memory_{v}"] for v in ("baseline", "baseline_2", "candidate")} == {"upstream_failed"}
    assert states["replay_baseline"] == "upstream_failed" and states["resume_production"] == "skipped"
    assert states["run_record"] == "failed"
    assert running_jobs(stack, production["job_name"]) == before
    spec, tag = run["spec"], dagrun.get_task_instances()[0].xcom_pull(task_ids="resolve", key="run_tag")
    hook = Mem0Hook(config=stack.mem0_config())
    for variant in ("baseline", "baseline_2", "candidate"):
        assert hook.count({"user_id": spec.fork_namespace(tag, variant)}) == 0


def test_identity_preflight_refuses_a_replay_that_would_drop_production_state(stack, production, savepoint_run,
                                                                               tmp_path, capfd) -> None:
    """Production's recorded plan has a stateful operator the replay job does not have: every replay is
    refused by the identity preflight (on the job graphs the submission program built for the replay variants)
    before any is submitted, the refusal names the vertex and the fix, and the cleanup still runs."""
    import requests

    from airflow_flink_replay.core.manifest import PlanVertexInfo, ReplayManifest
    from airflow_flink_replay.core.manifest_io import save_manifest

    earlier = ReplayManifest.parse(_manifest(savepoint_run["record"]))
    prod = earlier.production
    dedupe = PlanVertexInfo(id="0123456789abcdef0123456789abcdef", name="KeyedProcess -> dedupe-reviews",
                            parallelism=1, max_parallelism=prod.agent.max_parallelism)
    changed = prod.model_copy(update={"plan_vertices": [*prod.plan_vertices, dedupe],
                                      "plan_vertex_ids": [*prod.plan_vertex_ids, dedupe.id]})
    path = _in_runs(production, tmp_path.name) / "manifest-with-state.json"
    save_manifest(earlier.model_copy(update={"production": changed, "digest": None}).sealed(), f"file://{path}")

    dagrun, run = run_replay_dag(
        stack, production, {"quiesce_mode": "existing", "existing_manifest": f"file://{path}"}, kind="manual",
        feed_from=80_000,
    )
    states = run["states"]
    assert str(dagrun.state) == "failed"
    assert states["reuse_manifest"] == "success"
    # the refusal is the submission program's (every variant checked before any is submitted, in one job-side
    # run): nothing is submitted, nothing to wait for
    assert states["submit_replays"] == "failed", states
    assert {states[f"replay_{v}"] for v in ("baseline", "baseline_2", "candidate")} == {"upstream_failed"}, states
    log = "".join(capfd.readouterr())
    assert "STATE_DROPPED" in log and "dedupe-reviews" in log and "allowed_dropped" in log, log[-4000:]
    assert "identity preflight refused: nothing was submitted (refused: baseline, baseline_2, candidate)" in log
    for url in {stack.flink_rest_url, stack.replay_flink_rest_url or stack.flink_rest_url}:
        jobs = requests.get(f"{url}/jobs/overview", timeout=10).json()["jobs"]
        assert not [j["name"] for j in jobs if dagrun.run_id in j["name"]]  # refused before any submission
    for task in ("delete_replay_topics", "drop_forks"):
        assert states[task] == "success", (task, states)


def test_nightly_dag_in_stop_mode_resumes_production_with_its_state(stack, production) -> None:
    """The nightly DAG end to end, its spec in ``stop`` mode and without a candidate (the nightly replays
    production's own agent as the candidate: an A/A run). Production is stopped without drain, resubmitted from
    this run's savepoint (one RUNNING job, a new one), and its per-customer counters continue; the verdict is
    PASS, the run succeeds, and no replay topic, memory fork or replay job is left."""
    from airflow_flink_replay.core.replay_spec import ReplaySpec

    spec = ReplaySpec.from_yaml(production["spec_path"])
    no_candidate = {"candidate_agent_job": None, "candidate_agent_factory": None}
    spec = ReplaySpec.model_validate({**spec.model_dump(), **no_candidate, "quiesce_mode": "stop"})
    before = running_jobs(stack, production["job_name"])
    # Reviews flow only once production runs again: nothing is in flight at the stop. (A stop-mode savepoint
    # holding an agent run that waits on a tool response cannot be restored by Flink Agents 0.2.0 — KeyError
    # initial_request_id; the run's assert_production step catches that — docs/limitations.md.)
    dagrun, run = run_replay_dag(stack, production, {}, kind="nightly", feed_from=90_000, spec=spec,
                                 feed_after_resume=True)
    states, record = run["states"], run["record"]
    assert str(dagrun.state) == "success", states
    assert states["quiesce"] == "success" and states["reuse_manifest"] == "skipped"
    assert states["assert_production"] == "success" and states["run_record"] == "success", states
    # the quiesce stopped production without drain
    quiesce = record["savepoint"]
    assert quiesce["mode"] == "stop" and quiesce["production_stopped"] is True, quiesce
    assert quiesce["note"].startswith("Stopped without drain"), quiesce["note"]
    assert _manifest(record)["production"]["savepoint"]["quiesce_mode"] == "stop"
    # A/A: the candidate is production's agent, and the three replays agree
    assert {v["agent_factory"] for v in record["variants"]} == {spec.production.agent_ref}, record["variants"]
    assert record["verdict"] == "PASS", record["reasons"]
    # production resumed: resubmitted from this run's savepoint, exactly one RUNNING job, a new one
    resumed = record["production_resumed"]
    assert resumed["reattached"] is False and resumed["savepoint_path"] == quiesce["savepoint_path"], resumed
    after = running_jobs(stack, production["job_name"])
    assert after == [resumed["job_id"]] and after != before, (before, after)
    production["job_id"] = resumed["job_id"]
    # its keyed state came back: the resumed job processed the window (the records after the savepoint, which
    # the replays read) and the per-customer counters run on past the stop (a reset would count from 1 again)
    outputs = {o["id"] for o in assert_production_state_intact(stack, production)}
    window = {json.loads(line)["id"] for line in Path(record["variants"][0]["output"]).read_text().splitlines()
              if line.strip()}
    assert window and window <= outputs, sorted(window - outputs)[:5]
    assert_no_replay_leftovers(stack, record)


def _in_runs(production: dict[str, Any], name: str) -> Path:
    """A folder under the spec's runs location: the only place an earlier manifest is loaded from
    (``manifest_sources`` defaults to ``runs_uri``)."""
    from airflow_flink_replay.core.replay_spec import ReplaySpec

    folder = Path(ReplaySpec.from_yaml(production["spec_path"]).runs_uri.removeprefix("file://")) / "by-hand" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder

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
import uuid
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
    xcoms_of,
)

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def production(stack, airflow_db, tmp_path_factory) -> Any:
    prod = deploy_test_production(stack, tmp_path_factory.mktemp("modes"), "modes")
    yield prod
    stop_production(stack, prod)


@pytest.fixture(scope="module")
def memory_spec(production) -> Any:
    """Production's spec with ``runs_uri`` in this process's memory (``memory://``, fsspec's): a run folder no
    Flink process can see. Under ``dag.test`` every task runs in this process, so the run works only if the
    replay jobs need nothing from it (the manifest travels in the submission, the results over Kafka)."""
    from airflow_flink_replay.core.replay_spec import ReplaySpec

    spec = ReplaySpec.from_yaml(production["spec_path"])
    return spec.model_copy(update={"runs_uri": f"memory://afr-modes-{uuid.uuid4().hex[:8]}/runs"})


@pytest.fixture(scope="module")
def savepoint_run(stack, production, memory_spec) -> dict[str, Any]:
    """The UI-triggered DAG in ``savepoint`` mode with production's own agent as the candidate, its run folder in
    memory; the existing-mode tests replay its savepoint and window again."""
    from airflow_flink_replay.local.demo import V1

    before = running_jobs(stack, production["job_name"])
    # no review reaches production until its savepoint is taken: the savepoint holds no agent run in flight
    # (Flink Agents 0.2.0 can crash the replay TaskManager natively restoring one: docs/limitations.md)
    dagrun, run = run_replay_dag(stack, production, {"quiesce_mode": "savepoint", "candidate": V1}, kind="manual",
                                 feed_from=50_000, feed_after_savepoint=True, spec=memory_spec)
    return {"state": str(dagrun.state), "before": before, "after": running_jobs(stack, production["job_name"]),
            **run}


def _read(uri: str) -> str:
    """A run file's text: a local path, ``file://`` or ``memory://`` (this process's)."""
    import fsspec

    with fsspec.open(uri, "r", encoding="utf-8") as fh:
        return str(fh.read())


def _manifest(record: dict[str, Any]) -> dict[str, Any]:
    return json.loads(_read(record["manifest"]))


def _report_codes(record: dict[str, Any]) -> set[str]:
    """Every reason code of the report, the info notes included (the XCom summary keeps only decisive ones)."""
    summary = json.loads(_read(f"{record['report_dir']}/summary.json"))
    report = _read(f"{record['report_dir']}/report.html")
    assert all(r["code"] in report for r in summary["reasons"])
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
    # the run folder is in this process's memory: nothing of it was on disk for Flink to read or write
    assert record["manifest"].startswith("memory://") and record["report_dir"].startswith("memory://")
    assert all(v["output"].startswith("memory://") and v["results"]["outputs"]["kept"] == v["output_records"]
               for v in record["variants"]), record["variants"]


def test_existing_mode_replays_the_earlier_savepoint_again(stack, production, savepoint_run, memory_spec) -> None:
    from airflow_flink_replay.local.demo import V2

    earlier = savepoint_run["record"]
    before = running_jobs(stack, production["job_name"])
    dagrun, run = run_replay_dag(
        stack, production, {"quiesce_mode": "existing", "existing_manifest": earlier["manifest"], "candidate": V2},
        kind="manual", feed_from=60_000, spec=memory_spec,
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


#: Secrets planted in the nightly run's connections and spec: each must appear nowhere it could leak to.
PLANTED = {
    "kafka password": "afr-planted-kafka-" + uuid.uuid4().hex[:10],
    "flink token": "afr-planted-flink-" + uuid.uuid4().hex[:10],
    "memory store api key": "afr-planted-mem0-" + uuid.uuid4().hex[:10],
    # the shapes of issue 42, planted by reference in the memory config: a header value's token, a URL's
    # password, and a value that is a number (digits only, as a YAML number would be written)
    "header token": "afr-planted-header-" + uuid.uuid4().hex[:10],
    "url password": "afr-planted-url-" + uuid.uuid4().hex[:10],
    "numeric value": str(uuid.uuid4().int)[:18],
}
#: The files the spec's references name, and what each holds (mem0's OpenAI LLM config takes these keys; they
#: are used only with OpenRouter, so the replays build the LLM client and never send them).
PLANTED_FILES = {
    "api_key": ("mem0-api-key", PLANTED["memory store api key"]),
    "app_name": ("mem0-header", f"Bearer {PLANTED['header token']}"),
    "site_url": ("mem0-site-url", f"https://afr-user:{PLANTED['url password']}@openrouter.invalid/site"),
    "route": ("mem0-route", PLANTED["numeric value"]),
}


def _planted_connections(stack: Any, folder: Path) -> str:
    """The stack's connections with the Kafka password (the Kafka provider's ``sasl.password``; the broker runs
    PLAINTEXT, so it is carried, not checked) and a bearer token for both Flink clusters (Flink's REST API without
    authentication ignores it) planted."""
    conns = json.loads(Path(stack.connections_file).read_text())
    for conn in conns.values():
        extra = json.loads(conn.get("extra") or "{}")
        if conn["conn_type"] == "kafka":
            extra["sasl.password"] = PLANTED["kafka password"]
        if conn["conn_type"] == "flink_rest":
            extra["bearer_token"] = PLANTED["flink token"]
        conn["extra"] = json.dumps(extra)
    path = folder / "planted-connections.json"
    path.write_text(json.dumps(conns))
    return str(path)


def _planted_spec(production: dict[str, Any], folder: Path) -> Any:
    """The nightly spec in ``stop`` mode without a candidate, its agents' memory config carrying an API key, an
    ``Authorization``-style header value, a URL with a password and a number by reference (``${file:…}``: resolved
    only in the TaskManagers, where mem0 is built)."""
    from airflow_flink_replay.core.replay_spec import ReplaySpec

    llm: dict[str, Any] = {"openai_base_url": "http://127.0.0.1:9/v1"}
    for key, (name, value) in PLANTED_FILES.items():
        (folder / name).write_text(value)
        llm[key] = f"${{file:{folder / name}}}"
    spec = ReplaySpec.from_yaml(production["spec_path"])
    mem0 = dict(spec.mem0_config or {})
    mem0["llm"] = {"provider": "openai", "config": llm}
    no_candidate = {"candidate_agent_job": None, "candidate_agent_factory": None}
    return ReplaySpec.model_validate({**spec.model_dump(), **no_candidate, "quiesce_mode": "stop",
                                      "mem0_config": mem0})


@pytest.fixture(scope="module")
def nightly_run(stack, production, tmp_path_factory, request) -> dict[str, Any]:
    """The nightly DAG in ``stop`` mode without a candidate (an A/A run), with secrets planted; ``printed`` is
    what the run wrote to stdout and stderr (the task logs under ``dag.test``), taken from pytest's capture and
    written back to it."""
    import sys

    capture = request.config.pluginmanager.getplugin("capturemanager")
    if request.config.getoption("capture") == "no":  # -s: what the run prints goes straight to the terminal
        capture = None
    if capture is not None:
        earlier = capture.read_global_capture()
        sys.stdout.write(earlier.out)
        sys.stderr.write(earlier.err)
    import time

    folder = tmp_path_factory.mktemp("planted")
    spec = _planted_spec(production, folder)
    started = time.time()
    before = running_jobs(stack, production["job_name"])
    # Reviews flow only once production runs again: nothing is in flight at the stop. (A stop-mode savepoint
    # holding an agent run that waits on a tool response cannot be restored by Flink Agents 0.2.0 — KeyError
    # initial_request_id; the run's assert_production step catches that — docs/limitations.md.)
    dagrun, run = run_replay_dag(stack, production, {}, kind="nightly", feed_from=90_000, spec=spec,
                                 feed_after_resume=True, conn_file=_planted_connections(stack, folder))
    printed = None
    if capture is not None:
        got = capture.read_global_capture()
        printed = got.out + got.err
        sys.stdout.write(got.out)
        sys.stderr.write(got.err)
    return {"dagrun": dagrun, "before": before, "spec": spec, "printed": printed, "started": started, **run}


def test_nightly_dag_in_stop_mode_resumes_production_with_its_state(stack, production, nightly_run) -> None:
    """The nightly DAG end to end, its spec in ``stop`` mode and without a candidate (the nightly replays
    production's own agent as the candidate: an A/A run). Production is stopped without drain, resubmitted from
    this run's savepoint (one RUNNING job, a new one), and its per-customer counters continue; the verdict is
    PASS, the run succeeds, and no replay topic, memory fork or replay job is left."""
    dagrun, spec, before = nightly_run["dagrun"], nightly_run["spec"], nightly_run["before"]
    states, record = nightly_run["states"], nightly_run["record"]
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


def _leak_places(stack: Any, nightly_run: dict[str, Any], captured: str) -> dict[str, str]:
    """Everything a secret of the nightly run could have leaked to, as text by place: the run's XComs, every file
    of its run folder (manifest, collected outputs and audits, reports, run record), every Flink job's details
    and configuration on both clusters (program arguments included) and the clusters' logs (JobManager,
    TaskManager, the PythonDriver's), what every process of the stack wrote since the run started (each file of
    a ``logs`` folder: the Flink processes' ``.out`` files are their stdout and stderr, the start logs, Kafka's
    and Chroma's), and what the run printed (the task logs under ``dag.test``, with the stdout and stderr of the
    processes the tasks started, which inherit the captured descriptors; not with ``-s``, which sends them to
    the terminal)."""
    import requests

    dagrun, record = nightly_run["dagrun"], nightly_run["record"]
    places: dict[str, str] = {"printed by the run": captured} if captured else {}
    xcoms = xcoms_of(dagrun)
    assert xcoms, "no XCom of the run found"
    places.update({f"xcom {task}.{key}": json.dumps(value, default=str) for (task, key), value in xcoms.items()})
    run_dir = Path(record["manifest"].removeprefix("file://")).parent
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {"manifest.json", "run_record.json", "report.html"} <= {p.name for p in files}, files
    places.update({f"run folder {p.relative_to(run_dir)}": p.read_text(errors="replace") for p in files})
    for url in {stack.flink_rest_url, stack.replay_flink_rest_url or stack.flink_rest_url}:
        for job in requests.get(f"{url}/jobs/overview", timeout=10).json()["jobs"]:
            for part in ("", "/config"):
                places[f"flink {url} job {job['name']}{part}"] = requests.get(f"{url}/jobs/{job['jid']}{part}",
                                                                             timeout=10).text
    logs = [p for p in Path(stack.workdir).rglob("*") if p.is_file() and p.parent.name in ("logs", "console-logs")
            and (p.name.startswith("flink-") or p.stat().st_mtime >= nightly_run["started"])]
    assert any("standalonesession" in p.name for p in logs), logs
    places.update({f"log {p.relative_to(stack.workdir)}": p.read_text(errors="replace") for p in logs})
    return places


def test_no_planted_secret_leaks_anywhere_after_a_full_run(stack, nightly_run) -> None:
    """The Kafka password and the Flink token of the connections, and the memory config's API key, header
    token, URL password and numeric value of the spec (references the TaskManagers resolve), appear in no XCom,
    file of the run, Flink job detail or configuration, process log or output, or task log after the full
    nightly run."""
    assert str(nightly_run["dagrun"].state) == "success", nightly_run["states"]
    printed = nightly_run["printed"]
    assert printed is None or len(printed) > 1000, "the run's task logs were not captured"
    places = _leak_places(stack, nightly_run, printed or "")
    leaks = {name: place for name, secret in PLANTED.items() for place, text in places.items() if secret in text}
    print(f"\nsearched {len(places)} places ({sum(len(t) for t in places.values()) / 1e6:.1f} MB) for "
          f"{len(PLANTED)} planted secrets")
    assert not leaks, leaks
    # the run did use them: the replays built their memory with the key's reference, the token went to Flink
    for name, _value in PLANTED_FILES.values():
        assert any("${file:" in text and name in text for place, text in places.items()
                   if place.startswith("xcom resolve.job_spec_baseline")), name


def _in_runs(production: dict[str, Any], name: str) -> Path:
    """A folder under the spec's runs location: the only place an earlier manifest is loaded from
    (``manifest_sources`` defaults to ``runs_uri``)."""
    from airflow_flink_replay.core.replay_spec import ReplaySpec

    folder = Path(ReplaySpec.from_yaml(production["spec_path"]).runs_uri.removeprefix("file://")) / "by-hand" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder

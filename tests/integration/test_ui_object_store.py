"""A gate run on a real scheduler with ``runs_uri`` on an object store, and the UI plugin serving it (issue 43).

``airflow standalone`` (LocalExecutor, triggerer, logins on) runs the repository's release gate on a production of
this module's own whose spec puts its runs on ``s3://afr_s3@replay-runs/runs``: a stand-in for Amazon S3 that runs
here (moto's server mode, tests/s3_stand_in.py), reached through an ``aws`` connection given by environment
variable, as a deployment gives its connections. Checked:

- the run ends as ``dag.test`` ends it for the same candidate (v1 of the demo's agent: PASS);
- its run record, manifest, reports and production's lease are objects in the bucket, and nothing of the run is
  on the local disk where a ``file://`` spec would have put it;
- the API server's plugin serves the run's report, summary, JUnit XML and run record, byte for byte the bucket's
  objects, with their content types, to a logged-in user; the task's "Replay Report" extra link points there;
  the Replays page lists the run with its verdict.

Cost (2 cores): Airflow's start (~40 s, production deployed meanwhile) and one gate run (~100 s).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
import yaml

from tests.dag_testing import deploy_planned_production, plan_test_production, running_jobs, stop_production
from tests.s3_stand_in import s3_stand_in

pytestmark = pytest.mark.timeout(900)
GATE = "flink_agents_release_gate"
READER = "reviewer"


@pytest.fixture(scope="module")
def gate_on_s3(stack, tmp_path_factory) -> Any:
    """The S3 stand-in, Airflow standalone on a production whose runs go there, one gate run of candidate v1
    (reviews flowing meanwhile); everything removed afterwards."""
    from airflow_flink_replay.local.airflow_runner import airflow_env
    from airflow_flink_replay.local.airflow_server import USERS_OPTION, AirflowServer, free_port
    from airflow_flink_replay.local.demo import V1, ReviewFeeder
    from airflow_flink_replay.operators.flink import run_path_segment

    work = tmp_path_factory.mktemp("s3")
    with s3_stand_in(work / "moto.log") as s3:
        production = plan_test_production(stack, work, "s3", window_records=8)
        spec = yaml.safe_load(Path(production["spec_path"]).read_text())
        runs_uri = s3.uri("runs")
        Path(production["spec_path"]).write_text(yaml.safe_dump({**spec, "runs_uri": runs_uri}))
        base = {**os.environ, **s3.connection_env(), USERS_OPTION: f"{READER}:admin"}
        env = airflow_env(stack, work / "airflow", production["spec_path"], base=base)
        assert runs_uri in env["AIRFLOW__FLINK_REPLAY__RUNS_LOCATIONS"].split(","), env
        server = AirflowServer(env, free_port(), work / "airflow.log", run_id_prefix="s3")
        server.launch()
        run_id = None
        try:
            production = deploy_planned_production(stack, production)
            server.wait_healthy()
            server.wait_for_dag(GATE)
            started = time.monotonic()
            with ReviewFeeder(stack.kafka_bootstrap, production["topics"].reviews, start_index=80_000, rate=5):
                run_id = server.trigger(GATE, {"candidate": V1})
                state = server.wait_for_run(GATE, run_id, timeout=600)
            print(f"the gate run ended {state} {time.monotonic() - started:.0f}s after the trigger")
            yield {"s3": s3, "server": server, "production": production, "run_id": run_id, "state": state,
                   "local_runs": work / "runs"}
        finally:
            server.stop()
            stop_production(stack, production)
            if run_id is not None:  # its savepoint: stop_production finds only those of local run records
                shutil.rmtree(Path(stack.savepoint_dir) / run_path_segment(GATE, run_id).strip("/"),
                              ignore_errors=True)


def _run_keys(s3: Any, run_id: str) -> dict[str, str]:
    """The bucket's objects of the run, by file name (the run folder's files and the comparison's reports)."""
    record_key = next(k for k in s3.keys("runs/") if k.endswith("/run_record.json")
                      and json.loads(s3.get(k))["run_id"] == run_id)  # fmt: skip
    folder = record_key.rpartition("/")[0]
    return {k.rpartition("/")[2]: k for k in s3.keys(folder + "/")}


def test_the_gate_writes_its_run_to_the_object_store(stack, gate_on_s3) -> None:
    s3, server, run_id = gate_on_s3["s3"], gate_on_s3["server"], gate_on_s3["run_id"]
    assert gate_on_s3["state"] == "success", server.task_states(GATE, run_id)
    files = _run_keys(s3, run_id)
    for name in ("run_record.json", "manifest.json", "report.html", "summary.json", "junit.xml"):
        assert name in files, sorted(files)
    record = json.loads(s3.get(files["run_record.json"]))
    assert record["verdict"] == "PASS" and record["dag_id"] == GATE, record.get("verdict")
    summary = json.loads(s3.get(files["summary.json"]))
    assert summary["verdict"] == "PASS", summary.get("reasons")
    # production's lease lives beside the runs, taken with the store's conditional writes, and was released
    assert any(k.startswith("runs/_leases/") for k in s3.keys("runs/")), s3.keys("runs/")
    assert record["lease"]["released_at"], record["lease"]
    # nothing of the run on the local disk a file:// spec would have used; production runs as one job
    assert not gate_on_s3["local_runs"].exists(), list(gate_on_s3["local_runs"].rglob("*"))
    assert running_jobs(stack, gate_on_s3["production"]["job_name"]) == [record["production_resumed"]["job_id"]]


def test_the_ui_serves_the_run_from_the_object_store(gate_on_s3) -> None:
    from airflow_flink_replay.ui.paths import RUN_FILES

    s3, server, run_id = gate_on_s3["s3"], gate_on_s3["server"], gate_on_s3["run_id"]
    files = _run_keys(s3, run_id)
    headers = {"Authorization": f"Bearer {server.token(READER)}"}
    page = f"{server.base}/flink-replay/runs/{GATE}/{quote(run_id, safe='')}"
    for name, content_type in RUN_FILES.items():
        served = requests.get(f"{page}/{name}", headers=headers, timeout=60)
        assert served.status_code == 200, (name, served.status_code, served.text[:300])
        assert served.headers["content-type"] == content_type, (name, served.headers["content-type"])
        assert served.headers["x-content-type-options"] == "nosniff"
        assert served.content == s3.get(files[name]), name
    assert requests.get(f"{page}/report.html", timeout=30).status_code == 401  # no login, no report
    # the compare task's extra link points at that page
    links = server.api("GET", f"/dags/{GATE}/dagRuns/{run_id}/taskInstances/compare/links")["extra_links"]
    assert links["Replay Report"] == f"{page.removeprefix(server.base)}/report.html", links  # on the UI's origin
    replays = requests.get(f"{server.base}/flink-replay/replays", headers=headers, timeout=60)
    assert replays.status_code == 200 and run_id in replays.text and "PASS" in replays.text, replays.text[-2000:]

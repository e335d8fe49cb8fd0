"""The plugin's app over HTTP, mounted as the API server mounts it, with Airflow's SimpleAuthManager
(``tests/unit/ui/airflow_ui.py``): a run's files with their headers, 401 without a login, 403 for another team's
DAG, refusals outside the runs locations, the Replays page and the compare view."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from airflow_flink_replay.ui.app import DATA_CSP, REPORT_CSP
from tests.unit.ui.airflow_ui import MEMORY_ROOT, UiEnv, run_folder, write_record, write_reports
from tests.unit.ui.airflow_ui import ui_env as ui_env  # a fixture

pytestmark = pytest.mark.timeout(300)

FIELDS = [{"path": "$.label", "noise_rate": 0.04, "candidate_rate": 0.2, "status": "regression"}]


def url(run: Any, name: str) -> str:
    return f"/flink-replay/runs/{run.dag_id}/{quote(run.run_id, safe='')}/{name}"


@pytest.fixture(scope="module")
def runs(ui_env: UiEnv, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The module's DAG runs: ``ok`` (local folder) and ``mem`` (``memory://``) with reports and records, ``bad``
    whose XComs point outside the runs locations, ``odd`` whose XComs name missing or other files, ``b`` of the
    other team."""
    a, b = ui_env.dags["team_a"].dag_id, ui_env.dags["team_b"].dag_id
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.txt").write_text("not for the browser")
    found: dict[str, Any] = {}

    ok_dir = run_folder(ui_env.runs, a)
    found["ok"] = ui_env.run("team_a", {"run_dir": ok_dir, "comparison": write_reports(ok_dir, "FAIL", FIELDS)})
    reason = {"code": "FIELD_REGRESSION", "severity": "fail", "message": "$.label differs in 20% vs noise 4%\nmore"}
    write_record(ok_dir, found["ok"], days_ago=2, verdict="FAIL", downtime_s=5.1, fidelity=0.93,
                 noise={"$.label": 0.04}, reasons=[reason])  # fmt: skip

    mem_dir = run_folder(MEMORY_ROOT, a)
    found["mem"] = ui_env.run("team_a", {"run_dir": mem_dir, "comparison": write_reports(mem_dir, "PASS", FIELDS)})
    write_record(mem_dir, found["mem"], days_ago=1, downtime_s=4.2, fidelity=0.95, noise={"$.label": 0.05})

    bad_dir = run_folder(ui_env.runs, a)
    os.makedirs(bad_dir)
    os.symlink(outside / "secret.txt", Path(bad_dir) / "junit.xml")
    found["bad"] = ui_env.run("team_a", {"run_dir": str(outside), "comparison": {
        "verdict": "PASS",
        "report_uri": f"file://{bad_dir}/../../../{outside.name}/report.html",
        "summary_uri": "s3://elsewhere/runs/summary.json",
        "junit_uri": f"file://{bad_dir}/junit.xml",
    }})  # fmt: skip
    write_record(str(outside), found["bad"])  # a record, but outside: not shown

    odd_dir = run_folder(ui_env.runs, a)
    found["odd"] = ui_env.run("team_a", {"run_dir": odd_dir, "comparison": {
        "verdict": "PASS", "report_uri": f"{odd_dir}/manifest.json", "summary_uri": f"{odd_dir}/summary.json",
    }})  # fmt: skip

    b_dir = run_folder(ui_env.runs, b)
    found["b"] = ui_env.run("team_b", {"run_dir": b_dir, "comparison": write_reports(b_dir, "INCONCLUSIVE")})
    write_record(b_dir, found["b"], spec_name="routing", verdict="INCONCLUSIVE")
    return found


def test_a_reader_of_the_dag_gets_the_report_with_its_headers(ui_env: UiEnv, runs: dict[str, Any]) -> None:
    got = ui_env.get(url(runs["ok"], "report.html"))
    assert got.status_code == 200, got.text
    assert got.text.endswith("FAIL report</body></html>")
    assert got.headers["content-type"] == "text/html; charset=utf-8"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-security-policy"] == REPORT_CSP
    assert "script-src" not in REPORT_CSP and "style-src 'unsafe-inline'" in REPORT_CSP  # the report's inline CSS
    assert got.headers["cache-control"] == "private, no-store"


def test_the_other_files_and_their_types(ui_env: UiEnv, runs: dict[str, Any]) -> None:
    expected = {"summary.json": "application/json", "junit.xml": "application/xml",
                "run_record.json": "application/json"}  # fmt: skip
    for name, kind in expected.items():
        got = ui_env.get(url(runs["ok"], name))
        assert got.status_code == 200, (name, got.text)
        assert got.headers["content-type"] == kind and got.headers["content-security-policy"] == DATA_CSP
        assert got.headers["x-content-type-options"] == "nosniff"
    assert ui_env.get(url(runs["ok"], "run_record.json")).json()["run_id"] == runs["ok"].run_id


def test_the_browsers_cookie_is_a_login_too(ui_env: UiEnv, runs: dict[str, Any]) -> None:
    jwt = ui_env.token("alice")["Authorization"].removeprefix("Bearer ")
    ui_env.client.cookies.set("_token", jwt)
    try:
        assert ui_env.get(url(runs["ok"], "report.html"), user=None).status_code == 200
    finally:
        ui_env.client.cookies.clear()


def test_an_object_store_runs_location(ui_env: UiEnv, runs: dict[str, Any]) -> None:
    """``memory://`` (fsspec's memory filesystem through Airflow's object storage) as a runs location."""
    got = ui_env.get(url(runs["mem"], "report.html"))
    assert got.status_code == 200 and "PASS report" in got.text
    assert ui_env.get(url(runs["mem"], "run_record.json")).json()["downtime_s"] == 4.2


def test_no_login_is_401_and_another_teams_dag_is_403(ui_env: UiEnv, runs: dict[str, Any]) -> None:
    for name in ("report.html", "run_record.json", "nope.txt"):
        anonymous = ui_env.get(url(runs["ok"], name), user=None)
        assert anonymous.status_code == 401 and anonymous.headers["x-content-type-options"] == "nosniff"
        assert ui_env.get(url(runs["ok"], name), user="bob").status_code == 403
    assert ui_env.get(url(runs["b"], "report.html"), user="bob").status_code == 200
    assert ui_env.get(url(runs["b"], "report.html"), user="alice").status_code == 403
    for page in ("/flink-replay/replays", "/flink-replay/replays/compare?a=x/y&b=x/z"):
        assert ui_env.get(page, user=None).status_code == 401


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("report.html", "'..' or '.' segment"),  # file://<run>/../../../outside/report.html
        ("summary.json", "not under an allowed runs location"),  # s3://elsewhere/...
        ("junit.xml", "once its symlinks are resolved"),  # a symlink in the run folder to a file outside
        ("run_record.json", "not under an allowed runs location"),  # the run folder itself is outside
    ],
)
def test_files_outside_the_runs_locations_are_refused(ui_env: UiEnv, runs: dict[str, Any], name: str,
                                                      why: str) -> None:  # fmt: skip
    got = ui_env.get(url(runs["bad"], name))
    assert got.status_code == 403 and why in got.json()["detail"]
    assert "not for the browser" not in got.text and "Fix:" in got.json()["detail"]


def test_unknown_names_missing_and_mislabelled_files_are_404(ui_env: UiEnv, runs: dict[str, Any]) -> None:
    for name in ("manifest.json", "report.html.bak", "..%2F..%2Fetc%2Fpasswd"):
        assert ui_env.get(url(runs["ok"], name)).status_code == 404
    odd = runs["odd"]
    assert ui_env.get(url(odd, "report.html")).status_code == 404  # its URI names manifest.json
    assert ui_env.get(url(odd, "summary.json")).status_code == 404  # not written
    assert ui_env.get(url(odd, "junit.xml")).status_code == 404  # no URI pushed
    assert ui_env.get(url(odd, "run_record.json")).status_code == 404  # no record yet
    assert ui_env.get(f"/flink-replay/runs/{odd.dag_id}/no-such-run/report.html").status_code == 404


def test_the_replays_page_lists_the_readable_runs(ui_env: UiEnv, runs: dict[str, Any]) -> None:
    mine = {"dag_id": [dag.dag_id for dag in ui_env.dags.values()]}  # other modules' DAGs may be in the DB too
    got = ui_env.get("/flink-replay/replays", params=mine)
    assert got.status_code == 200 and got.headers["content-type"] == "text/html; charset=utf-8"
    assert "script-src" not in got.headers["content-security-policy"]
    page = got.text
    assert "<h2>reviews" in page and "routing" not in page  # team_b's run is bob's only
    for run in (runs["ok"], runs["mem"]):
        assert f'value="{run.dag_id}/{run.run_id}"' in page
        assert f'href="{url(run, "report.html")}"' in page
    assert '<span class="vd FAIL">FAIL</span>' in page and '<span class="vd PASS">PASS</span>' in page
    assert "$.label differs in 20% vs noise 4%" in page and "more" not in page.split("$.label differs")[1][:40]
    assert page.count("<svg") == 4 and "Production downtime" in page and "A/A noise per field" in page
    assert "1 without a run record yet" in page and "1 with a run folder outside" in page
    assert runs["bad"].run_id not in page.split('id="skipped"')[1]

    bob = ui_env.get("/flink-replay/replays", user="bob", params=mine).text
    assert "<h2>routing" in bob and "<h2>reviews" not in bob and runs["ok"].run_id not in bob


def test_the_compare_view(ui_env: UiEnv, runs: dict[str, Any]) -> None:
    ok, mem = runs["ok"], runs["mem"]
    got = ui_env.get("/flink-replay/replays/compare", params={"a": f"{ok.dag_id}/{ok.run_id}",
                                                             "b": f"{mem.dag_id}/{mem.run_id}"})  # fmt: skip
    assert got.status_code == 200, got.text
    page = got.text
    assert 'class="side FAIL"' in page and 'class="side PASS"' in page
    assert "FIELD_REGRESSION" in page and "<code>$.label</code>" in page and "20%" in page
    theirs = runs["b"]
    other = ui_env.get("/flink-replay/replays/compare", params={"a": f"{ok.dag_id}/{ok.run_id}",
                                                               "b": f"{theirs.dag_id}/{theirs.run_id}"})  # fmt: skip
    assert other.status_code == 403
    assert ui_env.get("/flink-replay/replays/compare", params={"a": "no-slash"}).status_code == 400


def test_links_carry_the_api_servers_path(ui_env: UiEnv, runs: dict[str, Any]) -> None:
    """Mounted under an API server at ``/airflow`` (``[api] base_url``'s path), the pages link under it."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from airflow_flink_replay.ui.plugin import FlinkReplayPlugin

    parent = FastAPI(root_path="/airflow")
    parent.mount("/flink-replay", FlinkReplayPlugin.fastapi_apps[0]["app"])
    client = TestClient(parent)
    mine = {"dag_id": [ui_env.dags["team_a"].dag_id]}
    page = client.get("/airflow/flink-replay/replays", headers=ui_env.token("alice"), params=mine).text
    ok = runs["ok"]
    assert f'href="/airflow{url(ok, "report.html")}"' in page
    assert f'href="/airflow/dags/{ok.dag_id}/runs/{quote(ok.run_id, safe="")}"' in page
    root = client.get("/airflow/flink-replay/", headers=ui_env.token("alice"), follow_redirects=False)
    assert root.status_code == 303 and root.headers["location"] == "/airflow/flink-replay/replays"


def test_the_report_needs_nothing_its_policy_forbids(tmp_path: Path) -> None:
    """A real report (the comparison's own renderer) has no script, no event handler, nothing loaded from
    elsewhere: :data:`REPORT_CSP` allows its inline styles and nothing else."""
    from airflow_flink_replay.core.compare.engine import compare_runs
    from airflow_flink_replay.core.compare.reports import render_html
    from airflow_flink_replay.core.compare.synthetic import make_run, write_jsonl
    from tests.unit.ui.test_pages import _tags

    runs = {v: tmp_path / f"{v}.jsonl" for v in ("baseline", "baseline_2", "candidate")}
    for seed, (variant, path) in enumerate(runs.items()):
        write_jsonl(path, make_run(60, variant, seed=seed))
    html = render_html(compare_runs(runs["baseline"], runs["candidate"], baseline_2=runs["baseline_2"], key="$.id"))
    tags = _tags(html)
    assert {"style"} <= {t for t, _ in tags} and not {"script", "link", "img", "iframe", "object", "base"} & {
        t for t, _ in tags}  # fmt: skip
    assert not [k for _, attrs in tags for k in attrs if k.startswith("on")]
    assert not [v for _, attrs in tags for k, v in attrs.items() if k in ("src", "href", "action")]
    assert any("style" in attrs for _, attrs in tags)  # the bars' widths: style-src 'unsafe-inline' covers them

"""`make demo-ui` as a user runs it — the release gate on a real Airflow, triggered over its REST API.

The Makefile's ``demo-ui`` command (``flink-replay demo --ui``) runs in an environment without the venv on
``PATH`` (``airflow standalone`` starts its parts as ``airflow ...`` by name and must find them anyway) with
a small window. It deploys the review agent v1 as production on the local stack, starts ``airflow
standalone`` (api-server, scheduler with the LocalExecutor, DAG processor, triggerer; operators deferrable)
and triggers ``flink_agents_release_gate`` twice in a row with ``POST /api/v2/dags/.../dagRuns``, as CI
does, while reviews keep flowing into production: candidate v2 must FAIL (labels changed for the late-delivery
subset, notify_support called for new keys), then v1 must PASS; then it keeps serving. The module checks:

- the console: exit-free serving, at most ~60 lines (one per chain step per run, the verdicts and their
  reasons), the path of the log file that holds Airflow's output;
- each run on the real scheduler: the three replay jobs, submitted by one job-side run, ran at the same
  time on the replay cluster, never production's; production RUNNING (one job) after each run; no replay
  job, replay topic or memory fork left;
- the Airflow UI of the same standalone shows the failed run and its verdict, and the report renders;
- the Mem0 LLM key the demo's spec gives by reference is nowhere an operator of Airflow or Flink can read;
- last, with the demo stopped (no more reviews): production's state and Mem0 namespace are intact.

Cost (2 cores): production deploy (~20 s, Airflow starting meanwhile), two gate runs on the LocalExecutor
(~95 s each), the checks (~30 s).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.dag_testing import (
    assert_no_replay_leftovers,
    assert_production_state_intact,
    running_jobs,
    stop_production,
)

pytestmark = pytest.mark.timeout(2400)
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GATE = "flink_agents_release_gate"
#: the demo's Airflow asks for a login: a reviewer (admin) and an outsider (no role: no DAG is theirs to read)
READER, OUTSIDER = "reviewer", "outsider"
USERS = f"{READER}:admin,{OUTSIDER}:"
WINDOW = 16
MAX_CONSOLE_LINES = 60
STEPS = ("preflight", "agent check", "savepoint", "production resumed", "capture window", "memory forks", "replays",
         "compare", "cleanup")


def _clean_env() -> dict[str, str]:
    """The caller's environment without the venv's bin on PATH (a fresh shell that never activated it)."""
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if Path(p) != BIN]
    return {**os.environ, "PATH": os.pathsep.join(path)}


def _makefile_recipe(target: str) -> str:
    """The one command of ``target`` in the Makefile."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    return next(line.strip() for line in lines[start + 1:]
                if line.startswith("\t") and not line.strip().startswith("@#"))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the demo and its standalone (their own process group)."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


@pytest.fixture(scope="module")
def demo(stack, tmp_path_factory) -> Any:
    """``make demo-ui`` run until it serves after its two gate runs; its console, Airflow and production.
    Production (with its topics, memories, savepoints) is removed afterwards when this module started it."""
    from airflow_flink_replay.local.airflow_runner import airflow_env
    from airflow_flink_replay.local.airflow_server import USERS_OPTION, AirflowServer, free_port
    from airflow_flink_replay.local.demo import JOB_IDENTIFIER, PRODUCTION_JOB_NAME, DemoTopics

    demo_dir = Path(stack.workdir) / "demo"
    production = {"job_name": PRODUCTION_JOB_NAME, "topics": DemoTopics.named("demo"), "identifier": JOB_IDENTIFIER,
                  "spec_path": demo_dir / "replay_spec.yaml"}
    was_running = bool(running_jobs(stack, PRODUCTION_JOB_NAME))
    port = free_port()
    recipe = _makefile_recipe("demo-ui").replace("$(BIN)", str(BIN))
    console = tmp_path_factory.mktemp("demo") / "console.txt"
    started = time.monotonic()
    with console.open("wb") as out:
        proc = subprocess.Popen([*recipe.split(), "--port", str(port), "--window", str(WINDOW)], cwd=ROOT,
                                env={**_clean_env(), USERS_OPTION: USERS}, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 1800
        while proc.poll() is None and time.monotonic() < deadline and "serving Airflow on" not in console.read_text():
            time.sleep(3)
        text = console.read_text(errors="replace")
        assert proc.poll() is None and "serving Airflow on" in text, \
            f"demo --ui did not get to serving (exit {proc.poll()}) after {time.monotonic() - started:.0f}s:\n{text}"
        log = re.search(r"full Airflow log: (\S+\.log)", text)
        assert log, text
        env = airflow_env(stack, demo_dir / "airflow", production["spec_path"],
                          base={**os.environ, USERS_OPTION: USERS})
        server = AirflowServer(env, port, Path(log.group(1)))
        print(f"the demo served after {time.monotonic() - started:.0f}s")
        yield {"console": text, "server": server, "production": production, "was_running": was_running,
               "demo_dir": demo_dir, "stop": lambda: _stop(proc)}
    finally:
        _stop(proc)
        if not was_running:
            stop_production(stack, production)


@pytest.fixture(scope="module")
def gate_runs(stack, demo) -> dict[str, dict[str, Any]]:
    """The demo's two gate runs (v2, then v1) read back: run record, task instances, the Flink jobs of the run
    on each cluster (unless the demo recycled the replay cluster in between, which forgets finished jobs)."""
    blocks = re.split(r"\n(?=flink_agents_release_gate with candidate)", demo["console"])[1:]
    runs = {}
    for label, block in zip(("v2", "v1"), blocks, strict=False):
        path = re.search(r"run record: (\S+)", block)
        assert path, block
        record = json.loads(Path(path.group(1)).read_text())
        run_id = record["run_id"]
        flink_jobs = {
            cluster: [j for j in requests.get(f"{url}/jobs/overview", timeout=10).json()["jobs"] if run_id in j["name"]]
            for cluster, url in (("production", stack.flink_rest_url), ("replay", stack.replay_flink_rest_url))
        }
        server = demo["server"]
        state = server.api("GET", f"/dags/{GATE}/dagRuns/{run_id}")["state"]
        tis = server.task_instances(GATE, run_id)
        runs[label] = {"run_id": run_id, "state": state, "tis": tis, "record": record, "flink_jobs": flink_jobs,
                       "states": {t: str(ti["state"]) for t, ti in tis.items()}, "block": block}
    assert list(runs) == ["v2", "v1"], demo["console"]
    return runs


def test_demo_v2_fails_v1_passes_in_a_few_lines(demo) -> None:
    out = demo["console"]
    lines = out.splitlines()
    assert len(lines) <= MAX_CONSOLE_LINES, f"{len(lines)} console lines:\n{out}"
    assert "demo OK: v2 is stopped at the gate, v1 passes" in out, out
    log = Path(re.search(r"full Airflow log: (\S+\.log)", out).group(1))  # type: ignore[union-attr]
    assert log.is_file() and GATE in log.read_text(errors="replace")  # Airflow's output went there
    assert "FileNotFoundError" not in log.read_text(errors="replace")  # standalone found `airflow` by name
    blocks = re.split(r"\n(?=flink_agents_release_gate with candidate)", out)[1:]
    assert [b.split("(", 1)[0].split("with ")[1].strip() for b in blocks] == ["candidate v2", "candidate v1"], out
    verdicts = [re.search(r"^  => (\w+)", b, re.M) for b in blocks]
    assert [v.group(1) if v else None for v in verdicts] == ["FAIL", "PASS"], out
    raw = re.search(r"raw stop \+ restore by hand \(drain, resubmit from the savepoint, RUNNING\): (\d+\.\d) s", out)
    assert raw, out  # production stopped and restored by hand once, before the runs: the floor
    for block in blocks:
        assert [s for s in STEPS if re.search(rf"^  {s} +\d+\.\ds", block, re.M)] == list(STEPS), block
        assert re.search(r"downtime \d+\.\d s", block) and re.search(r"\d+ records in the window", block), block
        against = re.search(r"production's downtime (\d+\.\d) s against (\d+\.\d) s stopped and restored by hand: "
                            r"(\d+\.\d\d)x", block)
        assert against and against.group(2) == raw.group(1), block
        assert float(against.group(3)) == pytest.approx(float(against.group(1)) / float(raw.group(1)), abs=0.03)
        assert "report: " in block and "run record: " in block, block
        # the baseline reproduces what production itself output for the window (deterministic chat model)
        assert "baseline = production for 100.0% of its outputs" in block, block
    assert re.search(r"\[\w+\] ", blocks[0]), blocks[0]  # v2's FAIL comes with its reasons
    health = demo["server"].health()
    assert health and all(health[p]["status"] == "healthy" for p in ("scheduler", "triggerer", "dag_processor"))
    assert requests.get(demo["server"].base + "/", timeout=10).ok  # the UI page itself


def _assert_replays_ran_in_parallel_on_the_replay_cluster(stack, run: dict[str, Any]) -> None:
    assert run["states"]["submit_replays"] == "success", run["states"]
    assert stack.replay_flink_rest_url and stack.replay_flink_rest_url != stack.flink_rest_url
    # nothing of this run ever reached production's cluster
    assert not run["flink_jobs"]["production"], run["flink_jobs"]["production"]
    if "recycled the replay cluster" in run["block"]:
        return  # the recycle forgot the cluster's finished jobs
    on_replay_cluster = {j["jid"]: j for j in run["flink_jobs"]["replay"]}
    for variant in run["record"]["variants"]:
        job = on_replay_cluster.get(variant["job_id"])
        assert job and job["state"] == "FINISHED" and job["name"].endswith(variant["variant"]), (variant, job)
    # one submission task submitted all three (one job-side run) and the three jobs ran at the same time
    jobs = [on_replay_cluster[v["job_id"]] for v in run["record"]["variants"]]
    assert len(jobs) == 3 and max(j["start-time"] for j in jobs) < min(j["end-time"] for j in jobs), jobs
    assert all(j["state"] == "FINISHED" for j in on_replay_cluster.values()), on_replay_cluster


def test_gate_over_the_rest_api_fails_v2_then_passes_v1(stack, demo, gate_runs) -> None:
    from airflow_flink_replay.links.flink import FlinkJobLink

    production, server = demo["production"], demo["server"]
    # --- candidate v2: FAIL, for the documented reasons; the run fails, nothing is approved
    v2 = gate_runs["v2"]
    record = v2["record"]
    assert v2["state"] == "failed", v2["states"]
    assert record["verdict"] == "FAIL", record.get("reasons")
    assert v2["run_id"].startswith("demo__"), v2["run_id"]  # triggered over the REST API, not dag.test()
    assert v2["states"]["compare"] == "failed" and v2["states"]["approve"] == "upstream_failed", v2["states"]
    # v2 fails on fields. Which of its changes are significant over a 16-record window depends on the reviews
    # the window holds (a run whose window held two label flips reported $.label as not significant): the
    # label change and the notify_support calls it drives are among the reasons, with any severity.
    failing = {f for r in record["reasons"] if r["severity"] == "fail" for f in r["fields"]}
    assert any(r["code"] == "FIELD_REGRESSION" for r in record["reasons"] if r["severity"] == "fail"), failing
    named = {f for r in record["reasons"] for f in r["fields"]}
    assert "$.label" in named, record["reasons"]
    # the new notify_support calls show in the comparison (the label change drives them) and the audits
    assert {"$.tools", "tool:notify_support.call"} & named, record["reasons"]

    def support_calls(variant: dict[str, Any]) -> int:
        lines = Path(variant["audit"]).read_text().splitlines()
        return sum(json.loads(line)["resource_name"] == "notify_support" for line in lines if line.strip())

    baseline, _, candidate = record["variants"]
    assert support_calls(candidate) > support_calls(baseline), record["variants"]
    # the replay task's Flink link follows its job to the replay cluster web UI's "completed" page
    link = server.xcom(GATE, v2["run_id"], "replay_baseline", FlinkJobLink().xcom_key)
    assert link == f"{stack.replay_flink_rest_url}/#/job/completed/{baseline['job_id']}/overview", link
    _assert_replays_ran_in_parallel_on_the_replay_cluster(stack, v2)
    # production came back, once, and the downtime was measured inside the one stop-window task
    assert v2["states"]["resume_production"] == "success"
    assert 0 < record["downtime_s"] < 120
    window = record["savepoint"]["window"]
    assert window["resumed"]["downtime_seconds"] == record["downtime_s"] and window["error"] is None, window
    assert record["production_resumed"]["job_id"] == window["resumed"]["job_id"]
    for task in ("cancel_leftover_replays", "delete_replay_topics", "drop_forks", "verify_production_memory"):
        assert v2["states"][task] == "success", (task, v2["states"])
    assert v2["states"]["run_record"] == "failed"  # written, then fails the run: compare failed
    # every variant replayed exactly the manifest's window
    assert [v["output_records"] for v in record["variants"]] == [WINDOW] * 3
    assert record["manifest_digest"] and all(v["output_digest"] for v in record["variants"])
    # action-state evidence in the run record: the replays wrote to their own topics; production's topic
    # end offsets before and after the replay are recorded, and what happened there meanwhile is said
    cleanup = record["action_state"]["cleanup"]
    assert cleanup["production_topic"] == production["topics"].action_state
    assert cleanup["production_end_offsets_before"] and cleanup["production_end_offsets_after"]
    assert cleanup["note"].startswith("production's action-state topic advanced by"), cleanup["note"]
    held = cleanup["replay_topic_end_offsets"]
    results = record["action_state"]["isolation"]["result_topics"]
    assert set(held) == {v["action_state_topic"] for v in record["variants"]} | {
        t for kinds in results.values() for t in kinds.values()}
    assert all(sum(offsets.values()) > 0 for offsets in held.values()), held
    # the outputs came back over Kafka, read to the end of the log (the high watermarks above are tansu's,
    # wrong for the sink's multi-record batches: lower than what the topic holds)
    assert all(v["results"]["outputs"]["kept"] == v["output_records"] for v in record["variants"])

    # --- candidate v1 (production's own agent), right after on the same scheduler: PASS, the gate approves
    v1 = gate_runs["v1"]
    assert v1["record"]["verdict"] == "PASS", v1["record"]["reasons"]
    assert v1["state"] == "success", v1["states"]
    assert v1["states"]["approve"] == "success" and v1["states"]["run_record"] == "success"
    _assert_replays_ran_in_parallel_on_the_replay_cluster(stack, v1)
    # v1's run stopped the production v2's run had resumed: one production job at a time all along
    assert v1["record"]["savepoint"]["job_id"] == record["production_resumed"]["job_id"]

    # --- nothing of the replays is left behind
    for rec in (record, v1["record"]):
        assert_no_replay_leftovers(stack, rec)
    assert running_jobs(stack, production["job_name"]) == [v1["record"]["production_resumed"]["job_id"]]


#: JavaScript: fill the simple auth manager's login form (a React form: the value is set through the input's own
#: setter and announced with an ``input`` event, as typing would) and press "Sign in".
_LOGIN_JS = """(async () => {
  const set = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;
  for (const [name, value] of [['username', %s], ['password', %s]]) {
    const input = document.querySelector(`input[name="${name}"]`);
    if (!input) return 'no ' + name + ' field';
    set.call(input, value);
    input.dispatchEvent(new Event('input', {bubbles: true}));
  }
  await new Promise(r => setTimeout(r, 200));
  const button = [...document.querySelectorAll('button[type=submit]')].find(b => !b.disabled);
  if (!button) return 'no enabled Sign in button';
  button.click();
  return 'submitted';
})()"""
#: JavaScript: the link labelled "Replay Report" (the task's extra link), or undefined
_REPORT_LINK_JS = "[...document.querySelectorAll('a')].find(a => a.textContent.trim() === 'Replay Report')"
#: JavaScript: that link's href, or null
_EXTRA_LINK_JS = f"(() => {{ const link = {_REPORT_LINK_JS}; return link ? link.href : null; }})()"
#: JavaScript: click that link as a person does; returns its target
_FOLLOW_LINK_JS = f"(() => {{ const link = {_REPORT_LINK_JS}; link.click(); return link.target; }})()"


def _log_in(browser: Any, base: str, username: str, password: str) -> None:
    """Log in through the UI's login page, as a person does; the UI sets its ``_token`` cookie."""
    browser.goto(f"{base}/auth/login/")
    browser.wait_for(lambda d: 'name="password"' in d.html, timeout=60, what="the login form")
    assert browser.evaluate(_LOGIN_JS % (json.dumps(username), json.dumps(password))) == "submitted"
    browser.wait_for(lambda d: "/auth/login" not in d.url and d.ready == "complete", timeout=60,
                     what=f"the UI after {username}'s login")


def _status(browser: Any, url: str) -> int:
    """The HTTP status the page's own session (its cookie) gets for ``url``."""
    return int(browser.evaluate(f"fetch({json.dumps(url)}, {{credentials: 'same-origin'}}).then(r => r.status)"))


def test_ui_shows_the_failed_gate_run_its_verdict_and_its_report(demo, gate_runs, tmp_path) -> None:
    """In the demo's Airflow UI (logins on), in headless Chromium driven over CDP (tests/browser.py): a reviewer
    logs in, sees the failed gate run's grid and its verdict, opens the compare task, follows its "Replay Report"
    extra link to the report the provider's plugin serves, and opens the Replays page with both runs and a chart.
    An outsider (a user without a role: no DAG of Airflow is theirs to read) logs in too and gets 403 for that
    report. Each page is polled in real time until it shows what is expected, then screenshotted; with
    ``FLINK_REPLAY_UPDATE_SCREENSHOTS=1`` the report and Replays screenshots replace docs/images' (quickstart)."""
    from urllib.parse import quote

    from tests.browser import CHROMIUM, Browser, Dom

    assert CHROMIUM.exists(), "Debian's chromium is missing: `make system-deps` installs it"
    v2 = gate_runs["v2"]
    run_id, report = v2["run_id"], str(Path(v2["record"]["report_dir"]) / "report.html")
    server = demo["server"]
    base = server.base
    report_page = f"{base}/flink-replay/runs/{GATE}/{quote(run_id, safe='')}/report.html"

    def verdict_row_fails(dom: Dom) -> bool:
        """The XCom table's ``verdict`` row holds FAIL (key and value in the same row)."""
        rows = re.findall(r"<tr\b.*?</tr>", dom.html, re.S)
        return any(">verdict</td>" in row and ">FAIL<" in row for row in rows)

    def report_shows_fail(dom: Dom) -> bool:
        return dom.contains("FAIL", "$.label") and "FAIL" in dom.text and "$.label" in dom.text

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
        "report_file": (Path(report).as_uri(), report_shows_fail, "the report file with FAIL and $.label"),
    }
    shots: dict[str, Path] = {}
    with Browser(tmp_path / "chromium", width=1600, height=1000) as browser:
        _log_in(browser, base, READER, server.password(READER))
        for name, (url, shows, what) in pages.items():
            started = time.monotonic()
            browser.goto(url)
            browser.wait_for(shows, timeout=90, what=f"{name}: {what}")
            shots[name] = browser.screenshot(tmp_path / f"{name}.png")
            print(f"{name}: shown and screenshotted in {time.monotonic() - started:.1f}s")

        # the compare task's details: its "Replay Report" extra link leads to the report the plugin serves
        browser.goto(f"{base}/dags/{GATE}/runs/{run_id}/tasks/compare/details")
        found: dict[str, str] = {}

        def has_report_link(dom: Dom) -> bool:
            found["href"] = browser.evaluate(_EXTRA_LINK_JS) or ""
            return bool(found["href"])

        browser.wait_for(has_report_link, timeout=90, what="the compare task's Replay Report extra link")
        shots["compare_task"] = browser.screenshot(tmp_path / "compare_task.png")
        assert found["href"] == report_page, found
        assert browser.evaluate(_FOLLOW_LINK_JS) == "_self"  # on the UI's own origin: the same tab
        browser.wait_for(report_shows_fail, timeout=90, what="the report behind the extra link, with FAIL")
        shots["report_page"] = browser.screenshot(tmp_path / "report_page.png")

        browser.goto(f"{base}/flink-replay/replays")
        replays = browser.wait_for(lambda d: d.contains("FAIL", "PASS") and "<svg" in d.html, timeout=90,
                                   what="the Replays page with both gate runs' verdicts and a chart")
        for label in ("v2", "v1"):
            assert gate_runs[label]["run_id"] in replays.html, label
        shots["replays"] = browser.screenshot(tmp_path / "replays.png")
        for name, png in shots.items():
            assert png.stat().st_size > 20_000, (name, png.stat().st_size)

    with Browser(tmp_path / "chromium-outsider", width=1200, height=700) as browser:
        _log_in(browser, base, OUTSIDER, server.password(OUTSIDER))
        # asked from the UI's page (the plugin's pages allow no script, hence no fetch, in them)
        assert _status(browser, report_page) == 403
        replays = _status(browser, f"{base}/flink-replay/replays")
        browser.goto(report_page)
        browser.wait_for(lambda d: "Forbidden" in d.text and "$.label" not in d.html, timeout=30,
                         what="the outsider's 403 for the report")
        browser.goto(f"{base}/flink-replay/replays")
        shown = browser.wait_for(lambda d: d.ready == "complete", timeout=30, what="the outsider's Replays page")
        assert replays == 200 and run_id not in shown.html, "the outsider's Replays page lists a run it may not read"

    if os.environ.get("FLINK_REPLAY_UPDATE_SCREENSHOTS") == "1":
        for name in ("report_page", "replays"):
            target = ROOT / "docs" / "images" / f"ui-{name.replace('_', '-')}.png"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(shots[name].read_bytes())


def test_the_plugin_refuses_a_run_file_outside_the_runs_location(demo, gate_runs, tmp_path) -> None:
    """A run folder that XCom points outside ``[flink_replay] runs_locations`` is refused with 403: through ``..``,
    on another scheme, or through a symlink planted inside the location. The XCom is changed over the REST API
    (as a task of another DAG author could push it) and put back afterwards; the real record is served again."""
    from urllib.parse import quote

    server, v1 = demo["server"], gate_runs["v1"]
    run_id = v1["run_id"]
    url = f"{server.base}/flink-replay/runs/{GATE}/{quote(run_id, safe='')}/run_record.json"
    xcom = f"/dags/{GATE}/dagRuns/{run_id}/taskInstances/resolve/xcomEntries/run_dir"
    real = server.xcom(GATE, run_id, "resolve", "run_dir")
    secret = tmp_path / "outside" / "run_record.json"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"dag_id": GATE, "run_id": run_id, "outside": True}))
    planted = Path(real).parent / "planted-by-test"  # beside the run's folder: inside the runs location
    planted.mkdir(exist_ok=True)
    (planted / "run_record.json").unlink(missing_ok=True)
    (planted / "run_record.json").symlink_to(secret)
    headers = {"Authorization": f"Bearer {server.token(READER)}"}
    try:
        assert requests.get(url, headers=headers, timeout=30).status_code == 200
        climbing = "/".join([real.rstrip("/"), *[".."] * 40]) + str(secret.parent)  # to / and down to the file
        for outside in (climbing, f"s3://elsewhere{secret.parent}", str(planted)):
            server.api("PATCH", xcom, json={"value": outside, "map_index": -1})
            got = requests.get(url, headers=headers, timeout=30)
            assert got.status_code == 403 and "refused" in got.text, (outside, got.status_code, got.text[:300])
            assert '"outside"' not in got.text, got.text
    finally:
        server.api("PATCH", xcom, json={"value": real, "map_index": -1})
        (planted / "run_record.json").unlink(missing_ok=True)
        planted.rmdir()
    served = requests.get(url, headers=headers, timeout=30)
    assert served.status_code == 200 and served.json()["run_id"] == run_id, served.text[:300]


def test_a_secret_given_by_reference_is_nowhere_after_the_gate_runs(stack, demo, gate_runs) -> None:
    """The demo's spec gives Mem0's LLM key by reference (a file). The replays resolved it inside Flink (their
    memory was built with it: the runs got verdicts); XCom, the run folders, the task logs, Flink's logs and
    job configs, the console and standalone's output hold only the reference."""
    from airflow_flink_replay.local.demo import PLACEHOLDER_SECRETS

    key_file = demo["demo_dir"] / "llm-api-key"
    secret, reference = key_file.read_text(), f"${{file:{key_file}}}"
    assert reference in Path(demo["production"]["spec_path"]).read_text()
    # the other shapes, planted alike: a header value, a URL with a password, a number (and its password alone)
    shapes = {name: (demo["demo_dir"] / name).read_text() for name in PLACEHOLDER_SECRETS.values()}
    shapes["url password"] = shapes["llm-site-url"].split(":", 2)[2].split("@")[0]
    shapes["header token"] = shapes["llm-header"].removeprefix("Bearer ")
    assert {gate_runs["v2"]["record"]["verdict"], gate_runs["v1"]["record"]["verdict"]} == {"FAIL", "PASS"}
    found: dict[str, list[str]] = {"secret": [], "reference": []}
    server = demo["server"]

    def look(where: str, text: str) -> None:
        if secret in text:
            found["secret"].append(where)
        for shape, value in shapes.items():
            if value in text:
                found["secret"].append(f"{where} ({shape})")
        if reference in text:
            found["reference"].append(where)

    for run in gate_runs.values():
        for task_id in run["tis"]:
            entries = server.api("GET", f"/dags/{GATE}/dagRuns/{run['run_id']}/taskInstances/{task_id}/xcomEntries")
            for entry in entries["xcom_entries"]:
                value = server.xcom(GATE, run["run_id"], task_id, entry["key"])
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
    # the logs of every process of the run: Airflow's tasks and services, both Flink clusters (their .out files
    # hold the TaskManagers' stdout and stderr), the broker's and the store's
    for folder in (server.home / "logs", workdir / "logs", workdir / "replay-cluster" / "logs"):
        for path in folder.rglob("*"):
            if path.is_file():
                look(str(path), path.read_text(errors="replace"))
    look("standalone output", server.tail(10**9))
    look("console", demo["console"])
    assert not found["secret"], found["secret"]
    assert any(w.startswith("xcom") for w in found["reference"]), found["reference"]  # we looked where it travels


def test_production_kept_its_state_and_its_memory_through_both_runs(stack, demo, gate_runs) -> None:
    """Last (it stops the demo, and with it the reviews flowing into production): production runs, its keyed
    state is intact (per-customer counters continue, never reset) and its memory holds one memory per review
    it processed — the replays wrote nothing into it."""
    from airflow_flink_replay.hooks.mem0 import Mem0Hook
    from airflow_flink_replay.local.stack import port_free

    demo["stop"]()
    # stopping the demo stopped its Airflow: nothing answers on its port any more
    assert demo["server"].health() is None and port_free(demo["server"].port)
    production = demo["production"]
    assert running_jobs(stack, production["job_name"]) == [gate_runs["v1"]["record"]["production_resumed"]["job_id"]]
    if demo["was_running"]:
        pytest.skip("a production of an earlier demo: its outputs and memories predate this module")
    outputs = assert_production_state_intact(stack, production)
    rows = Mem0Hook(config=stack.mem0_config()).list_memories({"user_id": production["identifier"]})
    review_ids = [r.payload.get("review_id") or (r.payload.get("metadata") or {}).get("review_id") for r in rows]
    assert len(review_ids) == len(set(review_ids)) >= 24
    assert set(review_ids) == {o["id"] for o in outputs}

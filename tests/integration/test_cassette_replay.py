"""Cassettes on the real stack: production's recorded tool answers served to its replays.

Production runs the order agent (``examples.order_agent``: every question is answered with what the
``order_status`` tool got from an order service over HTTP) with ``--cassette-topic``; the service answers
differently each time it is asked (the order moves on), so only production's own answers reproduce
production. Three replays of the window run at once, each with the cassette and the default policy (tools:
``replay``): baseline and baseline-2 (v1) and the candidate (v2, which asks the tool with other arguments).

What must hold: the baselines' outputs equal production's own for >= 99% of the window with no placeholder,
the order service is never asked by a replay, the candidate's calls are unmatched (fallback ``record``) and
the comparison FAILs naming the tool with the argument diff.
"""

from __future__ import annotations

import http.server
import itertools
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from airflow_flink_replay.core.audit import read_audit
from airflow_flink_replay.core.cassette import CassetteWindow
from airflow_flink_replay.core.compare import compare_runs, render_html
from airflow_flink_replay.core.compare.fidelity import measure_fidelity
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.operators.replay import collect_jsonl
from examples.review_agent.common.generator import produce_reviews
from tests.integration import flink_side_helpers as fh

pytestmark = pytest.mark.integration

WINDOW = 60
STATES = ("paid", "packed", "shipped", "out for delivery", "delivered")


class _OrderService(http.server.BaseHTTPRequestHandler):
    """Each answer is the next state of a counter: asking again gives another answer."""

    asked: list[dict[str, str]] = []
    counter = itertools.count()

    def do_GET(self) -> None:
        query = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
        self.asked.append(query)
        n = next(self.counter)
        body = json.dumps({"order": query.get("order"), "status": STATES[n % len(STATES)], "version": n}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _questions(run: str, n: int, url: str) -> list[dict[str, Any]]:
    now = int(time.time() * 1000)
    return [
        {"id": f"q{run}-{i}", "customer": f"c{run}-{i % 7}", "order": f"o{run}-{i % 23}", "status_url": url,
         "ts": now + i}
        for i in range(n)
    ]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def orders(stack, tmp_path_factory) -> Any:
    run = uuid.uuid4().hex[:8]
    tmp = tmp_path_factory.mktemp(f"cassette-{run}")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OrderService)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/status"
    src, cap, out, tape = f"oa-src-{run}", f"oa-cap-{run}", f"oa-out-{run}", f"oa-cassette-{run}"
    fh.create_topics((src, 1), (cap, 1), (out, 1), (tape, 1))
    jobs: list[str] = []
    questions = _questions(run, WINDOW, url)
    variants = {"baseline": "v1", "baseline_2": "v1", "candidate": "v2"}
    try:
        production = fh.submit(fh.PRODUCTION_JOB, [
            "--agent-job", "examples.order_agent.v1:job", "--bootstrap", fh.BOOTSTRAP, "--source-topic", src,
            "--sink-topic", out, "--capture-topic", cap, "--cassette-topic", tape,
            "--action-state-topic", f"oa-as-{run}", "--job-identifier", f"prod-{run}", "--agent-uid", "afr-agent",
            "--jars", ",".join(fh.JARS), "--group-id", f"grp-{run}", "--job-name", f"oa-prod-{run}",
        ])
        jobs.append(production)
        fh.wait_running_tasks(production)
        produce_reviews(fh.BOOTSTRAP, src, questions)
        prod_out = fh.wait_topic_count(out, 1, WINDOW)
        asked_by_production = len(_OrderService.asked)
        window = CassetteWindow(topic=tape, start_offsets={0: 0}, end_offsets=fh.end_offsets(tape, 1))

        def spec(variant: str, version: str) -> ReplayJobSpec:
            return ReplayJobSpec(
                variant=variant, agent_job=f"examples.order_agent.{version}:job", job_identifier=f"{variant}-{run}",
                action_state_topic=f"oa-as-{variant}-{run}", production_action_state_topic=f"oa-as-{run}",
                production_job_identifier=f"prod-{run}",
                output_dir=str(tmp / variant / "out"), audit_dir=str(tmp / variant / "audit"),
                kafka_bootstrap=fh.BOOTSTRAP, agent_uid="afr-agent", cassette=window,
                capture_topic=cap, start_offsets={0: 0}, end_offsets=fh.end_offsets(cap, 1),
                connector_jars=fh.JARS, job_name=f"oa-{variant}-{run}",
            )

        specs = {name: spec(name, version) for name, version in variants.items()}
        procs = {
            name: fh.submit_async(fh.REPLAY_JOB, s.to_argv(), conf={"restart-strategy.fixed-delay.attempts": "0"})
            for name, s in specs.items()
        }
        replays = {name: fh.job_id_of(proc) for name, proc in procs.items()}
        jobs += replays.values()
        for job_id in replays.values():
            state = fh.wait_state(job_id, {"FINISHED", "FAILED"}, timeout=240)
            assert state == "FINISHED", fh.exception_history(job_id)[-3000:]
        files: dict[str, Path] = {"production": _jsonl(tmp / "production.jsonl", prod_out)}
        audits: dict[str, Path] = {}
        for name, s in specs.items():
            files[name] = _jsonl(tmp / f"{name}.jsonl", fh.read_outputs(Path(s.output_dir)))
            audits[name] = tmp / f"{name}.audit.jsonl"
            collect_jsonl(Path(s.audit_dir), audits[name])
        yield {
            "run": run, "window": window, "files": files, "audits": audits,
            "asked_by_production": asked_by_production, "asked": list(_OrderService.asked),
        }
    finally:
        for jid in jobs:
            fh.cancel(jid)
        fh.delete_topics(src, cap, out, tape, f"oa-as-{run}", *(f"oa-as-{v}-{run}" for v in variants))
        server.shutdown()


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_production_recorded_one_call_per_question(orders) -> None:
    assert orders["window"].size == WINDOW
    assert orders["asked_by_production"] == WINDOW


def test_the_baseline_reproduces_production_from_the_cassette(orders) -> None:
    files = orders["files"]
    fidelity = measure_fidelity(files["baseline"], files["production"], key="$.id", ignore=["$._replay"],
                                baseline_2=files["baseline_2"])
    print(f"\ncassette A/A fidelity: {fidelity.equal}/{fidelity.baseline_outputs} = {fidelity.rate:.1%} of the "
          f"baseline's outputs equal production's ({fidelity.aligned} aligned)")
    assert fidelity.baseline_outputs == WINDOW
    assert fidelity.rate is not None and fidelity.rate >= 0.99
    for name in ("baseline", "baseline_2", "candidate"):
        assert "[replay:" not in files[name].read_text(encoding="utf-8") or name == "candidate"
    statuses = {r["id"]: r["status"] for r in _rows(files["production"])}
    assert {r["id"]: r["status"] for r in _rows(files["baseline"])} == statuses


def test_no_replay_asked_the_order_service(orders) -> None:
    assert len(orders["asked"]) == orders["asked_by_production"]
    assert all(q.get("detail") == "short" for q in orders["asked"])


def test_the_audit_says_replayed_and_unmatched(orders) -> None:
    baseline = list(read_audit(orders["audits"]["baseline"]))
    assert len(baseline) == WINDOW
    assert {(r.resource_name, r.decision, r.outcome, r.fallback) for r in baseline} == {
        ("order_status", "replay", "replayed", None)}
    candidate = list(read_audit(orders["audits"]["candidate"]))
    assert len(candidate) == WINDOW
    assert {(r.decision, r.outcome, r.fallback) for r in candidate} == {("replay", "recorded", "record")}
    assert all("[replay: tool 'order_status' recorded" in r["reply"] for r in _rows(orders["files"]["candidate"]))


def test_the_candidate_with_other_arguments_fails_naming_the_tool(orders) -> None:
    files, audits = orders["files"], orders["audits"]
    result = compare_runs(files["baseline"], files["candidate"], files["baseline_2"], key="$.id", audits=audits)
    assert result.verdict == "FAIL"
    argument_reasons = [r for r in result.reasons if r.code == "SIDE_EFFECT_ARGUMENTS"]
    assert argument_reasons and "order_status" in argument_reasons[0].message
    changes = [c for s in result.resources for c in s.changes if c.aspect == "arguments"]
    assert changes and any(line.startswith("kwargs.detail: (absent) → \"full\"") for line in changes[0].changed)
    html = render_html(result)
    assert "order_status" in html and "detail" in html

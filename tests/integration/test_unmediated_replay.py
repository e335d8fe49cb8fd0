"""The unmediated-call guard on the real stack: an action doing a raw ``requests.get`` during a replay.

Production runs the drill agent (``examples.review_agent.drills.fetcher``: every review is looked up with a
raw HTTP GET to a local server, outside every resource) and keeps being fed while two replays of its capture
window run on the same TaskManager: one with the policy's ``unmediated: block`` (its lookups fail before they
leave: the server sees none of them, the job fails naming the guard), one with ``record`` (its lookups
happen and are audited). Production's own lookups all go through meanwhile, from the same interpreter.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from airflow_flink_replay.core.audit import read_audit
from airflow_flink_replay.core.compare import compare_runs, render_html
from airflow_flink_replay.core.policy import ReplayPolicy
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.operators.replay import collect_jsonl, unmediated_calls
from examples.review_agent.common.generator import produce_reviews
from tests.integration import flink_side_helpers as fh

pytestmark = pytest.mark.integration

JOB = "examples.review_agent.drills.fetcher:job"


class _Lookups(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        query = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
        self.seen.append(query)
        body = f"found {query.get('id')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _reviews(run: str, first: int, n: int, url: str) -> list[dict[str, Any]]:
    now = int(time.time() * 1000)
    return [
        {"id": f"r{run}-{i}", "customer": f"c{run}-{i % 3}", "lookup_url": url, "ts": now + i}
        for i in range(first, first + n)
    ]


@pytest.fixture(scope="module")
def drill(stack, tmp_path_factory) -> Any:
    run = uuid.uuid4().hex[:8]
    tmp = tmp_path_factory.mktemp(f"unmediated-{run}")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Lookups)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/lookup"
    src, cap, out, prod_as = f"um-src-{run}", f"um-cap-{run}", f"um-out-{run}", f"um-as-{run}"
    fh.create_topics((src, 1), (cap, 1), (out, 1))
    jobs: list[str] = []
    batch_a, batch_b = _reviews(run, 0, 6, url), _reviews(run, 6, 6, url)
    try:
        production = fh.submit(fh.PRODUCTION_JOB, [
            "--agent-job", JOB, "--bootstrap", fh.BOOTSTRAP, "--source-topic", src, "--sink-topic", out,
            "--capture-topic", cap, "--action-state-topic", prod_as, "--job-identifier", f"prod-{run}",
            "--agent-uid", "afr-agent", "--jars", ",".join(fh.JARS), "--group-id", f"grp-{run}",
            "--job-name", f"um-prod-{run}",
        ])
        jobs.append(production)
        fh.wait_running_tasks(production)
        produce_reviews(fh.BOOTSTRAP, src, batch_a)
        fh.wait_topic_count(out, 1, len(batch_a))
        end = fh.end_offsets(cap, 1)

        def spec(variant: str, decision: str) -> ReplayJobSpec:
            return ReplayJobSpec(
                variant=variant, agent_job=JOB, job_identifier=f"{variant}-{run}",
                action_state_topic=f"um-as-{variant}-{run}",
                output_dir=str(tmp / variant / "out"), audit_dir=str(tmp / variant / "audit"),
                kafka_bootstrap=fh.BOOTSTRAP, policy=ReplayPolicy(unmediated=decision), agent_uid="afr-agent",
                capture_topic=cap, start_offsets={0: 0}, end_offsets=end, connector_jars=fh.JARS,
                job_name=f"um-{variant}-{run}",
            )

        specs = {"blocked": spec("blocked", "block"), "recorded": spec("recorded", "record")}
        procs = {
            name: fh.submit_async(fh.REPLAY_JOB, s.to_argv(), conf={"restart-strategy.fixed-delay.attempts": "0"})
            for name, s in specs.items()
        }
        replays = {name: fh.job_id_of(proc) for name, proc in procs.items()}
        jobs += replays.values()
        produce_reviews(fh.BOOTSTRAP, src, batch_b)  # production keeps working while the replays run
        fh.wait_state(replays["blocked"], {"FAILED"}, timeout=180)
        fh.wait_state(replays["recorded"], {"FINISHED"}, timeout=180)
        prod_out = fh.wait_topic_count(out, 1, len(batch_a) + len(batch_b))
        audits = {}
        for name, s in specs.items():
            target = tmp / f"{name}.audit.jsonl"
            collect_jsonl(Path(s.audit_dir), target)
            audits[name] = target
        yield {
            "run": run,
            "seen": list(_Lookups.seen),
            "prod_out": prod_out,
            "exceptions": fh.exception_history(replays["blocked"]),
            "audits": audits,
            "recorded_out": fh.read_outputs(Path(specs["recorded"].output_dir)),
            "ids": {r["id"] for r in batch_a},
            "all_ids": {r["id"] for r in batch_a + batch_b},
            "tmp": tmp,
        }
    finally:
        for jid in jobs:
            fh.cancel(jid)
        fh.delete_topics(src, cap, out, prod_as, f"um-as-blocked-{run}", f"um-as-recorded-{run}")
        server.shutdown()


def _by_ns(drill: dict, ns: str) -> set[str]:
    return {q["id"] for q in drill["seen"] if q.get("ns") == ns}


def test_blocked_lookups_never_leave_and_the_job_fails_naming_the_guard(drill) -> None:
    run = drill["run"]
    assert _by_ns(drill, f"blocked-{run}") == set()
    assert "replay policy blocks an unmediated dns call" in drill["exceptions"]
    records = list(read_audit(drill["audits"]["blocked"]))
    assert records and {(r.resource_type, r.resource_name, r.decision, r.outcome) for r in records} == {
        ("unmediated", "dns", "block", "blocked")}
    assert {r.key for r in records} <= {f"c{run}-{i}" for i in range(3)}


def test_recorded_lookups_happen_and_are_audited_per_key(drill) -> None:
    run = drill["run"]
    assert _by_ns(drill, f"recorded-{run}") == drill["ids"]
    assert {o["id"]: o["looked_up"] for o in drill["recorded_out"]} == {i: f"found {i}" for i in drill["ids"]}
    records = list(read_audit(drill["audits"]["recorded"]))
    kinds = {(r.resource_name, r.method) for r in records if r.resource_type == "unmediated"}
    assert kinds == {("dns", "socket.getaddrinfo"), ("socket", "socket.connect")}
    assert {r.key for r in records} == {f"c{run}-{i}" for i in range(3)}
    assert unmediated_calls(drill["audits"]["recorded"]) == {"dns": 6, "socket": 6}  # what the run record gets


def test_production_on_the_same_taskmanager_is_unaffected(drill) -> None:
    run = drill["run"]
    assert _by_ns(drill, f"prod-{run}") == drill["all_ids"]
    assert {o["id"]: o["looked_up"] for o in drill["prod_out"]} == {i: f"found {i}" for i in drill["all_ids"]}


def test_the_report_lists_the_unmediated_calls(drill) -> None:
    outputs = drill["tmp"] / "recorded.outputs.jsonl"
    outputs.write_text("".join(json.dumps(o) + "\n" for o in drill["recorded_out"]))
    audit = drill["audits"]["recorded"]
    result = compare_runs(outputs, outputs, outputs, key="$.id",
                          audits={"baseline": audit, "baseline_2": audit, "candidate": audit})
    signatures = {s.signature for s in result.resources}
    assert {"unmediated:dns.socket.getaddrinfo", "unmediated:socket.socket.connect"} <= signatures
    assert "unmediated" in render_html(result)

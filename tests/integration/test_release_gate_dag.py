"""The release-gate DAG end to end on the real local stack, under dag.test().

Production = the review agent v1 (Flink Agents on the local Flink, Kafka action-state store on tansu,
Mem0 memories on the Chroma server) with the capture tee. The gate replays the captured window from a
drained savepoint for baseline, baseline-2 and the candidate: v2 must FAIL (labels changed for the
documented late-delivery subset, notify_support called for new keys), v1 must PASS. Afterwards
production runs with its state intact, no replay topic or memory fork remains, and production's Mem0
namespace was not changed by the replays.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.dag_testing import (
    deploy_test_production,
    run_replay_dag,
    running_jobs,
    stop_production,
)

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def production(stack, airflow_db, tmp_path_factory) -> Any:
    prod = deploy_test_production(stack, tmp_path_factory.mktemp("e2e"), "e2e")
    yield prod
    stop_production(stack, prod)


_FEED_START = iter(range(1000, 100_000, 1000))
#: (dag_id, run_id, report.html) of gate runs, for the UI test.
GATE_RUNS: dict[str, tuple[str, str, str]] = {}


def _run_gate(stack, production, candidate: str) -> tuple[Any, dict[str, Any]]:
    return run_replay_dag(stack, production, {"candidate": candidate}, kind="gate", feed_from=next(_FEED_START))


def _production_outputs(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from confluent_kafka import Consumer, TopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = admin.list_topics(timeout=10).topics[topic].partitions
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-{uuid.uuid4()}"})
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out, idle = [], 0
    while idle < 10:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            idle += 1
            continue
        idle = 0
        out.append(json.loads(msg.value()))
    consumer.close()
    return out


def test_gate_fails_v2_and_passes_v1_and_leaves_production_intact(stack, production) -> None:
    from airflow_flink_replay.hooks.mem0 import Mem0Hook
    from airflow_flink_replay.local.demo import V1, V2

    # --- candidate v2: FAIL, for the documented reasons
    dagrun, v2 = _run_gate(stack, production, V2)
    record = v2["record"]
    GATE_RUNS["v2"] = (dagrun.dag_id, dagrun.run_id, str(Path(record["report_dir"]) / "report.html"))
    assert record["verdict"] == "FAIL", (v2["states"], record.get("reasons"))
    assert str(dagrun.state) == "failed"
    assert v2["states"]["compare"] == "failed" and v2["states"]["approve"] == "upstream_failed"
    failing = {f for r in record["reasons"] if r["severity"] == "fail" for f in r["fields"]}
    assert "$.label" in failing, record["reasons"]
    # The new tool calls are a finding (the outputs' tools field, and/or the audit comparison when the
    # window holds enough keys for it to be significant) and the audits show them.
    assert {"$.tools", "tool:notify_support.call"} & failing, record["reasons"]

    def support_calls(variant: dict[str, Any]) -> int:
        lines = Path(variant["audit"]).read_text().splitlines()
        return sum(json.loads(line)["resource_name"] == "notify_support" for line in lines if line.strip())

    baseline, _, candidate = record["variants"]
    assert support_calls(candidate) > support_calls(baseline), record["variants"]
    # the replay task's Flink link follows its job to the web UI's "completed" page once it FINISHED
    from airflow_flink_replay.links.flink import FlinkJobLink

    link = dagrun.get_task_instance("replay_baseline").xcom_pull(task_ids="replay_baseline",
                                                                  key=FlinkJobLink().xcom_key)
    assert link == f"{stack.flink_rest_url}/#/job/completed/{baseline['job_id']}/overview", link
    # production came back, and the downtime was measured
    assert v2["states"]["resume_production"] == "success"
    assert 0 < record["downtime_s"] < 120
    for task in ("delete_replay_topics", "drop_fork_baseline", "drop_fork_baseline_2", "drop_fork_candidate",
                 "verify_production_memory"):
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

    # --- candidate v1 (production's own agent): PASS, the gate approves
    dagrun, v1 = _run_gate(stack, production, V1)
    assert v1["record"]["verdict"] == "PASS", v1["record"]["reasons"]
    assert str(dagrun.state) == "success"
    assert v1["states"]["approve"] == "success" and v1["states"]["run_record"] == "success"

    # --- nothing of the replays is left behind
    topics_after = set(AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=10).topics)
    for rec in (record, v1["record"]):
        assert not any(v["action_state_topic"] in topics_after for v in rec["variants"])
    hook = Mem0Hook(config=stack.mem0_config())
    for rec in (record, v1["record"]):
        for variant in rec["variants"]:
            assert hook.count({"user_id": variant["fork_namespace"]}) == 0, variant["fork_namespace"]

    # --- production: running, state intact (per-customer counters continue, never reset), and its memory
    # holds one memory per review it processed: the replays wrote nothing into it.
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    flink = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    assert [j.state for j in flink.list_jobs().jobs if j.name == production["job_name"] and j.state == "RUNNING"]
    outputs = _production_outputs(stack.kafka_bootstrap, production["topics"].outputs)
    by_customer: dict[str, list[int]] = {}
    for out in outputs:
        by_customer.setdefault(out["customer"], []).append(int(out["count"]))
    for customer, counts in by_customer.items():
        assert counts.count(1) == 1, (customer, sorted(counts))  # a lost state would restart at 1
        assert sorted(set(counts)) == list(range(1, max(counts) + 1)), (customer, sorted(counts))
    rows = hook.list_memories({"user_id": production["identifier"]})
    review_ids = [r.payload.get("review_id") or (r.payload.get("metadata") or {}).get("review_id") for r in rows]
    assert len(review_ids) == len(set(review_ids)) >= 24
    assert set(review_ids) == {o["id"] for o in outputs}


def test_drill_candidate_crashes_in_flink(stack, production, capfd) -> None:
    """The candidate's replay job FAILS: the run fails with Flink's cause, production is resumed, the
    replay's topics and forks are cleaned up."""
    from examples.review_agent.drills import CRASH_MESSAGE

    dagrun, run = _run_gate(stack, production, "examples.review_agent.drills.agent:build_agent")
    states = run["states"]
    assert str(dagrun.state) == "failed"
    assert states["replay_candidate"] == "failed"
    assert states["replay_baseline"] == "success" and states["replay_baseline_2"] == "success"
    assert states["compare"] == "upstream_failed"
    for task in ("resume_production", "cancel_leftover_replays", "delete_replay_topics", "drop_fork_baseline",
                 "drop_fork_baseline_2", "drop_fork_candidate"):
        assert states[task] == "success", (task, states)
    # The task fails with Flink's own cause: the exception the agent raised inside the TaskManager.
    out = capfd.readouterr()
    log = out.out + out.err
    failure = next((line for line in log.splitlines() if "replay candidate (Flink job" in line), "")
    assert "FAILED" in failure and CRASH_MESSAGE in log, log[-3000:]
    topics = set(AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=10).topics)
    assert not any(v["action_state_topic"] in topics for v in run["record"]["variants"])
    _assert_production_running(stack, production)


def test_drill_memory_fork_fails(stack, production, tmp_path) -> None:
    """Mem0 is unreachable while production is stopped: the forks fail, production is still resumed and no
    fork memory exists."""
    from airflow_flink_replay.core.replay_spec import ReplaySpec
    from airflow_flink_replay.hooks.mem0 import Mem0Hook

    spec = ReplaySpec.from_yaml(production["spec_path"])
    broken = json.loads(json.dumps(stack.mem0_config()))
    broken["vector_store"]["config"]["port"] = 1  # nothing listens there
    conns = json.loads(Path(stack.connections_file).read_text())
    conns["mem0_drill_down"] = {"conn_type": "mem0", "extra": json.dumps(broken)}
    conn_file = tmp_path / "connections.json"
    conn_file.write_text(json.dumps(conns))
    spec = spec.model_copy(update={"mem0_conn_id": "mem0_drill_down", "name": f"{spec.name}-forkdrill"})
    dagrun, run = run_replay_dag(stack, production, {"candidate": "examples.review_agent.v2.agent:build_agent"},
                                 spec=spec, conn_file=str(conn_file), feed_from=next(_FEED_START))
    states = run["states"]
    assert str(dagrun.state) == "failed"
    assert states["fork_memory_baseline"] == "failed"  # the others copy the baseline's fork: never started
    assert states["fork_memory_baseline_2"] == states["fork_memory_candidate"] == "upstream_failed"
    assert states["resume_production"] == "success", states
    assert states["capture_window"] == "upstream_failed"
    assert states["replay_candidate"] == "upstream_failed" and states["compare"] == "upstream_failed"
    hook = Mem0Hook(config=stack.mem0_config())
    run_tag = dagrun.get_task_instances()[0].xcom_pull(task_ids="resolve", key="run_tag")
    for variant in ("baseline", "baseline_2", "candidate"):
        assert hook.count({"user_id": spec.fork_namespace(run_tag, variant)}) == 0
    # the run's last check: production RUNS, restored from this run's savepoint; no replay job or topic
    assert states["assert_production"] == "success", states
    checked = dagrun.get_task_instances()[0].xcom_pull(task_ids="assert_production")
    assert checked["production"] == "resumed" and f"/{dagrun.dag_id}/" in checked["savepoint"], checked
    from airflow_flink_replay.core.replay_job_spec import replay_job_name_prefix
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    replay = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.replay_flink_rest_url or stack.flink_rest_url))
    prefix = replay_job_name_prefix(dagrun.dag_id, dagrun.run_id)
    assert not [j.jid for j in replay.list_jobs().jobs if j.name.startswith(prefix) and j.state == "RUNNING"]
    topics = set(AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=10).topics)
    assert not {spec.action_state_topic(run_tag, v) for v in ("baseline", "baseline_2", "candidate")} & topics
    _assert_production_running(stack, production)


def _assert_production_running(stack, production) -> None:
    assert len(running_jobs(stack, production["job_name"])) == 1


def test_ui_shows_the_finished_gate_run_and_its_report(stack, production, tmp_path) -> None:
    """The Airflow UI (api-server on this test's metadata DB) renders the failed gate run's grid and its
    verdict, and the HTML report renders too — each in headless Chromium.

    Chromium is driven over CDP (tests/browser.py): each page is polled in real time until it shows what
    is expected, then screenshotted. (``--virtual-time-budget`` waited for the polling UI to go idle, which
    it may never do: Chromium then hung.)"""
    import os
    import re
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from tests.browser import CHROMIUM, Browser, Dom

    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (make system-deps installs it)")
    if "v2" not in GATE_RUNS:
        pytest.skip("needs the gate run of test_gate_fails_v2_and_passes_v1_and_leaves_production_intact")
    dag_id, run_id, report = GATE_RUNS["v2"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}
    server_log = tmp_path / "api-server.log"
    with open(server_log, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "airflow", "api-server", "--port", str(port), "--host", "127.0.0.1"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=2)
                break
            except OSError:
                tail = server_log.read_text(errors="replace")[-3000:]
                assert server.poll() is None, f"airflow api-server exited with {server.returncode}: {tail}"
                assert time.monotonic() < deadline, f"airflow api-server not healthy within 120s: {tail}"
                time.sleep(1)

        def verdict_row_fails(dom: Dom) -> bool:
            """The XCom table's ``verdict`` row holds FAIL (key and value in the same row)."""
            rows = re.findall(r"<tr\b.*?</tr>", dom.html, re.S)
            return any(">verdict</td>" in row and ">FAIL<" in row for row in rows)

        grid_texts = ("compare", "approve", "resume_production", "Failed", dag_id)
        pages: dict[str, tuple[str, Any, str]] = {
            "grid": (
                f"{base}/dags/{dag_id}/runs/{run_id}",
                lambda d: d.contains(*grid_texts) and all(t in d.text for t in grid_texts),
                f"the run's grid with {list(grid_texts)}",
            ),
            "verdict": (
                f"{base}/dags/{dag_id}/runs/{run_id}/tasks/run_record/xcom",
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
    finally:
        os.killpg(server.pid, 15)
        server.wait(30)

"""Issue 4 acceptance on the real local stack: production job, savepoint, bounded replays, isolation, policy.

Scenario (one production job with the agent uid pinned, then three replays from its savepoint):

1. production v1 (Kafka source on tansu, capture tee, Kafka action-state store, checkpointing, Mem0 under
   namespace ``prod-<run>``) processes batch A; stop-with-savepoint SP1; the capture topic's end offsets
   are the replay START;
2. production resumes from SP1 and processes batch B; its capture end offsets are the replay END;
3. from SP1, over the capture window (= batch B), with a DIFFERENT upstream (bounded capture source + a
   watermark-assigner operator), run concurrently on the same TaskManager:
   - candidate v2, fresh action-state topic, namespace ``cand-<run>`` (memory writes allowed), tools recorded;
   - baseline v1, fresh action-state topic, namespace ``base-<run>``, ``notify_support`` allowed;
   - hazard: candidate v2 pointed at PRODUCTION's action-state topic.

The uid-hash scenario (production without any uid) is in ``test_flink_side_uid_hash.py``.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.audit import read_audit
from airflow_flink_replay.core.policy import ReplayPolicy
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from examples.review_agent.common.generator import generate_reviews, produce_reviews, v2_changes_label
from examples.review_agent.common.tools import ticket_path
from tests.integration import flink_side_helpers as fh

AGENT_UID = "afr-agent"
V1 = "examples.review_agent.v1.agent:build_agent"
RULE = {"review-agent.extra-rules": "Reviews mentioning 'late delivery' are negative."}


def _mem0(collection: str) -> dict[str, Any]:
    return {"vector_store": {"provider": "chroma",
                             "config": {"host": "127.0.0.1", "port": 8000, "collection_name": collection}}}


def _memories(collection: str, namespace: str) -> list[dict[str, Any]]:
    """Memories of ``namespace`` read straight from the Chroma server (ids + metadata)."""
    import chromadb

    client = chromadb.HttpClient(host="127.0.0.1", port=8000)
    col = client.get_collection(collection)
    got = col.get(where={"user_id": namespace}, include=["metadatas"])
    return sorted(({"id": i, **m} for i, m in zip(got["ids"], got["metadatas"], strict=True)), key=lambda r: r["id"])


def production_args(run: str, *, uid: str, collection: str, namespace: str, src: str, out: str, cap: str,
                    action_topic: str, name: str) -> list[str]:
    return [
        "--agent-factory", "examples.review_agent.v1.agent:build_agent", "--bootstrap", fh.BOOTSTRAP,
        "--source-topic", src, "--sink-topic", out, "--capture-topic", cap,
        "--action-state-topic", action_topic, "--job-identifier", namespace, "--agent-uid", uid,
        "--mem0-config", json.dumps(_mem0(collection)), "--jars", ",".join(fh.JARS),
        "--group-id", f"grp-{run}", "--job-name", name,
    ]


@pytest.fixture(scope="module")
def world(stack, tmp_path_factory) -> Any:
    run = uuid.uuid4().hex[:8]
    tmp = tmp_path_factory.mktemp(f"fside-{run}")
    src, cap, out = f"fs-src-{run}", f"fs-cap-{run}", f"fs-out-{run}"
    prod_as, collection, prod_ns = f"fs-as-prod-{run}", f"afr-fs-{run}", f"prod-{run}"
    batch_a = generate_reviews(10, seed=13, customers=4, id_prefix=f"r{run}", customer_prefix=f"c{run}")
    batch_b = generate_reviews(10, seed=13, customers=4, id_prefix=f"r{run}", customer_prefix=f"c{run}",
                               first_index=10)
    fh.create_topics((src, 2), (cap, 2), (out, 1))
    jobs: list[str] = []
    w: dict[str, Any] = {"run": run, "batch_a": batch_a, "batch_b": batch_b, "collection": collection,
                         "prod_ns": prod_ns, "cap": cap, "tmp": tmp}
    args = production_args(run, uid=AGENT_UID, collection=collection, namespace=prod_ns, src=src, out=out,
                           cap=cap, action_topic=prod_as, name=f"fs-prod-{run}")
    t0 = time.time()
    try:
        # 1. production v1 on batch A, stop with savepoint
        p1 = fh.submit(fh.PRODUCTION_JOB, args)
        jobs.append(p1)
        fh.wait_running_tasks(p1)
        produce_reviews(fh.BOOTSTRAP, src, batch_a)
        fh.wait_topic_count(out, 1, len(batch_a))
        sp1 = fh.stop_with_savepoint(p1, fh.STACK["savepoint_dir"])
        start = fh.end_offsets(cap, 2)
        # 2. production resumes and processes batch B (the capture window)
        p2 = fh.submit(fh.PRODUCTION_JOB, args, savepoint=sp1)
        jobs.append(p2)
        fh.wait_running_tasks(p2)
        produce_reviews(fh.BOOTSTRAP, src, batch_b)
        prod_out = fh.wait_topic_count(out, 1, len(batch_a) + len(batch_b))
        fh.stop_with_savepoint(p2, fh.STACK["savepoint_dir"])
        end = fh.end_offsets(cap, 2)
        w.update(sp1=sp1, start=start, end=end, prod_out={o["id"]: o for o in prod_out},
                 prod_memories=_memories(collection, prod_ns), t_production=time.time() - t0)
        # the tickets production wrote for batch B: removed so that `allow` in the baseline must recreate them
        for e in batch_b:
            ticket_path(e["id"]).unlink(missing_ok=True)

        # 3. three replays from SP1 over the capture window, concurrently on the same cluster
        # The hazard window: per partition, the records before the first one production answered with a tool
        # call (flink-agents 0.2.0 crashes replaying a recorded tool call: its tool-call context lives in sensory
        # memory, which the action-state store does not restore).
        capture = fh.read_topic(cap, 2)
        hazard_end = {}
        for p, msgs in capture.items():
            hazard_end[p] = end[p]
            for off in range(start[p], end[p]):
                if w["prod_out"][json.loads(msgs[off].value())["id"]]["tools"]:
                    hazard_end[p] = off
                    break
        w["hazard_end"] = hazard_end

        def spec(variant: str, factory: str, ns: str, action_topic: str, policy: ReplayPolicy,
                 window_end: dict[int, int] = end, **extra: Any) -> ReplayJobSpec:
            return ReplayJobSpec(
                variant=variant, agent_factory=factory, job_identifier=ns, action_state_topic=action_topic,
                output_dir=str(tmp / variant / "out"), audit_dir=str(tmp / variant / "audit"),
                kafka_bootstrap=fh.BOOTSTRAP, capture_topic=cap, start_offsets=start, end_offsets=window_end,
                policy=policy, agent_uid=AGENT_UID, max_parallelism=128, mem0_config=_mem0(collection),
                connector_jars=fh.JARS, job_name=f"fs-{variant}-{run}", **extra,
            )

        specs = {
            "candidate": spec("candidate", "examples.review_agent.v2.agent:build_agent", f"cand-{run}",
                              f"fs-as-cand-{run}", ReplayPolicy(by_name={"review_memory.remember": "allow"},
                                                                stand_ins={"notify_support": "ticket-recorded"})),
            "baseline": spec("baseline", "examples.review_agent.v1.agent:build_agent", f"base-{run}",
                             f"fs-as-base-{run}", ReplayPolicy(by_name={"notify_support": "allow"})),
            # The hazard needs production's exact action identity (module, qualname, action config): the v1 build
            # (same content hash as production's), no resource proxies, and the v2 rule given through agent
            # config instead of code. The control: the same rule with a fresh action-state topic.
            "hazard": spec("hazard", V1, f"haz-{run}", prod_as, ReplayPolicy(), hazard_end, mediate_resources=False,
                           agent_config=RULE),
            "hazard_control": spec("hazard_control", V1, f"hazc-{run}", f"fs-as-hazc-{run}", ReplayPolicy(),
                                   hazard_end, agent_config=RULE),
        }
        t1 = time.time()
        procs = {n: fh.submit_async(fh.REPLAY_JOB, s.to_argv(), savepoint=sp1, allow_non_restored=True)
                 for n, s in specs.items()}
        replay_jobs = {}
        for name, proc in procs.items():
            replay_jobs[name] = fh.job_id_of(proc)
            jobs.append(replay_jobs[name])
        for jid in replay_jobs.values():
            fh.wait_state(jid, {"FINISHED"}, timeout=180)  # bounded: finishes by itself at the end offsets
        w["t_replays"] = time.time() - t1
        w["outputs"] = {n: fh.read_outputs(Path(s.output_dir)) for n, s in specs.items()}
        w["audits"] = {n: list(read_audit(s.audit_dir)) if Path(s.audit_dir).exists() else [] for n, s in
                       specs.items()}
        w["memories_after"] = {ns: _memories(collection, ns) for ns in (prod_ns, f"cand-{run}", f"base-{run}")}
        w["capture"] = capture
        yield w
    finally:
        for jid in jobs:
            fh.cancel(jid)
        fh.delete_topics(src, cap, out, prod_as, f"fs-as-cand-{run}", f"fs-as-base-{run}", f"fs-as-hazc-{run}")
        for e in batch_a + batch_b:
            ticket_path(e["id"]).unlink(missing_ok=True)
        try:
            import chromadb

            chromadb.HttpClient(host="127.0.0.1", port=8000).delete_collection(collection)
        except Exception:
            pass


def _by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in rows}


def _strip(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "_replay"}


def test_production_processes_and_captures(world) -> None:
    a, b = world["batch_a"], world["batch_b"]
    assert set(world["prod_out"]) == {e["id"] for e in a + b}
    assert sum(world["start"].values()) == len(a), "capture holds exactly batch A at the savepoint"
    assert sum(world["end"].values()) == len(a) + len(b)
    # capture records: key = customer, timestamp = event time, payload as the agent got it, provenance headers
    msgs = [m for ms in world["capture"].values() for m in ms]
    by_id = {json.loads(m.value())["id"]: m for m in msgs}
    for e in a + b:
        m = by_id[e["id"]]
        assert m.key().decode() == e["customer"]
        assert m.timestamp()[1] == e["ts"]
        assert dict(m.headers())["afr-job"].decode() == world["prod_ns"]


def test_replay_restores_agent_state_with_shared_uid_and_finishes_at_end_offsets(world) -> None:
    b_ids = {e["id"] for e in world["batch_b"]}
    for variant in ("candidate", "baseline"):
        out = _by_id(world["outputs"][variant])
        # exactly the records between start and end, per capture partition
        assert set(out) == b_ids, variant
        for p, msgs in world["capture"].items():
            window = msgs[world["start"][p]: world["end"][p]]
            ids = {json.loads(m.value())["id"] for m in window}
            assert len(ids) == world["end"][p] - world["start"][p]
            assert {i for i in out if i in ids} == ids, f"{variant} partition {p}"
        # the per-key count continues from the savepoint: same as production's own run over batch B
        for i, row in out.items():
            assert row["count"] == world["prod_out"][i]["count"], (variant, i)
            assert row["_replay"]["variant"] == variant
        assert max(r["count"] for r in out.values()) > 1


def test_candidate_v2_with_fresh_action_state_topic_gives_v2_answers(world) -> None:
    subset = [e for e in world["batch_b"] if v2_changes_label(e)]
    assert subset, "batch B must contain late-delivery reviews"
    cand, base = _by_id(world["outputs"]["candidate"]), _by_id(world["outputs"]["baseline"])
    for e in world["batch_b"]:
        if v2_changes_label(e):
            assert base[e["id"]]["label"] == "neutral"
            assert cand[e["id"]]["label"] == "negative"
            assert "notify_support" in cand[e["id"]]["tools"]
        else:
            assert cand[e["id"]]["label"] == base[e["id"]]["label"], e["id"]


def test_production_action_state_topic_returns_recorded_answers(world) -> None:
    """The hazard: a changed prompt pointed at production's action-state topic replays production's answers."""
    hazard = _by_id(world["outputs"]["hazard"])
    control = _by_id(world["outputs"]["hazard_control"])
    window = {json.loads(m.value())["id"] for p, ms in world["capture"].items()
              for m in ms[world["start"][p]: world["hazard_end"][p]]}
    assert set(hazard) == set(control) == window
    subset = [e["id"] for e in world["batch_b"] if v2_changes_label(e) and e["id"] in window]
    assert subset, "the hazard window must hold a late-delivery review (generator seed)"
    for i in subset:
        assert control[i]["label"] == "negative", "with a fresh topic the changed prompt takes effect"
        assert hazard[i]["label"] == "neutral", "with production's topic: production's recorded v1 answer"
    for i, row in hazard.items():
        assert _strip(row) == world["prod_out"][i], i


def test_memory_namespaces_are_isolated(world) -> None:
    run, b = world["run"], world["batch_b"]
    after = world["memories_after"]
    assert after[world["prod_ns"]] == world["prod_memories"], "production's memories unchanged by replays"
    assert len(world["prod_memories"]) == len(world["batch_a"]) + len(b)
    cand = after[f"cand-{run}"]
    assert sorted(m["review_id"] for m in cand) == sorted(e["id"] for e in b), "candidate wrote only its namespace"
    assert after[f"base-{run}"] == [], "recorded memory writes did not happen"
    # the memory matters: with an empty fork, earlier complaints are unknown and the outputs differ
    base, prod = _by_id(world["outputs"]["baseline"]), world["prod_out"]
    assert any(prod[i]["prior_complaints"] > base[i]["prior_complaints"] for i in base)


def test_policy_record_does_not_execute_and_allow_executes(world) -> None:
    cand_audit = [r for r in world["audits"]["candidate"] if r.resource_name == "notify_support"]
    negative_b = [e for e in world["batch_b"] if world["prod_out"][e["id"]]["label"] == "negative"]
    subset = [e for e in world["batch_b"] if v2_changes_label(e)]
    assert {r.decision for r in cand_audit} == {"record"} and {r.outcome for r in cand_audit} == {"recorded"}
    recorded_ids = {json.loads(r.args_preview)["kwargs"]["review_id"] for r in cand_audit}
    assert recorded_ids == {e["id"] for e in negative_b + subset}
    for r in cand_audit:
        assert r.key and r.key.startswith("c"), "audit names the agent key"
    for e in subset:
        assert not ticket_path(e["id"]).exists(), "record: the tool's side effect did not happen"
    base_audit = [r for r in world["audits"]["baseline"] if r.resource_name == "notify_support"]
    assert base_audit and {r.outcome for r in base_audit} == {"ok"}
    for e in negative_b:
        assert ticket_path(e["id"]).exists(), "allow: the baseline executed notify_support"
    mem = [r for r in world["audits"]["baseline"] if r.resource_name == "review_memory"]
    assert {(r.method, r.decision) for r in mem} == {("recall", "allow"), ("remember", "record")}

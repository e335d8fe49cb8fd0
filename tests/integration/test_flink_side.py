"""Issue 4 acceptance on the real local stack: production job, savepoint, bounded replays, isolation, policy.

Scenario (one production job with the agent uid pinned, then replays from its savepoint):

1. production v1 (Kafka source on tansu, event time from ``$.ts`` with a 1 h out-of-orderness bound and
   30 s idleness, capture tee, Kafka action-state store, checkpointing, Mem0 under namespace ``prod-<run>``)
   processes batch A; stop-with-savepoint SP1; the capture topic's end offsets are the replay START;
2. production resumes from SP1 and processes batch B; its capture end offsets are the replay END; a sealed
   manifest records that window with production's event time and watermark strategy;
3. from SP1, over the capture window (= batch B), with a DIFFERENT upstream (bounded capture source + a
   timestamp/watermark operator):
   - first, concurrently: baseline v1 (built from the manifest, fresh action-state topic, namespace
     ``base-<run>``, ``notify_support`` allowed); the hazard (v1 + a prompt rule through config, pointed at
     PRODUCTION's action-state topic) and its control (same, fresh topic); ``blocked`` (``notify_support``
     blocked: the job fails naming the tool);
   - then, after the baseline FINISHED, on the same TaskManager: candidate v2 (built from the manifest, fresh
     topic, namespace ``cand-<run>``, memory writes allowed, tools recorded).
   Baseline and candidate are two builds of ONE package name (``afrsame_<run>``: v1's files, then v2's), so a
   candidate that picked up the baseline's module from the TaskManager's shared interpreter would answer v1.

The uid-hash scenario (production without any uid) and the max-parallelism pin are in
``test_flink_side_uid_hash.py``; the replay's watermark operator is driven in ``test_flink_side_timing.py``.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.audit import read_audit
from airflow_flink_replay.core.manifest import ReplayManifest
from airflow_flink_replay.core.manifest_io import save_manifest
from airflow_flink_replay.core.policy import ReplayPolicy
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from examples.review_agent.common.generator import generate_reviews, produce_reviews, v2_changes_label
from examples.review_agent.common.tools import ticket_path
from tests.integration import flink_side_helpers as fh

AGENT_UID = "afr-agent"
V1 = "examples.review_agent.v1.agent:build_agent"
RULE = {"review-agent.extra-rules": "Reviews mentioning 'late delivery' are negative."}


#: Production's event time and watermark strategy (recorded in the manifest; the replays take them from there).
OUT_OF_ORDERNESS_MS = 3_600_000
IDLENESS_MS = 30_000
MIN_WATERMARK = -(2**63)
ROOT = Path(__file__).resolve().parents[2]


def _memories(collection: str, namespace: str) -> list[dict[str, Any]]:
    """Memories of ``namespace`` read straight from the Chroma server (ids + metadata)."""
    import chromadb

    host, port = fh.chroma()
    client = chromadb.HttpClient(host=host, port=port)
    col = client.get_collection(collection)
    got = col.get(where={"user_id": namespace}, include=["metadatas"])
    return sorted(({"id": i, **m} for i, m in zip(got["ids"], got["metadatas"], strict=True)), key=lambda r: r["id"])


def delete_collection(collection: str) -> None:
    try:
        import chromadb

        host, port = fh.chroma()
        chromadb.HttpClient(host=host, port=port).delete_collection(collection)
    except Exception:
        pass


def same_name_build(root: Path, package: str, version: str) -> Path:
    """``root/<package>/`` = the files of ``examples/review_agent/<version>`` (another build of one package name)."""
    shutil.copytree(
        ROOT / "examples" / "review_agent" / version,
        root / package,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    return root


def write_manifest(
    path: Path,
    *,
    run: str,
    job_id: str,
    job_name: str,
    savepoint: str,
    agent_vertex: str,
    topic: str,
    start: dict[int, int],
    end: dict[int, int],
    capture: dict[int, list[Any]],
) -> str:
    """Seal the window [start, end) of the capture topic with production's event time and watermarks."""
    partitions = []
    for p in sorted(start):
        msgs = capture[p][start[p] : end[p]]
        partitions.append(
            {
                "partition": p,
                "start_offset": start[p],
                "end_offset": end[p],
                "record_count": len(msgs),
                **(
                    {"first_timestamp_ms": msgs[0].timestamp()[1], "last_timestamp_ms": msgs[-1].timestamp()[1]}
                    if msgs
                    else {}
                ),
            }
        )
    manifest = ReplayManifest.model_validate(
        {
            "run_id": f"fs-{run}",
            "production": {
                "job_id": job_id,
                "job_name": job_name,
                "savepoint": {"path": savepoint, "quiesce_mode": "stop"},
                "agent": {"vertex_id": agent_vertex, "uid": AGENT_UID, "parallelism": 1, "max_parallelism": 128},
            },
            "capture": {
                "kafka_conn_id": "kafka_default",
                "bootstrap_servers": fh.BOOTSTRAP,
                "topic": topic,
                "partitions": partitions,
                "event_time": {"source": "field", "field": "$.ts"},
                "watermark": {"max_out_of_orderness_ms": OUT_OF_ORDERNESS_MS, "idleness_ms": IDLENESS_MS},
            },
        }
    )
    save_manifest(manifest, path)
    return path.as_uri()


@pytest.fixture(scope="module")
def world(stack, tmp_path_factory) -> Any:
    run = uuid.uuid4().hex[:8]
    tmp = tmp_path_factory.mktemp(f"fside-{run}")
    src, cap, out = f"fs-src-{run}", f"fs-cap-{run}", f"fs-out-{run}"
    prod_as, collection, prod_ns = f"fs-as-prod-{run}", f"afr-fs-{run}", f"prod-{run}"
    batch_a = generate_reviews(10, seed=13, customers=4, id_prefix=f"r{run}", customer_prefix=f"c{run}")
    batch_b = generate_reviews(10, seed=13, customers=4, id_prefix=f"r{run}", customer_prefix=f"c{run}", first_index=10)
    fh.create_topics((src, 2), (cap, 2), (out, 1))
    jobs: list[str] = []
    w: dict[str, Any] = {
        "run": run,
        "batch_a": batch_a,
        "batch_b": batch_b,
        "collection": collection,
        "prod_ns": prod_ns,
        "cap": cap,
        "src": src,
        "tmp": tmp,
    }
    timing = [
        "--event-time-field",
        "$.ts",
        "--watermark",
        f"bounded:{OUT_OF_ORDERNESS_MS}",
        "--idleness-ms",
        str(IDLENESS_MS),
    ]
    args = fh.production_args(
        run,
        uid=AGENT_UID,
        collection=collection,
        namespace=prod_ns,
        src=src,
        out=out,
        cap=cap,
        action_topic=prod_as,
        name=f"fs-prod-{run}",
        extra=timing,
    )
    t0 = time.time()
    try:
        # 1. production v1 on batch A, stop with savepoint
        p1 = fh.submit(fh.PRODUCTION_JOB, args)
        jobs.append(p1)
        fh.wait_running_tasks(p1)
        w["produced_from_ms"] = int(time.time() * 1000)
        produce_reviews(fh.BOOTSTRAP, src, batch_a)
        fh.wait_topic_count(out, 1, len(batch_a))
        sp1 = fh.stop_with_savepoint(p1, fh.savepoint_dir(run))
        start = fh.end_offsets(cap, 2)
        # 2. production resumes and processes batch B (the capture window)
        p2 = fh.submit(fh.PRODUCTION_JOB, args, savepoint=sp1)
        jobs.append(p2)
        fh.wait_running_tasks(p2)
        produce_reviews(fh.BOOTSTRAP, src, batch_b)
        prod_out = fh.wait_topic_count(out, 1, len(batch_a) + len(batch_b))
        fh.stop_with_savepoint(p2, fh.savepoint_dir(run))
        end = fh.end_offsets(cap, 2)
        capture = fh.read_topic(cap, 2)
        w["read_capture_at_ms"] = int(time.time() * 1000)
        w.update(
            sp1=sp1,
            start=start,
            end=end,
            prod_out={o["id"]: o for o in prod_out},
            capture=capture,
            prod_memories=_memories(collection, prod_ns),
            t_production=time.time() - t0,
        )
        manifest = write_manifest(
            tmp / "manifest.json",
            run=run,
            job_id=p1,
            job_name=f"fs-prod-{run}",
            savepoint=sp1,
            agent_vertex=fh.agent_vertex_id(p1),
            topic=cap,
            start=start,
            end=end,
            capture=capture,
        )
        w["manifest"] = manifest
        # the tickets production wrote for batch B: removed so that `allow` in the baseline must recreate them
        for e in batch_b:
            ticket_path(e["id"]).unlink(missing_ok=True)

        # 3. replays from SP1 over the capture window
        # The hazard window: per partition, the records before the first one production answered with a tool
        # call (flink-agents 0.2.0 crashes replaying a recorded tool call: its tool-call context lives in sensory
        # memory, which the action-state store does not restore).
        hazard_end = {}
        for p, msgs in capture.items():
            hazard_end[p] = end[p]
            for off in range(start[p], end[p]):
                if w["prod_out"][json.loads(msgs[off].value())["id"]]["tools"]:
                    hazard_end[p] = off
                    break
        w["hazard_end"] = hazard_end

        def spec(
            variant: str,
            factory: str,
            ns: str,
            action_topic: str,
            policy: ReplayPolicy,
            window_end: dict[int, int] | None = None,
            **extra: Any,
        ) -> ReplayJobSpec:
            window: dict[str, Any] = (
                {"manifest": manifest}
                if window_end is None
                else {"capture_topic": cap, "start_offsets": start, "end_offsets": window_end}
            )
            return ReplayJobSpec(
                variant=variant,
                agent_factory=factory,
                job_identifier=ns,
                action_state_topic=action_topic,
                output_dir=str(tmp / variant / "out"),
                audit_dir=str(tmp / variant / "audit"),
                kafka_bootstrap=fh.BOOTSTRAP,
                policy=policy,
                agent_uid=AGENT_UID,
                max_parallelism=128,
                mem0_config=fh.mem0_config(collection),
                connector_jars=fh.JARS,
                job_name=f"fs-{variant}-{run}",
                **window,
                **extra,
            )

        # baseline and candidate: two builds of ONE package name (v1's files, then v2's)
        same = f"afrsame_{run}"
        w["same_package"] = same
        paths = {
            "baseline": same_name_build(tmp / "build-v1", same, "v1"),
            "candidate": same_name_build(tmp / "build-v2", same, "v2"),
        }
        specs = {
            "baseline": spec(
                "baseline",
                f"{same}.agent:build_agent",
                f"base-{run}",
                f"fs-as-base-{run}",
                ReplayPolicy(by_name={"notify_support": "allow"}),
            ),
            "candidate": spec(
                "candidate",
                f"{same}.agent:build_agent",
                f"cand-{run}",
                f"fs-as-cand-{run}",
                ReplayPolicy(
                    by_name={"review_memory.remember": "allow"}, stand_ins={"notify_support": "ticket-recorded"}
                ),
            ),
            # The hazard needs production's exact action identity (module, qualname, action config): the v1 build
            # (same content hash as production's), no resource proxies, and the v2 rule given through agent
            # config instead of code. The control: the same rule with a fresh action-state topic.
            "hazard": spec(
                "hazard",
                V1,
                f"haz-{run}",
                prod_as,
                ReplayPolicy(),
                hazard_end,
                mediate_resources=False,
                agent_config=RULE,
            ),
            "hazard_control": spec(
                "hazard_control", V1, f"hazc-{run}", f"fs-as-hazc-{run}", ReplayPolicy(), hazard_end, agent_config=RULE
            ),
            "blocked": spec(
                "blocked", V1, f"blk-{run}", f"fs-as-blk-{run}", ReplayPolicy(by_name={"notify_support": "block"}), end
            ),
        }
        # the candidate's manifest lives where only this process can read it (fsspec's in-memory filesystem):
        # its submission carries the manifest, so the job reads no file of the submitting side
        private = f"memory://fs-{run}/manifest.json"
        save_manifest(ReplayManifest.parse(Path(manifest.removeprefix("file://")).read_text()), private)
        specs["candidate"] = specs["candidate"].model_copy(update={"manifest": private}).with_manifest_carried()
        w["candidate_manifest"] = private
        t1 = time.time()

        def submit(name: str) -> Any:
            # `blocked` fails on every attempt; one restart (not the stack's three) absorbs a transient failure
            # (e.g. tansu timing out the action-state topic creation while four jobs start)
            conf = {"restart-strategy.fixed-delay.attempts": "1"} if name == "blocked" else None
            return fh.submit_async(
                fh.REPLAY_JOB,
                specs[name].to_argv(),
                savepoint=sp1,
                allow_non_restored=True,
                pythonpath=[str(paths[name])] if name in paths else None,
                conf=conf,
            )

        first = ("baseline", "hazard", "hazard_control", "blocked")
        procs = {n: submit(n) for n in first}
        replay_jobs = {}
        for name, proc in procs.items():
            replay_jobs[name] = fh.job_id_of(proc)
            jobs.append(replay_jobs[name])
        fh.wait_state(replay_jobs["baseline"], {"FINISHED"}, timeout=180)  # bounded: finishes at the end offsets
        t2 = time.time()
        replay_jobs["candidate"] = fh.job_id_of(submit("candidate"))  # after the baseline, same TaskManager
        jobs.append(replay_jobs["candidate"])
        fh.wait_state(replay_jobs["blocked"], {"FAILED"}, timeout=180)
        for name, jid in replay_jobs.items():
            if name != "blocked":
                fh.wait_state(jid, {"FINISHED"}, timeout=180)
        w["t_replays"] = time.time() - t1
        w["t_candidate"] = time.time() - t2
        w["replay_jobs"] = replay_jobs
        w["specs"] = specs
        w["job_info"] = {n: fh.job_info(j) for n, j in replay_jobs.items()}
        w["taskmanagers"] = {n: fh.taskmanager_ids(replay_jobs[n]) for n in ("baseline", "candidate")}
        w["blocked_exceptions"] = fh.exception_history(replay_jobs["blocked"])
        w["outputs"] = {n: fh.read_outputs(Path(s.output_dir)) for n, s in specs.items()}
        w["audits"] = {n: list(read_audit(s.audit_dir)) if Path(s.audit_dir).exists() else [] for n, s in specs.items()}
        w["memories_after"] = {ns: _memories(collection, ns) for ns in (prod_ns, f"cand-{run}", f"base-{run}")}
        print(
            f"timings: production {w['t_production']:.0f}s, replays {w['t_replays']:.0f}s "
            f"(of which the candidate after the baseline {w['t_candidate']:.0f}s)"
        )
        yield w
    finally:
        for jid in jobs:
            fh.cancel(jid)
        fh.delete_topics(
            src, cap, out, prod_as, f"fs-as-cand-{run}", f"fs-as-base-{run}", f"fs-as-hazc-{run}", f"fs-as-blk-{run}"
        )
        for e in batch_a + batch_b:
            ticket_path(e["id"]).unlink(missing_ok=True)
        delete_collection(collection)
        fh.remove_savepoint_dir(run)


def _by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in rows}


def _strip(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "_replay"}


def _window_ids(world: dict[str, Any], end: dict[int, int] | None = None) -> dict[int, list[str]]:
    """Per capture partition, the review ids in [start, end) in offset order."""
    end = end or world["end"]
    return {
        p: [json.loads(m.value())["id"] for m in msgs[world["start"][p] : end[p]]]
        for p, msgs in world["capture"].items()
    }


def test_production_processes_and_captures(world) -> None:
    a, b = world["batch_a"], world["batch_b"]
    assert set(world["prod_out"]) == {e["id"] for e in a + b}
    assert sum(world["start"].values()) == len(a), "capture holds exactly batch A at the savepoint"
    assert sum(world["end"].values()) == len(a) + len(b)
    # capture records: key = customer, timestamp = event time, payload = the bytes production received, headers
    msgs = [m for ms in world["capture"].values() for m in ms]
    assert len(msgs) == len(a) + len(b), "each record captured once"
    by_id = {json.loads(m.value())["id"]: m for m in msgs}
    for e in a + b:
        m = by_id[e["id"]]
        assert m.key().decode() == e["customer"]
        assert m.timestamp()[1] == e["ts"]
        # the generator writes json.dumps(e, sort_keys=True): the capture holds exactly those bytes
        assert m.value() == json.dumps(e, sort_keys=True).encode(), "payload = the produced bytes, unchanged"
        headers = {k: v.decode() for k, v in m.headers()}
        assert headers["afr-job"] == world["prod_ns"]
        assert headers["afr-source-topic"] == world["src"]
        assert world["produced_from_ms"] <= int(headers["afr-captured-at"]) <= world["read_capture_at_ms"]


def test_replay_restores_agent_state_with_shared_uid_and_finishes_at_end_offsets(world) -> None:
    b_ids = {e["id"] for e in world["batch_b"]}
    window = _window_ids(world)
    expected = sum(world["end"][p] - world["start"][p] for p in world["start"])
    assert expected == len(b_ids) == sum(len(ids) for ids in window.values())
    for variant in ("candidate", "baseline"):
        rows = world["outputs"][variant]
        # exactly the records between start and end: no more, no fewer, no duplicates, per capture partition
        assert len(rows) == expected, (variant, Counter(r["id"] for r in rows))
        counts = Counter(r["id"] for r in rows)
        assert set(counts) == b_ids and set(counts.values()) == {1}, variant
        for p, ids in window.items():
            assert sum(counts[i] for i in ids) == world["end"][p] - world["start"][p], f"{variant} partition {p}"
        # the per-key count continues from the savepoint: same as production's own run over batch B
        for row in rows:
            assert row["count"] == world["prod_out"][row["id"]]["count"], (variant, row["id"])
            assert row["_replay"]["variant"] == variant
        assert max(r["count"] for r in rows) > 1


def test_replays_built_from_the_manifest_use_productions_event_time_and_watermarks(world) -> None:
    """The manifest says: event time = $.ts, 1 h out-of-orderness. Every output carries its review's event time
    and a watermark that, if any arrived before it, is some event time minus 1 h minus 1 ms (a monotonous
    strategy would give event time - 1 ms)."""
    ts = {e["id"]: e["ts"] for e in world["batch_b"]}
    allowed = {MIN_WATERMARK} | {t - OUT_OF_ORDERNESS_MS - 1 for t in ts.values()}
    for variant in ("candidate", "baseline"):
        for row in world["outputs"][variant]:
            assert row["_replay"]["event_time_ms"] == ts[row["id"]], (variant, row["_replay"])
            assert row["_replay"]["watermark_ms"] in allowed, (variant, row["_replay"])
    # the manifest's strategy is production's, as the replays read it (digest verified in the job)
    from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec as Spec

    timing = Spec(
        variant="x",
        agent_factory=V1,
        job_identifier="x",
        action_state_topic="x",
        output_dir="x",
        audit_dir="x",
        kafka_bootstrap="x",
        manifest=world["manifest"],
    ).timing()
    assert (timing.event_time.field, timing.watermark, timing.idleness_ms) == (
        "$.ts",
        f"bounded:{OUT_OF_ORDERNESS_MS}",
        IDLENESS_MS,
    )


def test_baseline_then_candidate_on_one_taskmanager_with_one_package_name(world) -> None:
    """Two builds of the same package name, one after the other on the same TaskManager: each answers with its
    own version (the candidate did not pick up the baseline's module from the shared interpreter)."""
    info = world["job_info"]
    assert info["baseline"]["end-time"] <= info["candidate"]["start-time"], "sequential, not concurrent"
    tms = world["taskmanagers"]
    assert len(tms["baseline"]) == 1 and tms["baseline"] == tms["candidate"], tms
    base, cand = _by_id(world["outputs"]["baseline"]), _by_id(world["outputs"]["candidate"])
    changed = [e["id"] for e in world["batch_b"] if v2_changes_label(e)]
    assert changed
    assert {base[i]["label"] for i in changed} == {"neutral"}, "baseline ran v1's prompt"
    assert {cand[i]["label"] for i in changed} == {"negative"}, "candidate ran v2's prompt, not the baseline's"


def test_candidate_v2_with_fresh_action_state_topic_gives_v2_answers(world) -> None:
    """The candidate's manifest was only in the test process's memory (``memory://``): the job read the window
    and production's timing from the manifest its submission carried."""
    assert world["candidate_manifest"].startswith("memory://")
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
    window = {
        json.loads(m.value())["id"]
        for p, ms in world["capture"].items()
        for m in ms[world["start"][p] : world["hazard_end"][p]]
    }
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
    # the memory matters: with an empty fork, earlier complaints are unknown and the DECISIONS differ
    base, prod = _by_id(world["outputs"]["baseline"]), world["prod_out"]
    reviews = {e["id"]: e for e in b}
    assert {r["prior_complaints"] for r in base.values()} == {0}, "the empty fork knows no earlier complaints"
    with_history = [i for i in base if prod[i]["prior_complaints"] > 0]
    assert with_history, "batch B must hold reviews of customers with earlier complaints (generator seed)"
    # score = (rating-1)/4 - 0.1 x complaints (>= 0); severity high for negatives with >= 2 complaints: the
    # decision changes unless a 1-star review with a single complaint is already at score 0
    decisive = [i for i in with_history if reviews[i]["rating"] > 1 or prod[i]["prior_complaints"] >= 2]
    assert decisive
    for i in decisive:
        assert (prod[i]["score"], prod[i]["severity"]) != (base[i]["score"], base[i]["severity"]), i
        assert prod[i]["score"] <= base[i]["score"], i
    assert any(prod[i]["score"] < base[i]["score"] for i in decisive)


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


def test_policy_block_fails_the_flink_job_naming_the_tool(world) -> None:
    assert world["job_info"]["blocked"]["state"] == "FAILED"
    history = world["blocked_exceptions"]  # Flink's exception history of the job
    assert "replay policy blocks tool 'notify_support'" in history, history[-3000:]
    blocked = [r for r in world["audits"]["blocked"] if r.resource_name == "notify_support"]
    assert blocked and {(r.decision, r.outcome) for r in blocked} == {("block", "blocked")}
    negative_b = {e["id"] for e in world["batch_b"] if world["prod_out"][e["id"]]["label"] == "negative"}
    assert {json.loads(r.args_preview)["kwargs"]["review_id"] for r in blocked} <= negative_b


def test_variants_planned_together_are_the_graphs_each_replay_program_plans(stack, world) -> None:
    """The identity preflight plans every variant in ONE job-side run (``flink/replay_plans.py``): each job graph
    it sends back is the graph the JobManager plans for that variant's own replay program (same vertex ids,
    chains and edges), and a variant whose agent cannot be imported comes back with its Python error while the
    others are still planned."""
    from airflow_flink_replay.core.flink_models import FlinkPythonProgram
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.hooks.flink_submit import get_submitter
    from airflow_flink_replay.operators.replay import REPLAY_JOB_MODULE, REPLAY_PLANS_MODULE

    def graph(plan: dict[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
        return sorted((n["id"], n["description"], tuple(sorted(i["id"] for i in n.get("inputs", []))))
                      for n in plan["nodes"])  # fmt: skip

    specs = [world["specs"][name] for name in ("hazard_control", "blocked")]
    broken = specs[0].model_copy(update={"variant": "broken", "agent_factory": "afr_no_such_module.agent:build"})
    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url, flink_home=stack.flink_home))
    submitter = get_submitter("rest", hook)  # flink_home: uploads the flink-python jar when this runs first
    args = [arg for spec in (*specs, broken) for arg in ("--spec-json", spec.model_dump_json())]
    together = submitter.plan_replays(FlinkPythonProgram(module=REPLAY_PLANS_MODULE, program_args=args))
    assert [p.variant for p in together] == ["hazard_control", "blocked", "broken"]
    for spec, planned in zip(specs, together, strict=False):
        assert planned.error is None and planned.plan, planned.error
        alone = submitter.plan(FlinkPythonProgram(module=REPLAY_JOB_MODULE, program_args=spec.to_argv()))
        assert graph(planned.plan) == graph(alone.model_dump(mode="json", by_alias=True)), spec.variant
        assert any("action-execute-operator" in n["description"] for n in planned.plan["nodes"])
    assert together[2].plan is None and "afr_no_such_module" in (together[2].error or ""), together[2]
    assert "Traceback" in (together[2].error or "") and "not importable" in (together[2].error or "")

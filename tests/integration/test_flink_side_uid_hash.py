"""Issue 4 acceptance: a production job that never had an agent uid is still replayable with its state.

Production v1 runs with NO uid on the agent operator (auto, topology-derived id). The replay has a different
upstream (bounded capture source + a watermark-assigner operator), so the agent's auto id changes:

- pinned with ``setUidHash(<production's agent vertex id>)`` the per-key count continues from the savepoint;
- without the pin (same job, ``-n``) the agent state is silently dropped and the count restarts at 1 —
  the pipeline builder's pin is what saves the state.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from examples.review_agent.common.generator import generate_reviews, produce_reviews
from examples.review_agent.common.tools import ticket_path
from tests.integration import flink_side_helpers as fh
from tests.integration.test_flink_side import V1, _mem0, production_args


@pytest.fixture(scope="module")
def uidless(stack, tmp_path_factory) -> Any:
    run = uuid.uuid4().hex[:8]
    tmp = tmp_path_factory.mktemp(f"fside-uh-{run}")
    src, cap, out, prod_as = f"uh-src-{run}", f"uh-cap-{run}", f"uh-out-{run}", f"uh-as-prod-{run}"
    collection = f"afr-uh-{run}"
    events = generate_reviews(6, seed=5, customers=3, id_prefix=f"u{run}", customer_prefix=f"k{run}")
    fh.create_topics((src, 1), (cap, 1), (out, 1))
    jobs: list[str] = []
    try:
        args = production_args(run, uid="", collection=collection, namespace=f"prod-{run}", src=src, out=out,
                               cap=cap, action_topic=prod_as, name=f"uh-prod-{run}")
        prod = fh.submit(fh.PRODUCTION_JOB, args)
        jobs.append(prod)
        fh.wait_running_tasks(prod)
        vertex = fh.agent_vertex_id(prod)  # production's auto-generated agent vertex id
        produce_reviews(fh.BOOTSTRAP, src, events)
        prod_out = fh.wait_topic_count(out, 1, len(events))
        sp = fh.stop_with_savepoint(prod, fh.STACK["savepoint_dir"])
        end = fh.end_offsets(cap, 1)

        def spec(variant: str, **pin: Any) -> ReplayJobSpec:
            return ReplayJobSpec(
                variant=variant, agent_factory=V1, job_identifier=f"{variant}-{run}",
                action_state_topic=f"uh-as-{variant}-{run}", output_dir=str(tmp / variant / "out"),
                audit_dir=str(tmp / variant / "audit"), kafka_bootstrap=fh.BOOTSTRAP, capture_topic=cap,
                start_offsets={0: 0}, end_offsets=end, mem0_config=_mem0(collection), connector_jars=fh.JARS,
                job_name=f"uh-{variant}-{run}", **pin,
            )

        specs = {"pinned": spec("pinned", agent_uid_hash=vertex), "unpinned": spec("unpinned")}
        procs = {n: fh.submit_async(fh.REPLAY_JOB, s.to_argv(), savepoint=sp, allow_non_restored=True)
                 for n, s in specs.items()}
        ids = {}
        for n, p in procs.items():
            ids[n] = fh.job_id_of(p)
            jobs.append(ids[n])
        for jid in ids.values():
            fh.wait_state(jid, {"FINISHED"}, timeout=180)
        yield {
            "events": events, "prod_out": prod_out, "vertex": vertex,
            "outputs": {n: fh.read_outputs(Path(s.output_dir)) for n, s in specs.items()},
        }
    finally:
        for jid in jobs:
            fh.cancel(jid)
        fh.delete_topics(src, cap, out, prod_as, f"uh-as-pinned-{run}", f"uh-as-unpinned-{run}")
        for e in events:
            ticket_path(e["id"]).unlink(missing_ok=True)
        try:
            import chromadb

            chromadb.HttpClient(host="127.0.0.1", port=8000).delete_collection(collection)
        except Exception:
            pass


def test_uid_hash_restores_state_of_a_uidless_production_job(uidless) -> None:
    assert len(uidless["vertex"]) == 32
    final = Counter(o["customer"] for o in uidless["prod_out"])  # production's count per key at the savepoint
    pinned = {o["id"]: o for o in uidless["outputs"]["pinned"]}
    seen: Counter[str] = Counter()
    for e in uidless["events"]:  # replay order per key = capture order
        seen[e["customer"]] += 1
        assert pinned[e["id"]]["count"] == final[e["customer"]] + seen[e["customer"]], json.dumps(pinned[e["id"]])


def test_without_the_pin_the_same_replay_loses_the_agent_state(uidless) -> None:
    unpinned = {o["id"]: o for o in uidless["outputs"]["unpinned"]}
    seen: Counter[str] = Counter()
    for e in uidless["events"]:
        seen[e["customer"]] += 1
        assert unpinned[e["id"]]["count"] == seen[e["customer"]], "state silently dropped: count restarts at 1"

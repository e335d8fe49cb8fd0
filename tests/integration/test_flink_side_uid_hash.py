"""Issue 4 acceptance: a production job that never had an agent uid is still replayable with its state.

Production v1 runs with NO uid on the agent operator (auto, topology-derived id). The replay has a different
upstream (bounded capture source + a watermark-assigner operator), so the agent's auto id changes:

- pinned with ``setUidHash(<production's agent vertex id>)`` the per-key count continues from the savepoint;
- without the pin (same job, ``-n``) the agent state is silently dropped and the count restarts at 1 —
  the pipeline builder's pin is what saves the state.

Production also sets max parallelism 64 and the replays run with ``pipeline.max-parallelism: 128`` (a cluster
default, as platforms set it): only the replay's max-parallelism pin (64, job-wide and on the agent) lets the
savepoint map; with the uid hash alone Flink refuses the submission ("Max parallelism mismatch").
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
from tests.integration.test_flink_side import V1, delete_collection

#: Production's (explicit) max parallelism, and the replay cluster's explicit default (a platform-wide
#: ``pipeline.max-parallelism``): only the agent pin gives the replay's agent production's key-group count.
PROD_MAX_PARALLELISM = 64
CLUSTER_MAX_PARALLELISM = {"pipeline.max-parallelism": "128"}


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
        args = fh.production_args(
            run,
            uid="",
            collection=collection,
            namespace=f"prod-{run}",
            src=src,
            out=out,
            cap=cap,
            action_topic=prod_as,
            name=f"uh-prod-{run}",
            extra=["--max-parallelism", str(PROD_MAX_PARALLELISM)],
        )
        prod = fh.submit(fh.PRODUCTION_JOB, args)
        jobs.append(prod)
        fh.wait_running_tasks(prod)
        vertex = fh.agent_vertex_id(prod)  # production's auto-generated agent vertex id
        produce_reviews(fh.BOOTSTRAP, src, events)
        prod_out = fh.wait_topic_count(out, 1, len(events))
        sp = fh.stop_with_savepoint(prod, fh.savepoint_dir(run))
        end = fh.end_offsets(cap, 1)

        def spec(variant: str, **pin: Any) -> ReplayJobSpec:
            return ReplayJobSpec(
                variant=variant,
                agent_factory=V1,
                job_identifier=f"{variant}-{run}",
                action_state_topic=f"uh-as-{variant}-{run}",
                output_dir=str(tmp / variant / "out"),
                audit_dir=str(tmp / variant / "audit"),
                kafka_bootstrap=fh.BOOTSTRAP,
                capture_topic=cap,
                start_offsets={0: 0},
                end_offsets=end,
                mem0_config=fh.mem0_config(collection),
                connector_jars=fh.JARS,
                job_name=f"uh-{variant}-{run}",
                **pin,
            )

        specs = {
            "pinned": spec("pinned", agent_uid_hash=vertex, max_parallelism=PROD_MAX_PARALLELISM),
            "unpinned": spec("unpinned", max_parallelism=PROD_MAX_PARALLELISM),  # no uid (hash) pin
            "no_max_parallelism_pin": spec("no_max_parallelism_pin", agent_uid_hash=vertex),
        }
        procs = {
            n: fh.submit_async(
                fh.REPLAY_JOB, s.to_argv(), savepoint=sp, allow_non_restored=True, conf=CLUSTER_MAX_PARALLELISM
            )
            for n, s in specs.items()
        }
        ids, refused = {}, {}
        for n, p in procs.items():
            try:
                ids[n] = fh.job_id_of(p)
            except AssertionError as err:  # Flink refuses to restore: the submission itself fails
                refused[n] = str(err)
                continue
            jobs.append(ids[n])
        states = {n: fh.wait_state(jid, {"FINISHED"}, timeout=180) for n, jid in ids.items()}
        yield {
            "events": events,
            "prod_out": prod_out,
            "vertex": vertex,
            "states": states,
            "refused": refused,
            "outputs": {n: fh.read_outputs(Path(s.output_dir)) for n, s in specs.items()},
        }
    finally:
        for jid in jobs:
            fh.cancel(jid)
        fh.delete_topics(
            src, cap, out, prod_as, *(f"uh-as-{v}-{run}" for v in ("pinned", "unpinned", "no_max_parallelism_pin"))
        )
        for e in events:
            ticket_path(e["id"]).unlink(missing_ok=True)
        delete_collection(collection)
        fh.remove_savepoint_dir(run)


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


def test_max_parallelism_pin_is_what_restores_under_an_explicit_cluster_default(uidless) -> None:
    """Production ran with max parallelism 64; the replay cluster sets 128 explicitly. Pinned (uid hash + 64) the
    agent state restores (test above); with the uid hash alone the key-group counts differ and Flink refuses."""
    assert uidless["states"] == {"pinned": "FINISHED", "unpinned": "FINISHED"}
    refusal = uidless["refused"]["no_max_parallelism_pin"]
    assert "Max parallelism mismatch between checkpoint/savepoint state and new program" in refusal, refusal[-3000:]
    assert "with max parallelism 64 to new program with max parallelism 128" in refusal
    assert uidless["outputs"]["no_max_parallelism_pin"] == []

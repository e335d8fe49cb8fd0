"""A window open at the savepoint: the replay restores its partial contents and finishes it.

The pipeline is Flink Agents' quickstart multi-agent workflow as a job definition
(``tests/jobs/pipeline_job/job.py``: review analysis agent → 4-hour event-time window per product → product
suggestion agent; the chat model a deterministic stand-in). On the real stack:

1. production (``production_job.py --agent-job tests.jobs.pipeline_job.job:production``) gets one review of
   product ``p-open`` ("poor stitching, it broke": the stand-in scores it 2 of 5) at the start of a window; the
   window does not fire (no later event time arrived), so production writes no output;
2. production is stopped with a savepoint WITHOUT drain (``quiesce_mode: stop``; a drain would fire the window);
3. the replay (``replay_job.py``, restored from that savepoint) reads only what came after: a second review of
   ``p-open`` in the same window ("love it, great and comfortable": 4 of 5) and one of ``p-next`` hours later.

The replay's analysis stage (compared: ``compare_stages``) analyses only the two new reviews, yet the
suggestion for ``p-open``'s window carries the histogram of BOTH reviews: the first came from the window's
state in production's savepoint. About 60-90 s on the local stack.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.manifest import EventTime
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from tests.integration import flink_side_helpers as fh

pytestmark = pytest.mark.timeout(600)

JOB = "tests.jobs.pipeline_job.job:production"
AGENT_UID = "afr-agent"
#: the start of a 4-hour window (event time in seconds, as the quickstart's ``ts``)
T0 = 1_800_000_000 - 1_800_000_000 % (4 * 3600)
BEFORE = [{"id": "p-open", "review": "poor stitching, it broke", "ts": T0 + 60}]
AFTER = [
    {"id": "p-open", "review": "love it, great and comfortable", "ts": T0 + 120},
    {"id": "p-next", "review": "nice", "ts": T0 + 5 * 3600},
]


def _produce(topic: str, records: list[dict[str, Any]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": fh.BOOTSTRAP})
    for record in records:
        producer.produce(topic, value=json.dumps(record).encode(), key=record["id"].encode(), partition=0)
    producer.flush(30)


def _production_args(run: str, src: str, out: str, cap: str) -> list[str]:
    return [
        "--agent-job", JOB, "--bootstrap", fh.BOOTSTRAP, "--source-topic", src, "--sink-topic", out,
        "--capture-topic", cap, "--action-state-topic", f"pw-as-prod-{run}", "--job-identifier", f"pw-prod-{run}",
        "--agent-uid", AGENT_UID, "--max-parallelism", "128", "--jars", ",".join(fh.JARS),
        "--group-id", f"grp-pw-{run}", "--job-name", f"pw-prod-{run}",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def replayed(stack: Any, tmp_path_factory: Any) -> Any:
    run = uuid.uuid4().hex[:8]
    tmp = tmp_path_factory.mktemp(f"pw-{run}")
    src, out, cap, window = f"pw-src-{run}", f"pw-out-{run}", f"pw-cap-{run}", f"pw-window-{run}"
    fh.create_topics((src, 1), (out, 1), (cap, 1), (window, 1))
    jobs: list[str] = []
    try:
        prod = fh.submit(fh.PRODUCTION_JOB, _production_args(run, src, out, cap))
        jobs.append(prod)
        fh.wait_running_tasks(prod)
        _produce(src, BEFORE)
        fh.wait_topic_count(cap, 1, len(BEFORE))  # ingested; the stand-in answers in milliseconds
        time.sleep(8)  # the analysis agent's output reaches the window (a slow agent shows in the assertions)
        savepoint = fh.stop_with_savepoint(prod, fh.savepoint_dir(run), drain=False)
        production_out = fh.read_topic(out, 1)
        _produce(window, AFTER)
        spec = ReplayJobSpec(
            variant="baseline",
            agent_job=JOB,
            job_identifier=f"pw-replay-{run}",
            action_state_topic=f"pw-as-replay-{run}",
            production_action_state_topic=f"pw-as-prod-{run}",
            production_job_identifier=f"pw-prod-{run}",
            output_dir=str(tmp / "out"),
            audit_dir=str(tmp / "audit"),
            kafka_bootstrap=fh.BOOTSTRAP,
            capture_topic=window,
            start_offsets={0: 0},
            end_offsets={0: len(AFTER)},
            event_time=EventTime(source="field", field="$.ts", unit="s"),
            watermark="monotonous",
            agent_uid=AGENT_UID,
            max_parallelism=128,
            connector_jars=fh.JARS,
            job_name=f"pw-replay-{run}",
        )
        replay = fh.job_id_of(
            fh.submit_async(fh.REPLAY_JOB, spec.to_argv(), savepoint=savepoint, allow_non_restored=True)
        )
        jobs.append(replay)
        fh.wait_state(replay, {"FINISHED"}, timeout=300)
        yield {"production": production_out, "replay": fh.read_outputs(Path(spec.output_dir))}
    finally:
        for jid in jobs:
            fh.cancel(jid)
        fh.delete_topics(src, out, cap, window, f"pw-as-prod-{run}", f"pw-as-replay-{run}")
        fh.remove_savepoint_dir(run)


def _stage(row: dict[str, Any]) -> str | None:
    return (row.get("_replay") or {}).get("stage")


def test_production_had_not_fired_the_window_at_the_savepoint(replayed: Any) -> None:
    assert not [m for ms in replayed["production"].values() for m in ms], "no output before the window closes"


def test_the_replay_analyses_only_what_came_after_the_savepoint(replayed: Any) -> None:
    analysed = [r for r in replayed["replay"] if _stage(r) == "analysis"]
    assert sorted((r["id"], r["score"]) for r in analysed) == [("p-next", 4), ("p-open", 4)], replayed["replay"]


def test_the_first_aggregate_holds_the_review_production_had_put_in_the_window(replayed: Any) -> None:
    final = {r["id"]: r for r in replayed["replay"] if _stage(r) is None}
    assert set(final) == {"p-open", "p-next"}, replayed["replay"]
    # 2 of 5 from the review before the savepoint (window state), 4 of 5 from the one after it
    assert final["p-open"]["score_hist"] == ["0.0%", "50.0%", "0.0%", "50.0%", "0.0%"], final["p-open"]
    assert final["p-next"]["score_hist"] == ["0.0%", "0.0%", "0.0%", "100.0%", "0.0%"], final["p-next"]
    # the window fired at its end, in event time: the suggestion carries the window's last timestamp
    assert final["p-open"]["_replay"]["event_time_ms"] == (T0 + 4 * 3600) * 1000 - 1, final["p-open"]

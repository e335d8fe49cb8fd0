"""Replay cost per variant versus window size, next to production's own per-record cost.

    .venv/bin/python benchmarks/replay_scale.py [--windows 40 400 4000]

Needs the local stack up (``flink-replay stack up``). Deploys the review agent v1 as a production of its own,
then for each window of N records runs the manual replay DAG under ``dag.test()`` (drain mode, candidate =
production's agent) and feeds production the N reviews at once as soon as it runs again — the window it then
captures. Prints, per window:

- the gate's fixed submission cost: ``submit_replays`` (every variant's job graph checked against
  production's and every variant submitted, one job-side run);
- each variant's Flink job time (start → FINISHED, from the replay cluster) and its task time (submission
  start → files collected);
- production's time for the window's N reviews fed once more at once, with nothing else running (first → last
  of its outputs, read from its outputs topic), after the DAG run and the solo replay below: the same records
  onto the same memories as the solo replay (production's namespace after the window, the candidate's fork
  after its first replay of it: each the savepoint's plus the window's). The review agent reads all of a
  customer's memories for every review, so a record's cost depends on them: both sides must start equal;
- production's time for the window's N reviews during the DAG run: it processes them while the replays run
  (the window is captured as the reviews arrive), so then four jobs share the machine;
- the candidate replayed once more **alone** (the DAG run keeps its forks; the same spec, savepoint and pins
  through the DAG's own operators, into topics of its own, with production idle and no other replay): one
  variant's cost with the machine to itself — its job time, and its first → last output read from its outputs
  topic as production's is (the job time less that span: its start and end).

Then a least-squares line over the windows: fixed cost (intercept) and per-record cost (slope) of each replay
job, of the replay step (the three at once) and of the candidate alone, and production's per-record cost
alone, with the ratios. The goal (issue 16: a replay's per-record cost <= 1.2x production's) is judged on the
candidate alone's first → last output line against production's: the same records, the same memories, the same
measure on both sides.
Production is cancelled and its topics and memories removed at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
VARIANTS = ("baseline", "baseline_2", "candidate")
CANDIDATE = "examples.review_agent.v1.job:job"  # production's own agent: what a replay costs, not what v2 changes
GOAL_PER_RECORD = 1.2  # issue 16: a replay's per-record cost / production's
SOLO = "candidate"  # the variant replayed again alone after each DAG run


def _airflow_home() -> None:
    """A throw-away AIRFLOW_HOME with a migrated DB (before anything imports Airflow)."""
    import subprocess

    home = tempfile.mkdtemp(prefix="afr-bench-scale-")
    os.environ["AIRFLOW_HOME"] = home
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
    for key, value in {"MEM0_TELEMETRY": "False", "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MEM0_DIR", str(Path(home) / "mem0"))
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)


class _OutputClock:
    """Polls an outputs topic (sum of end offsets, every 0.25 s) from :meth:`start` on: when the first new output
    came, and when the last one did — once it grew by ``n``, or grew no more for ``idle_s`` (the review agent
    writes no output for a few reviews), or at :meth:`stop`. A topic that does not exist yet (a replay's, created
    by the DAG) is waited for and counted from empty."""

    idle_s = 20.0

    def __init__(self, bootstrap: str, topic: str) -> None:
        import uuid

        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"afr-bench-{uuid.uuid4().hex[:8]}"})
        self.topic = topic
        self._parts: list[int] | None = None
        self.base = 0  # set by start()
        self.first: float | None = None
        self.last: float | None = None
        self._last_growth = 0.0
        self.n = self.grown = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _end(self) -> int | None:
        """The topic's end offsets summed; None while it does not exist."""
        from confluent_kafka import TopicPartition

        if self._parts is None:
            meta = self._admin.list_topics(timeout=10).topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return None
            self._parts = list(meta.partitions)
        ends = (self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1] for p in self._parts)
        return sum(ends)

    def start(self, n: int) -> None:
        self.base, self.n = self._end() or 0, n
        self._thread.start()

    def _run(self) -> None:
        seen = 0
        while not self._stop.wait(0.25):
            try:
                end, now = self._end(), time.monotonic()
            except Exception:  # a replay's topic is deleted at the end of its DAG run
                continue
            grown = (end or self.base) - self.base
            if grown > seen:
                seen, self.grown = grown, grown
                self.first = self.first or now
                self._last_growth = now
            if seen >= self.n or (self.first and now - self._last_growth > self.idle_s):
                self.last = self._last_growth
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        if self.last is None and self.first is not None:
            self.last = self._last_growth

    def seconds_for(self, n: int) -> float:
        """First → last output, (grown - 1) intervals scaled to ``n`` records (nan without two outputs)."""
        if not (self.first and self.last and self.grown > 1):
            return float("nan")
        return (self.last - self.first) * n / (self.grown - 1)


class _BatchAfterResume:
    """Feeds production ``n`` reviews at once, the first time it is entered (the DAG's feeder hook), and starts
    the output clock just before."""

    def __init__(self, stack: Any, topic: str, n: int, start_index: int, clock: _OutputClock) -> None:
        self.stack, self.topic, self.n, self.start_index, self.clock = stack, topic, n, start_index, clock

    def __enter__(self) -> _BatchAfterResume:
        from airflow_flink_replay.local.demo import produce_reviews
        from examples.review_agent.common.generator import generate_reviews

        reviews = list(generate_reviews(self.n, seed=101 + self.start_index, id_prefix=f"s{self.start_index}"))
        self.clock.start(self.n)
        produce_reviews(self.stack.kafka_bootstrap, self.topic, reviews)
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _job_seconds(stack: Any, job_id: str) -> float:
    import requests

    job = requests.get(f"{stack.replay_flink_rest_url or stack.flink_rest_url}/jobs/{job_id}", timeout=10).json()
    return (job["end-time"] - job["start-time"]) / 1000


def _task_seconds(dagrun: Any) -> dict[str, float]:
    return {ti.task_id: (ti.end_date - ti.start_date).total_seconds() for ti in dagrun.get_task_instances()
            if ti.start_date and ti.end_date}  # fmt: skip


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x; returns (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


def production_alone(stack: Any, production: dict[str, Any], n: int, start_index: int) -> float:
    """Seconds production takes for ``n`` reviews fed at once with nothing else running (first → last output,
    scaled to ``n``)."""
    clock = _OutputClock(stack.kafka_bootstrap, production["topics"].outputs)
    with _BatchAfterResume(stack, production["topics"].reviews, n, start_index, clock):
        deadline = time.monotonic() + 3600
        while clock.last is None and time.monotonic() < deadline:
            time.sleep(0.5)
    clock.stop()
    return clock.seconds_for(n)


def run_window(stack: Any, production: dict[str, Any], n: int, start_index: int, rounds: int = 1) -> dict[str, Any]:
    """One manual DAG run with an ``n``-record window, then ``rounds`` pairs of the candidate replayed alone and
    production alone on the window's records (:func:`alone_pairs`); its figures."""
    from tests.dag_testing import run_replay_dag

    clock = _OutputClock(stack.kafka_bootstrap, production["topics"].outputs)
    feeder = _BatchAfterResume(stack, production["topics"].reviews, n, start_index, clock)
    try:
        conf = {"window_records": n, "quiesce_mode": "drain", "candidate": CANDIDATE, "keep_fork": True}
        dagrun, run = run_replay_dag(stack, production, conf, kind="manual", feed_after_resume=True, feeder=feeder)
        deadline = time.monotonic() + 600
        while clock.last is None and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        clock.stop()
    if str(dagrun.state) != "success":
        raise SystemExit(f"window {n}: the DAG run ended {dagrun.state}: {run['states']}")
    pairs = alone_pairs(stack, production, dagrun, run["spec"], n, start_index, rounds)
    tasks = _task_seconds(dagrun)
    variants = {v["variant"]: v for v in run["record"]["variants"]}
    return {
        "n": n,
        "submit_s": tasks.get("submit_replays", 0.0),
        "job_s": {v: _job_seconds(stack, variants[v]["job_id"]) for v in VARIANTS},
        "task_s": {v: float(variants[v]["duration_s"] or 0.0) for v in VARIANTS},
        "outputs": {v: variants[v]["output_records"] for v in VARIANTS},
        "production_s": clock.seconds_for(n),
        "production_outputs": clock.grown,
        "pairs": pairs,
        "solo_s": median(p["solo"]["job_s"] for p in pairs),
        "solo_outputs": pairs[-1]["solo"]["outputs"],
        "solo_span_s": median(p["solo"]["span_s"] for p in pairs),
        "production_alone_s": median(p["production_s"] for p in pairs),
    }


def alone_pairs(
    stack: Any, production: dict[str, Any], dagrun: Any, spec: Any, n: int, start_index: int, rounds: int
) -> list[dict[str, Any]]:
    """``rounds`` times: the candidate replayed alone (:func:`solo_replay`), then production alone fed the
    window's own reviews once more (:func:`production_alone`).

    Each side then starts from the same memories: production's namespace after the window, the candidate's fork
    after its first replay of it (the savepoint's + the window's), and each pair adds the window's once more to
    both. Each does the same: the same reviews onto their own memories (each agent run reads all of its
    customer's memories: a record's cost depends on them). Alternating keeps a drift of the machine from
    landing on one side."""
    pairs = []
    for r in range(rounds):
        solo = solo_replay(stack, dagrun, spec, records=n, drop=r == rounds - 1)
        alone = production_alone(stack, production, n, start_index=start_index)
        pairs.append({"solo": solo, "production_s": alone})
        print(f"  window {n}, pair {r + 1}: {SOLO} alone first -> last output {solo['span_s']:.1f} s (job "
              f"{solo['job_s']:.1f} s), production alone {alone:.1f} s: {solo['span_s'] / alone:.2f}x",
              flush=True)  # fmt: skip
    return pairs


def solo_replay(
    stack: Any,
    dagrun: Any,
    spec: Any,
    variant: str = SOLO,
    *,
    records: int | None = None,
    drop: bool = True,
) -> dict[str, Any]:
    """``variant`` of a finished DAG run (``keep_fork``) replayed once more, alone on the replay cluster: the same
    window, savepoint, pins and agent through the DAG's own operators (isolate, submit, await, delete topics),
    into topics of its own, on the variant's kept memory fork. Then every kept fork of the run is dropped.

    The fork holds what the variant's first replay wrote (the window's memories once more), so the solo run's
    memory reads are a little larger than the first run's: if anything, it is slower for it. ``drop=False`` keeps
    the forks.
    Returns the Flink job's seconds (``job_s``), its outputs, and its first → last output scaled to ``records``
    (``span_s``: measured as production's is, the per-record part of the job without its start and end)."""
    import uuid

    from airflow.sdk import DAG

    from airflow_flink_replay import ids
    from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
    from airflow_flink_replay.operators.action_state import DeleteReplayTopicsOperator, IsolateActionStateOperator
    from airflow_flink_replay.operators.mem0 import DropMem0ForkOperator
    from airflow_flink_replay.operators.replay import AwaitReplayJobOperator, SubmitReplayJobsOperator
    from tests.dag_testing import register_dag, xcoms_of

    xcom = xcoms_of(dagrun)
    tag = f"solo{uuid.uuid4().hex[:6]}"
    first = ReplayJobSpec.model_validate(xcom[(ids.TASK_RESOLVE, ids.job_spec_key(variant))])
    solo = first.model_copy(update={
        "job_name": f"{first.job_name or 'replay'}-{tag}",
        "action_state_topic": spec.action_state_topic(tag, variant),
        "results": spec.result_topics(tag, variant),
    })  # fmt: skip
    forks = [xcom[(ids.TASK_RESOLVE, ids.fork_key(v))] for v in VARIANTS]
    replay_conn = spec.replay_flink_conn_id or spec.flink_conn_id
    with DAG(dag_id=f"bench_solo_{tag}", schedule=None) as dag:
        isolate = IsolateActionStateOperator(
            task_id="isolate", production_topic=spec.production.action_state_topic, variants=[variant],
            topics={variant: solo.action_state_topic}, result_topics={variant: solo.results.model_dump()},
            partitions=spec.production.action_state_partitions, kafka_config_id=spec.kafka_conn_id,
        )  # fmt: skip
        submit = SubmitReplayJobsOperator(
            task_id="submit", specs=[solo], savepoint_path=xcom[(ids.TASK_REPLAY_FROM, ids.XCOM_SAVEPOINT_PATH_KEY)],
            production_plan=xcom[(ids.TASK_REPLAY_FROM, ids.XCOM_PRODUCTION_PLAN_KEY)],
            production_agent_uid=spec.production.agent_uid, flink_conn_id=replay_conn,
            kafka_config_id=spec.kafka_conn_id,
        )  # fmt: skip
        wait = AwaitReplayJobOperator(task_id="replay", spec=solo, submitted=submit.output, flink_conn_id=replay_conn,
                                      kafka_config_id=spec.kafka_conn_id, timeout=3600)  # fmt: skip
        delete = DeleteReplayTopicsOperator(task_id="delete_topics", isolation=isolate.output,
                                            kafka_config_id=spec.kafka_conn_id, trigger_rule="all_done")  # fmt: skip
        drops = [DropMem0ForkOperator(task_id=f"drop_{v}", namespace=ns, mem0_conn_id=spec.mem0_conn_id)
                 for v, ns in zip(VARIANTS, forks, strict=True) if drop]  # fmt: skip
        isolate >> submit >> wait >> delete >> drops
    register_dag(dag, "bench")
    clock = _OutputClock(stack.kafka_bootstrap, solo.results.outputs)
    clock.start(n=sys.maxsize)  # stopped once the DAG run is over: the job is FINISHED, every output is in
    try:
        run = dag.test(conn_file_path=stack.connections_file)
    finally:
        clock.stop()
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    if str(run.state) != "success":
        raise SystemExit(f"the solo {variant} replay ended {run.state}: {states}")
    result = xcoms_of(run)
    job_id = result[("submit", "return_value")][variant]["job_id"]
    outputs = result[("replay", "return_value")].get("output_records")
    return {"job_s": _job_seconds(stack, job_id), "outputs": outputs,
            "span_s": clock.seconds_for(records or outputs or clock.grown)}  # fmt: skip


def print_solo(rows: list[dict[str, Any]], xs: list[float], prod_b: float) -> None:
    """The candidate replayed alone next to production alone: its job time (start → end) as a line over the
    windows, and its first → last output — measured as production's is — per window and as a line; the goal is
    judged on the latter (the per-record cost, the same measure on both sides)."""
    a, b = _line(xs, [r["solo_s"] for r in rows])
    print(f"replay {SOLO} alone (the same job again, nothing else on the replay cluster): job {a:5.1f} s + "
          f"{b * 1000:5.1f} ms a record ({b / prod_b if prod_b else float('nan'):.2f}x production's per-record cost"
          " alone; a line through start → end times)")  # fmt: skip
    for r in rows:
        print(f"  window {r['n']:5d}: job {r['solo_s']:.1f} s = first → last output {r['solo_span_s']:.1f} s + "
              f"start and end {r['solo_s'] - r['solo_span_s']:.1f} s; production alone first → last output "
              f"{r['production_alone_s']:.1f} s: {r['solo_span_s'] / r['production_alone_s']:.2f}x")  # fmt: skip
    spans = [p["solo"]["span_s"] for r in rows for p in r["pairs"]]
    prods = [p["production_s"] for r in rows for p in r["pairs"]]
    print(f"  every pair pooled: {SOLO} alone {sum(spans):.1f} s first → last output, production alone "
          f"{sum(prods):.1f} s: {sum(spans) / sum(prods):.2f}x")  # fmt: skip
    span_a, span_b = _line(xs, [r["solo_span_s"] for r in rows])
    ratio = span_b / prod_b if prod_b else float("nan")
    print(f"replay {SOLO} alone, first → last output: {span_b * 1000:5.1f} ms a record (intercept {span_a:.1f} s) = "
          f"{ratio:.2f}x production's per-record cost alone, measured the same way "
          f"({'meets' if ratio <= GOAL_PER_RECORD else 'MISSES'} the goal <= {GOAL_PER_RECORD})")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[40, 400, 4000])
    parser.add_argument("--rounds", type=int, default=2,
                        help="pairs of the candidate alone and production alone per window (medians used)")
    args = parser.parse_args(argv)
    _airflow_home()
    from airflow_flink_replay.local.stack import LocalStack, StackConfig
    from tests.dag_testing import deploy_test_production, stop_production

    stack = LocalStack(StackConfig()).info()
    if stack is None:
        raise SystemExit("the local stack is not up: run `flink-replay stack up` first")
    work = Path(tempfile.mkdtemp(prefix="afr-bench-scale-work-"))
    production = deploy_test_production(stack, work, "scale")
    rows = []
    try:
        for i, n in enumerate(args.windows):
            row = run_window(stack, production, n, start_index=100_000 * (i + 1), rounds=args.rounds)
            alone = row["production_alone_s"]
            rows.append(row)
            jobs = " ".join(f"{v} {row['job_s'][v]:.1f}" for v in VARIANTS)
            print(f"window {n:5d}: check + submit {row['submit_s']:.1f} s | replay jobs (s): {jobs}"
                  f" | production alone {alone:.1f} s for {n}, during the replays {row['production_s']:.1f} s"
                  f" for the same {n} ({row['production_outputs']} outputs)"
                  f" | replay outputs {row['outputs']} | {SOLO} alone {row['solo_s']:.1f} s"
                  f" ({row['solo_outputs']} outputs)",
                  flush=True)  # fmt: skip
    finally:
        stop_production(stack, production)
    if len(rows) < 2:
        return 0
    xs = [float(r["n"]) for r in rows]
    fixed_submit = sum(r["submit_s"] for r in rows) / len(rows)
    print(f"\nchecking + submitting all three variants (mean): {fixed_submit:.1f} s")
    prod_a, prod_b = _line(xs, [r["production_alone_s"] for r in rows])
    print(f"production alone: {prod_b * 1000:.1f} ms a record (line over the windows; intercept {prod_a:.1f} s)")
    during_a, during_b = _line(xs, [r["production_s"] for r in rows])
    print(f"production during the replays: {during_b * 1000:.1f} ms a record (intercept {during_a:.1f} s)")
    for v in VARIANTS:
        a, b = _line(xs, [r["job_s"][v] for r in rows])
        print(f"replay {v:10s}: job fixed {a:5.1f} s + {b * 1000:5.1f} ms a record "
              f"= {b / prod_b if prod_b else float('nan'):.2f}x production's per-record cost")
    # the three variants run at once on the replay cluster: the step's cost is the slowest job's, and it replays
    # every record three times
    a, b = _line(xs, [max(r["job_s"].values()) for r in rows])
    print(f"replay step (three variants at once): fixed {a:5.1f} s + {b * 1000:5.1f} ms a record = "
          f"{b / 3 * 1000:.1f} ms a variant-record ({b / 3 / prod_b if prod_b else float('nan'):.2f}x production's)")
    print_solo(rows, xs, prod_b)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Production downtime of a replay run's stop window versus the raw procedure by hand, per memory namespace size
(run: ``.venv/bin/python benchmarks/downtime.py [--sizes 1000 10000 100000] [--rounds 2]``).

Production is the demo's review agent (Flink Agents, Kafka action state, capture tee, Mem0 memory on the
stack's Chroma), fed reviews the whole time, so it writes memories right up to each stop. Its namespace is
filled to each size with bulk-written memories (mem0's payload layout, stored vectors). Alternating on that
one production job, each round measures:

- **raw**: ``POST /jobs/{id}/stop {"drain": true}``, poll the savepoint, ``POST /jars/{id}/run`` from it, poll
  until every vertex RUNS (the floor: no offsets, no memory cut);
- **window**: the replay DAG's ``quiesce`` task as the DAG runs it, ``StopWindowOperator`` (drain, then the
  capture end offsets, the memory cut as the delta over a pre-copy taken just before, the resubmission,
  RUNNING), with the pre-copy outside the window as in the DAG (``precopy_memory_baseline``). Production journals
  its memory writes (``--memory-journal-topic``), so the cut reads only what the journal names since the
  pre-copy; ``--no-journal`` makes it read the whole namespace, as a spec without a journal does.

Downtime = stop request → every vertex RUNNING again (the window reports it as ``downtime_seconds``). The
window is one task instance that never defers, so the executor's latency between tasks cannot land in it:
what the executor adds is the time before the task starts, while production still runs. Prints per size the
medians, the window / raw ratio (goal ≤ 1.2 at 1k) and the window's steps, and the largest size's window
against the smallest's (goal: ≤ 1.10). Needs the local stack up; takes ~2 min per size and round at 1k.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_flink_replay.local.raw_restore import raw_drain_and_restore  # noqa: E402
from benchmarks.control_plane import _context  # noqa: E402
from benchmarks.mem0_fork import seed  # noqa: E402


def window_round(stack: Any, job_id: str, program: dict[str, Any], topics: Any, identifier: str,
                 job_name: str, target: str, poll: float, use_journal: bool = True,
                 ready: Any = None) -> dict[str, Any]:  # fmt: skip
    """Pre-copy outside the window, then the window task; returns its downtime, steps and the cut's figures."""
    from airflow_flink_replay.hooks.mem0 import Mem0Hook
    from airflow_flink_replay.memory.journal_reader import MemoryJournalHook
    from airflow_flink_replay.operators.stop_window import StopWindowOperator

    fork, fork_id = f"{identifier}-bench-{uuid.uuid4().hex[:6]}", f"bench-{uuid.uuid4().hex[:8]}"
    hook = Mem0Hook(config=stack.mem0_config())
    ready = ready or (lambda: None)
    journal = MemoryJournalHook(topics.memory_journal) if topics.memory_journal and use_journal else None
    started = time.perf_counter()
    hook.precopy(identifier, fork, fork_id=fork_id, journal=journal)
    precopy_s = time.perf_counter() - started
    if journal is not None:
        journal.close()
    ready()  # production caught up with what it fell behind during the pre-copy (the machine's two cores)
    try:
        window = StopWindowOperator(
            task_id="quiesce", job_id=job_id, mode="drain", target_directory=target, poll_interval=poll,
            capture_topic=topics.capture, memory_source=identifier, memory_target=fork, fork_id=fork_id,
            program=program, job_name=job_name, memory_journal_topic=topics.memory_journal if use_journal else None,
        )  # fmt: skip
        result = window.execute(_context())["window"]
    finally:
        hook.drop(fork)
    cut = result["memory_cut"]
    return {
        "downtime": result["resumed"]["downtime_seconds"],
        "job_id": result["resumed"]["job_id"],
        "steps": result["steps_s"],
        "precopy": precopy_s,
        "changed": cut["added"] + cut["updated"] + cut["removed"],
        "count": cut["count"],
        "journal": cut.get("journal", False),
    }


class OutputCounter:
    """Counts production's outputs as they reach its output topic (one per review), on a thread of its own."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        import threading

        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.count = 0
        self._stop = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                                   "enable.auto.commit": False})
        partitions = self._consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.2)
            if msg is not None and not msg.error():
                self.count += 1
        self._consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def settle(counter: OutputCounter, fed: Any, initial: int, timeout: float = 300.0) -> tuple[float, int]:
    """Wait until production has output all but ~2 s of the reviews fed so far, so that each stop (raw or the
    window) starts from the same state: a drain processes production's in-flight backlog before its savepoint, in
    both procedures alike. Returns (seconds waited, reviews still in flight when it stopped waiting)."""
    started = time.monotonic()
    while True:
        backlog = initial + (fed.next_index - 100_000) - counter.count
        if backlog <= max(2, int(2 * fed.rate)) or time.monotonic() - started > timeout:
            return time.monotonic() - started, backlog
        time.sleep(0.2)


def _clean_up(stack: Any, flink: Any, hook: Any, topics: Any, job_name: str, identifier: str, target: str) -> None:
    """Cancel the benchmark's production, delete its topics, its memories and its savepoints."""
    import shutil

    from confluent_kafka.admin import AdminClient

    for job in flink.list_jobs().jobs:
        if job.name == job_name and job.state == "RUNNING":
            flink.cancel_job(job.jid)
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    names = [t for t in topics.model_dump().values() if t in admin.list_topics(timeout=10).topics]
    for future in admin.delete_topics(names).values() if names else ():
        future.result(30)
    rows = hook.list_memories({"user_id": identifier})
    for start in range(0, len(rows), 5000):
        hook.get_store().delete_ids([r.id for r in rows[start : start + 5000]])
    shutil.rmtree(target.removeprefix("file://"), ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=2.0, help="reviews a second fed to production throughout")
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--no-journal", action="store_true",
                        help="the cut reads the whole namespace (production's memory journal not given to the window)")
    args = parser.parse_args()

    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    stack = LocalStack(StackConfig(workdir=ROOT / ".stack")).info()
    if stack is None:
        print("local stack is not up: run `.venv/bin/flink-replay stack up`", file=sys.stderr)
        return 2
    from airflow_flink_replay.local.airflow_runner import connection_env

    os.environ.update(connection_env(stack))  # the operators find the stack's Flink, Kafka and Mem0 by id

    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter
    from airflow_flink_replay.hooks.mem0 import Mem0Hook
    from airflow_flink_replay.local.demo import DemoTopics, ReviewFeeder, deploy_production, production_program
    from airflow_flink_replay.memory.offline import build_offline_memory

    suffix = uuid.uuid4().hex[:6]
    topics = DemoTopics.named(f"bench-down-{suffix}")
    job_name = identifier = f"review-triage-bench-{suffix}"
    base = stack.flink_rest_url
    flink = FlinkRestHook(settings=FlinkRestSettings(base_url=base))
    program = production_program(stack, topics, job_name, identifier)
    target = f"file://{stack.savepoint_dir}/bench-downtime"
    memory = build_offline_memory(stack.mem0_config())
    hook = Mem0Hook(config=stack.mem0_config())
    rows: list[dict[str, Any]] = []
    try:
        job_id = deploy_production(stack, topics, job_name=job_name, job_identifier=identifier, initial_reviews=10)
        jar_id = RestPythonSubmitter(flink, flink_home=stack.flink_home).python_jar_id()
        from airflow_flink_replay.core.flink_models import FlinkPythonProgram

        driver_args = FlinkPythonProgram.model_validate(program).driver_args()
        counter = OutputCounter(stack.kafka_bootstrap, topics.outputs)
        with ReviewFeeder(stack.kafka_bootstrap, topics.reviews, start_index=100_000, rate=args.rate) as fed:
            for size in sorted(args.sizes):
                have = hook.count(identifier)
                if have < size:
                    started = time.perf_counter()
                    seed(memory, identifier, size - have)
                    took = time.perf_counter() - started
                    print(f"namespace filled to {hook.count(identifier)} memories in {took:.1f} s")
                raw, windows = [], []
                settled: list[tuple[float, int]] = []
                for _ in range(args.rounds):
                    settled.append(settle(counter, fed, 10))
                    downtime, job_id = raw_drain_and_restore(base, job_id, jar_id, driver_args, target, args.poll)
                    raw.append(downtime)
                    time.sleep(3)  # production processes the reviews fed meanwhile: memories change before the cut
                    def ready(settled: list[tuple[float, int]] = settled) -> None:
                        settled.append(settle(counter, fed, 10))

                    measured = window_round(stack, job_id, program, topics, identifier, job_name, target, args.poll,
                                            use_journal=not args.no_journal, ready=ready)
                    job_id = measured["job_id"]
                    windows.append(measured)
                    time.sleep(3)
                row = {
                    "size": size,
                    "raw": statistics.median(raw),
                    "window": statistics.median(w["downtime"] for w in windows),
                    "cut": statistics.median(w["steps"].get("memory_cut", 0.0) for w in windows),
                    "offsets": statistics.median(w["steps"].get("offsets", 0.0) for w in windows),
                    "precopy": statistics.median(w["precopy"] for w in windows),
                    "changed": [w["changed"] for w in windows],
                    "journal": [w["journal"] for w in windows],
                    "count": windows[-1]["count"],
                    "raws": raw,
                    "windows": [w["downtime"] for w in windows],
                    "settle": [round(t, 1) for t, _ in settled],
                    "backlog": [b for _, b in settled],
                }
                rows.append(row)
                print(
                    f"{row['count']:>7} memories: raw {row['raw']:.2f} s {[round(x, 2) for x in raw]}, window "
                    f"{row['window']:.2f} s {[round(x, 2) for x in row['windows']]}"
                    f" → ratio {row['window'] / row['raw']:.2f}"
                    f"; in the window: offsets {row['offsets']:.3f} s, memory cut {row['cut']:.2f} s "
                    f"(changed since the pre-copy: {row['changed']}, from the journal: {row['journal']}); "
                    f"pre-copy outside {row['precopy']:.1f} s; before each stop production caught up in "
                    f"{row['settle']} s (reviews in flight then: {row['backlog']})",
                    flush=True,
                )
    finally:
        with contextlib.suppress(NameError):
            counter.close()
        _clean_up(stack, flink, hook, topics, job_name, identifier, target)
    print()
    print("| memories | raw stop + restore | stop window (DAG) | window / raw | memory cut in the window "
          "| pre-copy (outside) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['count']:,} | {row['raw']:.2f} s | {row['window']:.2f} s | {row['window'] / row['raw']:.2f} | "
              f"{row['cut']:.2f} s | {row['precopy']:.1f} s |")
    if rows:
        first, last = rows[0], rows[-1]
        ratio = first["window"] / first["raw"]
        growth = last["window"] / first["window"]
        print(f"window / raw at {first['count']:,}: {ratio:.2f} (goal <= 1.2) {'OK' if ratio <= 1.2 else 'MISSED'}")
        print(f"window at {last['count']:,} / at {first['count']:,}: {growth:.2f} (goal <= 1.10) "
              f"{'OK' if growth <= 1.10 else 'MISSED'}")
    print(f"measured at {datetime.now(UTC).isoformat(timespec='seconds')} on the shared local stack")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

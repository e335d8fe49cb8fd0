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
  RUNNING), with the pre-copy outside the window as in the DAG (``precopy_memory_baseline``).

Downtime = stop request → every vertex RUNNING again (the window reports it as ``downtime_seconds``). The
window is one task instance that never defers, so the executor's latency between tasks cannot land in it:
what the executor adds is the time before the task starts, while production still runs. Prints per size the
medians, the window / raw ratio (goal ≤ 1.2 at 1k) and the window's steps, and the largest size's window
against the smallest's (goal: ≤ 1.10). Needs the local stack up; takes ~2 min per size and round at 1k.
"""

from __future__ import annotations

import argparse
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

from benchmarks.control_plane import _context, raw_drain_and_restore  # noqa: E402
from benchmarks.mem0_fork import seed  # noqa: E402


def window_round(stack: Any, job_id: str, program: dict[str, Any], topics: Any, identifier: str,
                 job_name: str, target: str, poll: float) -> dict[str, Any]:  # fmt: skip
    """Pre-copy outside the window, then the window task; returns its downtime, steps and the cut's figures."""
    from airflow_flink_replay.hooks.mem0 import Mem0Hook
    from airflow_flink_replay.operators.stop_window import StopWindowOperator

    fork, fork_id = f"{identifier}-bench-{uuid.uuid4().hex[:6]}", f"bench-{uuid.uuid4().hex[:8]}"
    hook = Mem0Hook(config=stack.mem0_config())
    started = time.perf_counter()
    hook.precopy(identifier, fork, fork_id=fork_id)
    precopy_s = time.perf_counter() - started
    try:
        window = StopWindowOperator(
            task_id="quiesce", job_id=job_id, mode="drain", target_directory=target, poll_interval=poll,
            capture_topic=topics.capture, memory_source=identifier, memory_target=fork, fork_id=fork_id,
            program=program, job_name=job_name,
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
    }


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
        with ReviewFeeder(stack.kafka_bootstrap, topics.reviews, start_index=100_000, rate=args.rate):
            for size in sorted(args.sizes):
                have = hook.count(identifier)
                if have < size:
                    started = time.perf_counter()
                    seed(memory, identifier, size - have)
                    took = time.perf_counter() - started
                    print(f"namespace filled to {hook.count(identifier)} memories in {took:.1f} s")
                raw, windows = [], []
                for _ in range(args.rounds):
                    downtime, job_id = raw_drain_and_restore(base, job_id, jar_id, driver_args, target, args.poll)
                    raw.append(downtime)
                    time.sleep(3)  # production processes the reviews fed meanwhile: memories change before the cut
                    measured = window_round(stack, job_id, program, topics, identifier, job_name, target, args.poll)
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
                    "count": windows[-1]["count"],
                    "raws": raw,
                    "windows": [w["downtime"] for w in windows],
                }
                rows.append(row)
                print(
                    f"{row['count']:>7} memories: raw {row['raw']:.2f} s {[round(x, 2) for x in raw]}, window "
                    f"{row['window']:.2f} s {[round(x, 2) for x in row['windows']]}"
                    f" → ratio {row['window'] / row['raw']:.2f}"
                    f"; in the window: offsets {row['offsets']:.3f} s, memory cut {row['cut']:.2f} s "
                    f"(changed since the pre-copy: {row['changed']}); pre-copy outside {row['precopy']:.1f} s",
                    flush=True,
                )
    finally:
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

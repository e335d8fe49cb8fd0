"""Control-plane overhead on the real local Flink (run: ``.venv/bin/python benchmarks/control_plane.py``).

Prints, in one run:

1. **Operator overhead** — wall time of ``QuiesceAndSavepointOperator(mode="savepoint")`` versus the raw REST
   calls it wraps (``POST /jobs/{id}/savepoints`` + polling ``GET .../savepoints/{trigger}`` with the same
   poll interval), alternating on one running job. Goal: ratio of medians ≤ 1.10.
2. **Production downtime** — drain + resume through the operators (``QuiesceAndSavepointOperator(mode=
   "drain")`` → ``ResumeJobOperator``) versus the same by hand (``POST /jobs/{id}/stop {"drain": true}``,
   poll, ``POST /jars/{id}/run`` with the PythonDriver, poll until every vertex runs). Downtime = stop
   request → every vertex RUNNING again. Goal: ratio of medians ≤ 1.2. Measured twice: with the quiesce
   default (returns once the old job is FINISHED: Python teardown takes ~2.5 s after the savepoint) and
   with ``wait_for_finished=False`` (overlaps that teardown, as the raw procedure does).

Operators run their synchronous path (``deferrable=False``) with a minimal task-instance stand-in (the
benchmark measures the operator's own work, not Airflow's scheduling). Needs the local stack up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_flink_replay.local.raw_restore import raw_drain_and_restore, wait_all_running  # noqa: E402


class _TaskInstance:
    """Stand-in for the task instance: identity for the trigger id, XCom pushes dropped."""

    def __init__(self, run_id: str) -> None:
        self.dag_id, self.run_id, self.task_id, self.map_index, self.try_number = "bench", run_id, "quiesce", -1, 1

    def xcom_push(self, key: str, value: Any) -> None:
        pass


def _context() -> dict[str, Any]:
    return {"ti": _TaskInstance(f"bench-{uuid.uuid4().hex[:8]}")}


def raw_savepoint(base: str, job_id: str, target: str, poll: float) -> float:
    """The REST calls the savepoint mode wraps, timed."""
    start = time.perf_counter()
    trigger = requests.post(
        f"{base}/jobs/{job_id}/savepoints",
        json={"target-directory": target, "cancel-job": False, "formatType": "CANONICAL"},
        timeout=30,
    ).json()["request-id"]
    while True:
        status = requests.get(f"{base}/jobs/{job_id}/savepoints/{trigger}", timeout=30).json()
        if status["status"]["id"] == "COMPLETED":
            assert "location" in status["operation"], status
            return time.perf_counter() - start
        time.sleep(poll)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--savepoint-rounds", type=int, default=5)
    parser.add_argument("--downtime-rounds", type=int, default=2)
    parser.add_argument("--poll", type=float, default=0.1)
    args = parser.parse_args()

    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    stack = LocalStack(StackConfig(workdir=ROOT / ".stack")).info()
    if stack is None:
        print("local stack is not up: run `.venv/bin/flink-replay stack up`", file=sys.stderr)
        return 2
    os.environ["AIRFLOW_CONN_FLINK_DEFAULT"] = json.dumps({"conn_type": "flink_rest", "host": stack.flink_rest_url})

    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
    from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter
    from airflow_flink_replay.operators.flink import QuiesceAndSavepointOperator, QuiesceRef, ResumeJobOperator
    from tests.jobs import harness

    base = stack.flink_rest_url
    hook = FlinkRestHook()
    submitter = RestPythonSubmitter(hook, flink_home=stack.flink_home)
    name = harness.unique("bench-cp")
    harness.create_topics(stack.kafka_bootstrap, f"{name}-in", f"{name}-out")
    program = harness.counter_program(
        stack.kafka_bootstrap, f"{name}-in", f"{name}-out", stack.connector_jars, job_name=name, hold=True
    )
    target = f"file://{stack.savepoint_dir}/bench"
    job_ids: list[str] = []
    try:
        job_id = submitter.submit(program).job_id
        job_ids.append(job_id)
        wait_all_running(base, job_id, args.poll)
        harness.produce(stack.kafka_bootstrap, f"{name}-in", range(30))

        # 1. operator vs raw REST, savepoint mode, alternating on one job
        raw_times, op_times = [], []
        for _ in range(args.savepoint_rounds):
            raw_times.append(raw_savepoint(base, job_id, target, args.poll))
            op = QuiesceAndSavepointOperator(
                task_id="quiesce", job_id=job_id, mode="savepoint", target_directory=target,
                poll_interval=args.poll, deferrable=False,
            )  # fmt: skip
            start = time.perf_counter()
            op.execute(_context())
            op_times.append(time.perf_counter() - start)
        ratio = statistics.median(op_times) / statistics.median(raw_times)
        print(f"savepoint raw REST  : median {statistics.median(raw_times):.3f} s  {[round(t, 3) for t in raw_times]}")
        print(f"savepoint operator  : median {statistics.median(op_times):.3f} s  {[round(t, 3) for t in op_times]}")
        print(f"operator / raw REST : {ratio:.3f}  (goal <= 1.10) {'OK' if ratio <= 1.10 else 'MISSED'}")

        # 2. downtime: drain + resume by hand vs through the operators (default: wait until the old job is
        #    FINISHED; and wait_for_finished=False, which overlaps the old job's teardown like the raw path)
        jar_id = submitter.python_jar_id()
        downs: dict[str, list[float]] = {"raw": [], "operators": [], "operators_overlap": []}
        for _ in range(args.downtime_rounds):
            downtime, job_id = raw_drain_and_restore(base, job_id, jar_id, program.driver_args(), target, args.poll)
            job_ids.append(job_id)
            downs["raw"].append(downtime)
            for key, wait in (("operators", True), ("operators_overlap", False)):
                quiesce = QuiesceAndSavepointOperator(
                    task_id="quiesce", job_id=job_id, mode="drain", target_directory=target,
                    poll_interval=args.poll, deferrable=False, wait_for_finished=wait,
                )  # fmt: skip
                result = quiesce.execute(_context())
                resume = ResumeJobOperator(
                    task_id="resume", program=program, quiesce=QuiesceRef(result=result), poll_interval=args.poll,
                    deferrable=False,
                )  # fmt: skip
                resumed = resume.execute(_context())
                job_id = resumed["job_id"]
                job_ids.append(job_id)
                downs[key].append(resumed["downtime_seconds"])
        raw_median = statistics.median(downs["raw"])
        print(f"downtime raw by hand: median {raw_median:.2f} s  {[round(t, 2) for t in downs['raw']]}")
        for key, label in (("operators", "operators (wait FINISHED)"), ("operators_overlap", "operators (overlap)")):
            median = statistics.median(downs[key])
            ratio_down = median / raw_median
            print(f"downtime {label}: median {median:.2f} s  {[round(t, 2) for t in downs[key]]}")
            print(f"  {label} / by hand: {ratio_down:.3f}  (goal <= 1.2) {'OK' if ratio_down <= 1.2 else 'MISSED'}")
        print(f"measured at {datetime.now(UTC).isoformat(timespec='seconds')} on the shared local stack")
    finally:
        for jid in job_ids:
            try:
                if hook.get_job(jid).state not in ("FINISHED", "CANCELED", "FAILED"):
                    hook.cancel_job(jid)
            except Exception:
                pass
        harness.delete_topics(stack.kafka_bootstrap, f"{name}-in", f"{name}-out")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Two Airflow hosts running Python programs on one JobManager at once: with each host's own lock only, then with
the shared submission lease (``submission_lease_uri``).

Each "host" is a process of its own with its own temp and host lock folder (``FLINK_REPLAY_LOCK_DIR``), as two
Celery workers are. Both plan the same replay-shaped program ``--calls`` times on the local stack's replay
JobManager (``POST /jars/{id}/plan``: the PythonDriver, nothing submitted), starting together: first with the
shared lease, then with the host locks only (which can leave the JobManager unable to run any Python program
until it restarts: the benchmark recycles the replay cluster at the end). Reported per mode:
the PythonDriver calls whose time on the JobManager overlapped another host's (what the JobManager's static
gateway cannot take), the collisions Flink answered and the submitter retried, the calls that failed, and the wall
time. Needs the stack up (``flink-replay stack up``).

Run: ``.venv/bin/python benchmarks/submission_hosts.py [--calls 8] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class _Counter:
    collisions = 0


def _host(name: str, url: str, lease_uri: str | None, program: dict[str, Any], calls: int, start_at: float,
          out: str, flink_home: str) -> None:
    """One host: its own temp and lock folder; plans ``program`` ``calls`` times, recording each call's span."""
    folder = Path(tempfile.mkdtemp(prefix=f"afr-{name}-"))
    os.environ["TMPDIR"] = str(folder)
    os.environ["FLINK_REPLAY_LOCK_DIR"] = str(folder / "locks")
    from airflow_flink_replay.core.flink_models import FlinkPythonProgram
    from airflow_flink_replay.exceptions import FlinkRestError
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter, _concurrent_driver

    counter = _Counter()
    # a call the JobManager never answers (a PythonDriver hung by a collision) ends after 60 s, not 3 x 180 s
    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=url, submission_lease_uri=lease_uri, timeout=60,
                                                    retries=0, flink_home=flink_home))
    submitter = RestPythonSubmitter(hook)
    submitter.python_jar_id()
    prog = FlinkPythonProgram.model_validate(program)
    spans, failures = [], []
    time.sleep(max(0.0, start_at - time.time()))
    began = time.monotonic()

    original = hook.jar_plan

    def timed(*args: Any, **kwargs: Any) -> Any:  # the span the program ran on the JobManager
        t0 = time.time()
        try:
            return original(*args, **kwargs)
        except FlinkRestError as err:
            if _concurrent_driver(err.details or str(err)):
                counter.collisions += 1  # Flink's answer to two programs at once: the submitter retries it
            raise
        finally:
            spans.append((t0, time.time()))

    hook.jar_plan = timed  # type: ignore[method-assign]
    def record() -> None:  # after every call: a host stuck in a hung call still reports the rest
        Path(out).write_text(json.dumps({"host": name, "spans": spans, "failures": failures, "finished": finished,
                                         "collisions": counter.collisions,
                                         "wall_s": round(time.monotonic() - began, 1)}))  # fmt: skip

    finished = 0
    record()
    for call in range(1, calls + 1):
        try:
            submitter.plan(prog, timeout=120)
        except Exception as exc:  # a collision the retries did not get past: counted, not fatal here
            failures.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        finished = call
        record()


def overlapping(spans_a: list[list[float]], spans_b: list[list[float]]) -> int:
    """How many of host a's calls overlapped a call of host b on the JobManager."""
    return sum(any(a0 < b1 and b0 < a1 for b0, b1 in spans_b) for a0, a1 in spans_a)


def _mode(url: str, lease_uri: str | None, program: dict[str, Any], calls: int, work: Path,
          flink_home: str, deadline_s: float) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 8  # both import and look up the jar first
    outs = {name: work / f"{name}-{'lease' if lease_uri else 'host'}.json" for name in ("host-a", "host-b")}
    procs = [ctx.Process(target=_host, args=(n, url, lease_uri, program, calls, start_at, str(o), flink_home))
             for n, o in outs.items()]  # fmt: skip
    for p in procs:
        p.start()
    for p in procs:
        p.join(max(1.0, start_at + deadline_s - time.time()))
    stuck = [p for p in procs if p.is_alive()]  # in a call the JobManager never answers
    for p in stuck:
        p.kill()
    a, b = (json.loads(o.read_text()) for o in outs.values())
    return {
        "mode": "shared lease" if lease_uri else "host locks only",
        "calls": 2 * calls,
        "overlapping_calls": overlapping(a["spans"], b["spans"]) + overlapping(b["spans"], a["spans"]),
        "collisions_retried": a["collisions"] + b["collisions"],
        "failed_calls": len(a["failures"]) + len(b["failures"]),
        "calls_never_answered": sum(calls - h["finished"] for h in (a, b)),
        "failures": a["failures"] + b["failures"],
        "wall_s": max(a["wall_s"], b["wall_s"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=8, help="plans per host and mode")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--deadline", type=float, default=240.0, help="seconds per mode before a stuck host is killed")
    args = parser.parse_args()

    from airflow_flink_replay.local.demo import DemoTopics, production_program
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    stack = LocalStack(StackConfig(workdir=Path(os.environ.get("FLINK_REPLAY_STACK_DIR") or ROOT / ".stack"))).info()
    if stack is None:
        print("local stack is not up: run `.venv/bin/flink-replay stack up`", file=sys.stderr)
        return 2
    url = stack.rest_url("replay")
    topics = DemoTopics.named(f"hosts-{int(time.time())}")
    program = production_program(stack, topics, "afr-hosts-bench", "afr-hosts-bench")
    work = Path(tempfile.mkdtemp(prefix="afr-hosts-"))
    results = [_mode(url, f"file://{work / 'leases'}", program, args.calls, work, stack.flink_home, args.deadline)]
    results.append(_mode(url, None, program, args.calls, work, stack.flink_home, args.deadline))
    # a collision can leave the JobManager's Python gateway taken (every later program fails): start it fresh
    LocalStack(StackConfig(workdir=Path(stack.workdir))).recycle_cluster("replay")
    print(f"two hosts, {args.calls} PythonDriver plans each, on {url}")
    print(f"{'mode':<16} {'calls':>5} {'overlapping':>11} {'collisions retried':>18} {'failed':>6} "
          f"{'never answered':>14} {'wall s':>7}")
    for r in results:
        print(f"{r['mode']:<16} {r['calls']:>5} {r['overlapping_calls']:>11} {r['collisions_retried']:>18} "
              f"{r['failed_calls']:>6} {r['calls_never_answered']:>14} {r['wall_s']:>7}")
        for failure in r["failures"][:3]:
            print(f"  failed: {failure}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

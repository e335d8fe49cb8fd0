"""JobManager metaspace across many replay submissions (run: ``.venv/bin/python benchmarks/jobmanager_soak.py``).

Every replay costs the JobManager two PythonDriver runs: the identity preflight's ``POST /jars/{id}/plan``
and the ``POST /jars/{id}/run`` that submits it. Each run loads the job's classes (the flink-agents fat jar,
the Kafka connector) into the JobManager's metaspace. A JobManager at Flink's default 256 MB died of
``OutOfMemoryError: Metaspace`` after 21 submissions / 47 PythonDriver runs under a real scheduler, and
with it production, which ran there.

This soak submits ``--submissions`` (default 50) Flink Agents jobs the way a replay does (plan, then run,
then the job ends: cancelled once RUNNING) to one cluster (default: the local stack's replay cluster) and
prints, after each one, the JobManager's metaspace (used and its limit), heap and loaded/unloaded classes —
read right after the submission, and again after a full GC (``jcmd <pid> GC.run``, local JobManagers only),
which is what decides whether the growth is garbage or a leak. At the end: growth per submission
(least-squares slope over the after-GC figures) and how many submissions the limit lasts. A TaskManager
filling up with the agent jobs' classes is replaced on the way (that leak is the TaskManager's, not measured
here). Needs the local stack up.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MB = 2**20


def slope(values: list[float]) -> float:
    """Least-squares growth per step."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    return num / sum((i - mean_x) ** 2 for i in range(n))


def series_tail(values: list[float]) -> float:
    return values[-1] if values else 0.0


def full_gc(pid: int | None, java_home: str) -> bool:
    """Ask the local JobManager JVM for a full GC (class unloading happens there)."""
    jcmd = Path(java_home, "bin", "jcmd")
    if pid is None or not (jcmd.exists() or shutil.which("jcmd")):
        return False
    cmd = [str(jcmd) if jcmd.exists() else "jcmd", str(pid), "GC.run"]
    return subprocess.run(cmd, capture_output=True, timeout=60, check=False).returncode == 0


def main() -> int:
    """Set up, submit in a loop, report (one linear script)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=50)
    parser.add_argument("--cluster", choices=["replay", "production"], default="replay")
    parser.add_argument("--no-gc", action="store_true", help="do not force a full GC after each submission")
    parser.add_argument("--calls", default="plan,run", help="PythonDriver calls per submission: plan,run | plan | run")
    parser.add_argument(
        "--recycle-below-mb", type=float, default=96.0,
        help="the recycling policy: restart the cluster (JobManager + TaskManager) when its JobManager has less "
        "free metaspace than this after a submission (0: never — the JobManager then dies of OutOfMemoryError)",
    )
    args = parser.parse_args()

    from airflow_flink_replay.core.flink_models import FlinkPythonProgram
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.hooks.flink_submit import RestPythonSubmitter
    from airflow_flink_replay.local.demo import DemoTopics, create_topics, production_program
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    local = LocalStack(StackConfig(workdir=ROOT / ".stack"))
    stack = local.info()
    if stack is None:
        print("local stack is not up: run `.venv/bin/flink-replay stack up`", file=sys.stderr)
        return 2
    url = stack.rest_url(args.cluster)
    prefix = "replay" if args.cluster == "replay" else "flink"
    jm = next(p for p in stack.processes if p.name == f"{prefix}-jobmanager")
    # the soak measures the leak, so it must not be stopped by the guard that protects against it
    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=url, min_metaspace_headroom_mb=0))
    submitter = RestPythonSubmitter(hook, flink_home=stack.flink_home)
    topics = DemoTopics.named(f"soak-{int(time.time())}")
    create_topics(stack.kafka_bootstrap, topics)

    def memory(label: str) -> tuple[float, float]:
        # REST answers from a cache and refreshes it in the background: ask, wait for the refresh, ask again
        hook.jobmanager_memory()
        time.sleep(fetch_interval)
        m = hook.jobmanager_memory()
        print(f"  {label:<9} metaspace {m.metaspace_used / MB:7.1f} / {m.metaspace_max / MB:.0f} MB   heap "
              f"{m.heap_used / MB:7.1f} / {m.heap_max / MB:.0f} MB   classes {m.classes_loaded:.0f} loaded, "
              f"{m.classes_unloaded:.0f} unloaded", flush=True)
        return m.metaspace_used / MB, m.metaspace_max / MB

    print(f"JobManager {url} (pid {jm.pid}), {args.submissions} replay-shaped submissions (plan + run + cancel)")
    fetch_interval = float(hook.get_jobmanager_config().get("metrics.fetcher.update-interval", 10000)) / 1000 + 0.5
    if not args.no_gc:
        full_gc(jm.pid, stack.java_home)
    start, limit = memory("start")
    after_run: list[float] = []
    after_gc: list[float] = []
    recycled: list[int] = []
    began = time.monotonic()
    for i in range(1, args.submissions + 1):
        name = f"soak-{i:03d}-{topics.capture}"
        program = FlinkPythonProgram.model_validate(production_program(stack, topics, name, name))
        if "plan" in args.calls:
            submitter.plan(program)
        if "run" in args.calls:
            job_id = submitter.submit(program).job_id
            hook.wait_for_job_state(job_id, ("RUNNING",), timeout=180)
            hook.cancel_job(job_id)
            hook.wait_for_job_state(job_id, ("CANCELED",), timeout=120)
        print(f"submission {i:3d} ({time.monotonic() - began:6.0f} s)", flush=True)
        after_run.append(memory("after")[0])
        if not args.no_gc and full_gc(jm.pid, stack.java_home):
            after_gc.append(memory("after GC")[0])
        if args.recycle_below_mb and limit - series_tail(after_gc or after_run) < args.recycle_below_mb:
            print(f"  recycling the {args.cluster} cluster: less than {args.recycle_below_mb:g} MB of JobManager "
                  "metaspace left (`flink-replay stack recycle-replay`)", flush=True)
            local.recycle_cluster(args.cluster)
            hook = FlinkRestHook(settings=FlinkRestSettings(base_url=url, min_metaspace_headroom_mb=0))
            submitter = RestPythonSubmitter(hook, flink_home=stack.flink_home)
            jm = next(p for p in local.info().processes if p.name == f"{prefix}-jobmanager")  # type: ignore[union-attr]
            recycled.append(i)
            if not args.no_gc:
                full_gc(jm.pid, stack.java_home)
            memory("recycled")
        elif local.taskmanager_metaspace_used(args.cluster) > 0.7:
            print("  (replacing the TaskManager: its metaspace is 70% full of agent jobs' classes)")
            local.restart_taskmanager(args.cluster)

    series = after_gc or after_run
    # growth per submission, measured within each JobManager lifetime (a recycle starts it afresh)
    segments, begin = [], 0
    for end in [*recycled, len(series)]:
        segments.append(series[begin:end])
        begin = end
    slopes = [slope(seg) for seg in segments if len(seg) >= 3]
    per = sum(slopes) / len(slopes) if slopes else slope(series)
    print(f"\nmetaspace: {start:.1f} MB at start, {series[-1]:.1f} MB after {len(series)} submissions "
          f"({'after a full GC each' if after_gc else 'no GC forced'}); limit {limit:.0f} MB")
    print(f"growth per submission ({args.calls}): {per:.2f} MB (least squares within each JobManager lifetime)")
    if per > 0.05:
        print(f"a fresh JobManager's {limit:.0f} MB last about {(limit - start) / per:.0f} submissions at this rate")
    else:
        print("no lasting growth: the classes of ended submissions are unloaded")
    print(f"recycled after submissions {recycled or 'none'} (policy: under {args.recycle_below_mb:g} MB free)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

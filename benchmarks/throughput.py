"""Throughput of the release gate: N gate runs in flight at once on one replay cluster, for N = 1, 2, 4.

    .venv/bin/python benchmarks/throughput.py [--n 1 2 4] [--airflow celery|standalone] [--candidate v1|v2|module:attr]
        [--window 8] [--workers 2] [--warmup] [--json PATH]

Needs the local stack up (``flink-replay stack up``: production's cluster and the replay cluster, 4 task slots
each), an idle replay cluster and as many free slots on production's cluster as the largest N. ``--airflow
celery`` (the default) needs PostgreSQL and Redis on the machine (``make system-deps``).

What it does:

- deploys the review agent v1 as max(N) productions of its own (the production lease serialises the runs of one
  production, so N runs in flight need N productions) while one Airflow starts on a DAG folder with one gate DAG
  per production: the Celery one (:class:`~airflow_flink_replay.local.celery_airflow.CeleryAirflow`, ``--workers``
  workers acting as hosts of their own) or ``airflow standalone`` (LocalExecutor, one host);
- for each N: triggers the gate of the first N productions over the REST API at once (``conf: {candidate}``),
  feeds each production three windows of reviews as soon as its run has resumed it (drain mode: nothing in flight
  at the stop, and nothing fed while the run waits), samples the replay cluster's ``/overview`` every 2 s, and
  waits for every run;
- reports per N: each run's wall time (its DAG run's start → end from the REST API), the batch's (first start →
  last end), each run's queueing from its run record (production's lease ``lease.waited_s``; the replays'
  submission: ``capacity_wait_s`` for free task slots and ``submit_lock_wait_s`` for the JobManager's submission
  lock, one submission for every variant, so the figure of the run is the largest of its variants'), the replay
  cluster's slots in use (peak and time-weighted mean, of the total) and the verdicts. Prints a table; ``--json``
  writes it all, the slot samples included.

One Airflow and one set of productions for every N, started once for the largest: Airflow's start (~60 s for the
Celery one: PostgreSQL, Redis, six processes) and a production's deployment (~40 s each) would otherwise be paid
again per N, and the batches would differ in more than N (a cold Airflow's first run is slower). The batches run
one after another, each once the replay cluster is idle again, so no run of one batch waits for another's.
``--warmup`` runs one unreported gate first (imports and JIT of a fresh Airflow land there, not in N = 1).

Cleanup, also on Ctrl-C or a failure: the replay jobs of this benchmark's runs still on the replay cluster are
cancelled, Airflow is stopped, the productions are cancelled and their topics, memories and savepoints removed
(``tests.dag_testing.stop_production``). The work folder (``<stack>/bench-throughput/<time>``: Airflow's logs, the
run folders) is kept, less the Celery Airflow's PostgreSQL data; its path is printed.

Cost (2 cores, Celery): start and four deployments ~4 min, N = 1 ~2.5 min, N = 2 ~4 min, N = 4 ~8 min, cleanup
~1 min: 20 minutes or so.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import statistics
import sys
import threading
import time
import traceback
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

V1, V2 = "examples.review_agent.v1.job:job", "examples.review_agent.v2.job:job"
CANDIDATES = {"v1": V1, "v2": V2}
#: the verdict each of the demo's candidates gets (v1 is production's own agent, v2 changes its outputs)
EXPECTED = {V1: "PASS", V2: "FAIL"}
DAG_PREFIX = "throughput_gate"
RUN_PREFIX = "throughput"
SAMPLE_S = 2.0
TERMINAL = ("success", "failed")


# ------------------------------------------------------------------------------------------------- pure parts
class SlotSample(NamedTuple):
    """One look at the replay cluster's ``/overview``: seconds since the batch began, slots total and free."""

    at: float
    total: int
    available: int

    @property
    def in_use(self) -> int:
        """Slots in use (0 while no TaskManager is registered)."""
        return max(0, self.total - self.available)


def slot_use(samples: list[SlotSample], per_run: int) -> dict[str, Any]:
    """The replay cluster's slot use over ``samples``: the total, the peak in use, the time-weighted mean in use
    (each sample holds until the next one), each as a share of the total, and the share of the time with fewer
    than ``per_run`` slots free (no room for another run's replays). Figures are None without samples; with one
    sample the mean is its value."""
    if not samples:
        return {"slots_total": None, "peak_in_use": None, "mean_in_use": None, "peak_share": None,
                "mean_share": None, "short_share": None, "sampled_s": 0.0, "samples": 0}  # fmt: skip
    ordered = sorted(samples, key=lambda s: s.at)
    total = max(s.total for s in ordered)
    span = ordered[-1].at - ordered[0].at
    if span > 0:
        widths = [b.at - a.at for a, b in itertools.pairwise(ordered)]
        mean = sum(s.in_use * w for s, w in zip(ordered, widths, strict=False)) / span
        short = sum(w for s, w in zip(ordered, widths, strict=False) if s.available < per_run) / span
    else:
        mean = float(ordered[0].in_use)
        short = 1.0 if ordered[0].available < per_run else 0.0
    peak = max(s.in_use for s in ordered)
    return {
        "slots_total": total,
        "peak_in_use": peak,
        "mean_in_use": round(mean, 2),
        "peak_share": round(peak / total, 3) if total else None,
        "mean_share": round(mean / total, 3) if total else None,
        "short_share": round(short, 3),
        "sampled_s": round(span, 1),
        "samples": len(ordered),
    }


def _at(value: str | None) -> datetime | None:
    """An ISO time of the REST API or the run record (``Z`` or an offset), or None."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _largest(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def run_row(production: str, dag_run: dict[str, Any], record: dict[str, Any], hosts: list[str]) -> dict[str, Any]:
    """One gate run's figures: its DAG run (REST API ``/dags/{id}/dagRuns/{run}``) and its run record (``{}``
    when it wrote none). The replays' waits are the largest of the variants' (one submission for all)."""
    started, ended = _at(dag_run.get("start_date")), _at(dag_run.get("end_date"))
    variants = record.get("variants") or []
    lease = record.get("lease") or {}
    return {
        "production": production,
        "dag_id": dag_run.get("dag_id"),
        "run_id": dag_run.get("dag_run_id"),
        "state": dag_run.get("state"),
        "verdict": record.get("verdict"),
        "start_date": dag_run.get("start_date"),
        "end_date": dag_run.get("end_date"),
        "wall_s": round((ended - started).total_seconds(), 1) if started and ended else None,
        "lease_wait_s": lease.get("waited_s"),
        "capacity_wait_s": _largest([v.get("capacity_wait_s") for v in variants]),
        "submit_lock_wait_s": _largest([v.get("submit_lock_wait_s") for v in variants]),
        "hosts": sorted(set(hosts)),
    }


def batch_row(n: int, runs: list[dict[str, Any]], samples: list[SlotSample], per_run: int) -> dict[str, Any]:
    """One batch of ``n`` runs: its wall time (the first run's start → the last one's end), runs an hour, the
    slot use (:func:`slot_use`), the verdicts, every run, and the slot samples."""
    starts = [t for r in runs if (t := _at(r.get("start_date")))]
    ends = [t for r in runs if (t := _at(r.get("end_date")))]
    batch_s = round((max(ends) - min(starts)).total_seconds(), 1) if starts and len(ends) == len(runs) else None
    verdicts: dict[str, int] = {}
    for r in runs:
        verdicts[str(r.get("verdict"))] = verdicts.get(str(r.get("verdict")), 0) + 1
    return {
        "n": n,
        "batch_s": batch_s,
        "runs_per_hour": round(n * 3600 / batch_s, 1) if batch_s else None,
        "slots": slot_use(samples, per_run),
        "verdicts": verdicts,
        "runs": runs,
        "slot_samples": [list(s) for s in sorted(samples, key=lambda s: s.at)],  # [seconds, total, free]
    }


def _spread(values: list[float | None], *, middle: bool = True) -> str:
    """``min/median/max`` (or ``median/max``) of the values present, ``-`` without any."""
    present = sorted(v for v in values if v is not None)
    if not present:
        return "-"
    parts = [present[0], statistics.median(present), present[-1]] if middle else [statistics.median(present),
                                                                                  present[-1]]  # fmt: skip
    return "/".join(f"{p:.0f}" if p >= 10 else f"{p:.1f}" for p in parts)


def _slots_cell(slots: dict[str, Any]) -> str:
    if slots.get("slots_total") is None:
        return "-"
    share = slots.get("mean_share")
    return (f"{slots['peak_in_use']} / {slots['mean_in_use']:.1f} of {slots['slots_total']}"
            f" ({share:.0%})" if share is not None else f"{slots['peak_in_use']} / {slots['mean_in_use']:.1f}")


def format_table(batches: list[dict[str, Any]]) -> str:
    """The batches as a table (one row per N; waits as median/max over its runs, in seconds), then one line per
    run."""
    header = (f"{'N':>3}  {'batch s':>8}  {'runs/h':>6}  {'run s min/med/max':>18}  {'lease wait':>10}  "
              f"{'slot wait':>10}  {'lock wait':>10}  {'slots peak / mean':>20}  {'short':>5}  verdicts")  # fmt: skip
    lines = [header, "-" * len(header)]
    for b in batches:
        runs = b["runs"]
        slots = b["slots"]
        short = slots.get("short_share")
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(b["verdicts"].items()))
        lines.append(
            f"{b['n']:>3}  {_num(b['batch_s']):>8}  {_num(b['runs_per_hour']):>6}  "
            f"{_spread([r['wall_s'] for r in runs]):>18}  "
            f"{_spread([r['lease_wait_s'] for r in runs], middle=False):>10}  "
            f"{_spread([r['capacity_wait_s'] for r in runs], middle=False):>10}  "
            f"{_spread([r['submit_lock_wait_s'] for r in runs], middle=False):>10}  "
            f"{_slots_cell(slots):>20}  {'-' if short is None else f'{short:.0%}':>5}  {verdicts}"
        )
    lines.append("")
    lines.append("waits: median/max over the batch's runs, in s (lease: production's; slot: for free task slots on the "
                 "replay cluster;")  # fmt: skip
    lines.append("lock: for the JobManager's submission lock); short: share of the time with too few free slots for "
                 "one more run's replays")  # fmt: skip
    for b in batches:
        for r in b["runs"]:
            lines.append(
                f"  N={b['n']} {r['production']:<6} {r['run_id']}  {r['state']:<7} {r['verdict'] or '-':<12} "
                f"{_num(r['wall_s'])} s  lease {_num(r['lease_wait_s'])} s  slots {_num(r['capacity_wait_s'])} s  "
                f"lock {_num(r['submit_lock_wait_s'])} s  hosts {','.join(r['hosts']) or '-'}"
            )
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def dag_file(specs: list[Path]) -> str:
    """A DAG file with one gate DAG per spec: ``throughput_gate_<i>``."""
    lines = ["from airflow_flink_replay.core.replay_spec import ReplaySpec",
             "from airflow_flink_replay.dag_factory import build_replay_dag", ""]  # fmt: skip
    for i, path in enumerate(specs):
        lines.append(f"gate_{i} = build_replay_dag(ReplaySpec.from_yaml({str(path)!r}), "
                     f"dag_id='{DAG_PREFIX}_{i}', kind='gate')")  # fmt: skip
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------- on the stack
def _environment() -> None:
    """A throw-away AIRFLOW_HOME for this process (the benchmark imports Airflow's modules; its Airflow has its own)."""
    import tempfile

    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="afr-bench-throughput-"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    for key, value in {"MEM0_TELEMETRY": "False", "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}.items():
        os.environ.setdefault(key, value)


def _overview(url: str) -> dict[str, Any] | None:
    import requests

    try:
        r = requests.get(f"{url}/overview", timeout=5)
        r.raise_for_status()
        return dict(r.json())
    except (requests.RequestException, ValueError):
        return None


def require_stack(n_max: int) -> Any:
    """The local stack's info; exits naming the fix when it is not up, has no replay cluster, the replay cluster
    is busy, or production's cluster has fewer than ``n_max`` free slots."""
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    local = LocalStack(StackConfig())
    info = local.info()
    if info is None:
        raise SystemExit(f"the local stack is not up (no stack in {local.workdir}). This benchmark needs it: run "
                         "`flink-replay stack up` (or `make stack-up`) first")  # fmt: skip
    production, replay = _overview(info.flink_rest_url), None
    if info.replay_flink_rest_url:
        replay = _overview(info.replay_flink_rest_url)
    if production is None or (info.replay_flink_rest_url and replay is None):
        raise SystemExit(f"the local stack is not up: Flink does not answer at {info.flink_rest_url} / "
                         f"{info.replay_flink_rest_url}. Fix: `flink-replay stack up` (it restarts what died)")
    if not info.replay_flink_rest_url or replay is None:
        raise SystemExit("the stack runs no replay cluster: this benchmark measures one. Fix: `flink-replay stack up` "
                         "without FLINK_REPLAY_REPLAY_CLUSTER=0")  # fmt: skip
    if replay["slots-available"] < replay["slots-total"] or replay["taskmanagers"] < 1:
        raise SystemExit(f"the replay cluster at {info.replay_flink_rest_url} is not idle ({replay['slots-available']} "
                         f"of {replay['slots-total']} slots free, {replay['taskmanagers']} TaskManagers): the "
                         "benchmark measures it alone. Fix: wait until its replays end (or `flink-replay stack "
                         "restart-taskmanager replay` when it has none)")  # fmt: skip
    if production["slots-available"] < n_max:
        raise SystemExit(f"production's cluster at {info.flink_rest_url} has {production['slots-available']} free "
                         f"slots; {n_max} productions need {n_max}. Fix: cancel other jobs there, or a smaller --n")
    return info


class SlotSampler:
    """Samples ``/overview`` of the cluster at ``url`` every ``every`` seconds in a thread, from :meth:`start` to
    :meth:`stop` (an answer that fails is skipped)."""

    def __init__(self, url: str, every: float = SAMPLE_S) -> None:
        self.url, self.every = url, every
        self.samples: list[SlotSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="slot-sampler")
        self._began = 0.0

    def _run(self) -> None:
        while True:
            seen = _overview(self.url)
            if seen is not None:
                self.samples.append(SlotSample(round(time.monotonic() - self._began, 2), int(seen["slots-total"]),
                                               int(seen["slots-available"])))  # fmt: skip
            if self._stop.wait(self.every):
                return

    def start(self) -> SlotSampler:
        self._began = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> list[SlotSample]:
        self._stop.set()
        self._thread.join(10)
        return self.samples


def feed_on_resume(stack: Any, production: dict[str, Any], count: int, start_index: int) -> Any:
    """Feeds a production ``count`` reviews (4 a second) once it runs as a job other than the ones running now: its
    gate run has stopped and resumed it, and the window is what arrives next."""
    from airflow_flink_replay.local.demo import ReviewFeeder
    from tests.dag_testing import AfterResume

    feeder = ReviewFeeder(stack.kafka_bootstrap, production["topics"].reviews, start_index=start_index, rate=4,
                          count=count)  # fmt: skip
    return AfterResume(feeder, stack, production["job_name"])


def make_airflow(kind: str, stack: Any, work: Path, specs: list[Path], workers: int) -> Any:
    """The Airflow (not launched yet) on a DAG folder of one gate DAG per spec."""
    from airflow_flink_replay.local.airflow_runner import airflow_env
    from airflow_flink_replay.local.airflow_server import AirflowServer, free_port

    dags = work / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    (dags / "throughput_gates.py").write_text(dag_file(specs))
    env = airflow_env(stack, work / "airflow", specs[0])
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    if kind == "celery":
        from airflow_flink_replay.local.celery_airflow import CeleryAirflow

        server: Any = CeleryAirflow(env, free_port(), work / "airflow.log", workers=workers, run_id_prefix=RUN_PREFIX)
    else:
        server = AirflowServer(env, free_port(), work / "airflow.log", run_id_prefix=RUN_PREFIX)
    return server


def _wait_all(server: Any, runs: list[tuple[int, str]], timeout: float) -> dict[str, dict[str, Any]]:
    """Poll every run until all ended; returns each run's DAG run (REST API) by run id. Prints each end."""
    deadline = time.monotonic() + timeout
    ended: dict[str, dict[str, Any]] = {}
    while len(ended) < len(runs):
        for i, run_id in runs:
            if run_id in ended:
                continue
            dag_run = server.api("GET", f"/dags/{DAG_PREFIX}_{i}/dagRuns/{run_id}")
            if dag_run["state"] in TERMINAL:
                ended[run_id] = dag_run
                print(f"    {DAG_PREFIX}_{i} {run_id}: {dag_run['state']} ({len(ended)}/{len(runs)})", flush=True)
        if len(ended) < len(runs):
            if time.monotonic() > deadline:
                late = [r for _, r in runs if r not in ended]
                raise RuntimeError(f"runs still going after {timeout:.0f} s: {late}")
            time.sleep(3)
    return ended


def _wait_idle(url: str, timeout: float = 180.0) -> None:
    """Until every slot of the cluster at ``url`` is free again (the last batch's jobs have ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = _overview(url)
        if seen and seen["taskmanagers"] >= 1 and seen["slots-available"] >= seen["slots-total"]:
            return
        time.sleep(2)
    print(f"  note: the replay cluster at {url} still had slots in use after {timeout:.0f} s", flush=True)


def _ready_replay_cluster(stack: Any) -> None:
    """Before a batch: a TaskManager alive on the replay cluster, the cluster idle, its JobManager recycled when its
    metaspace is worn (what the demo and the test suite do; only when nothing runs there)."""
    from airflow_flink_replay.local.stack import LocalStack, StackConfig
    from tests.dag_testing import revive_dead_taskmanagers

    revive_dead_taskmanagers(stack)
    _wait_idle(stack.replay_flink_rest_url)
    if LocalStack(StackConfig(workdir=Path(stack.workdir))).recycle_if_worn("replay"):
        print("  (the replay cluster's JobManager metaspace was worn: recycled before this batch)", flush=True)


def run_batch(server: Any, stack: Any, productions: list[dict[str, Any]], n: int, args: argparse.Namespace,
              index: int, triggered: list[str]) -> dict[str, Any]:
    """Trigger the gates of the first ``n`` productions at once, feed each once resumed, sample the replay
    cluster until all ended; the batch's figures (:func:`batch_row`)."""
    from airflow_flink_replay import ids
    from tests.dag_testing import run_record_of

    _ready_replay_cluster(stack)
    feeders = [feed_on_resume(stack, p, 3 * args.window, 100_000 * (index + 1) + 10_000 * i)
               for i, p in enumerate(productions[:n])]  # fmt: skip
    sampler = SlotSampler(stack.replay_flink_rest_url).start()
    with contextlib.ExitStack() as feeding:
        for feeder in feeders:
            feeding.enter_context(feeder)
        runs = []
        for i in range(n):
            run_id = server.trigger(f"{DAG_PREFIX}_{i}", {"candidate": args.candidate})
            triggered.append(run_id)
            runs.append((i, run_id))
        print(f"  N={n}: triggered {', '.join(r for _, r in runs)}", flush=True)
        try:
            ended = _wait_all(server, runs, args.timeout * 60)
        finally:
            samples = sampler.stop()
    rows = []
    for i, run_id in runs:
        record = run_record_of(f"file://{Path(productions[i]['spec_path']).parent / 'runs'}", run_id)
        tis = server.task_instances(f"{DAG_PREFIX}_{i}", run_id)
        hosts = [str(ti["hostname"]) for task, ti in tis.items()
                 if (task == ids.TASK_SUBMIT_REPLAYS or task.startswith("replay_")) and ti.get("hostname")]  # fmt: skip
        rows.append(run_row(f"p{i}", ended[run_id], record, hosts))
    return batch_row(n, rows, samples, args.per_run)


def _cancel_our_replays(stack: Any, run_ids: list[str]) -> list[str]:
    """Cancel the jobs on the replay cluster that belong to ``run_ids`` and still run (a run stopped midway)."""
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.replay_flink_rest_url))
    cancelled = []
    for job in hook.list_jobs().jobs:
        if job.state not in ("FINISHED", "FAILED", "CANCELED", "CANCELLING") and any(r in job.name for r in run_ids):
            with contextlib.suppress(Exception):
                hook.cancel_job(job.jid)
                cancelled.append(job.name)
    return cancelled


def _cleanup(stack: Any, server: Any, productions: list[dict[str, Any]], triggered: list[str]) -> None:
    """Cancel this benchmark's replay jobs still running, stop Airflow, stop every production (each step even when
    one before failed)."""
    from tests.dag_testing import stop_production

    print("cleaning up: replay jobs of these runs, Airflow, productions ...", flush=True)
    if triggered:
        with contextlib.suppress(Exception):
            if left := _cancel_our_replays(stack, triggered):
                print(f"  cancelled replay jobs still running: {left}", flush=True)
    if server is not None:
        try:
            server.stop()
        except Exception as err:
            print(f"  stopping Airflow failed: {err}", flush=True)
    for production in productions:
        try:
            stop_production(stack, production)
        except Exception as err:
            print(f"  stopping production {production['job_name']} failed: {err}", flush=True)
    if server is not None and (server.home / "postgres").is_dir():
        import shutil

        shutil.rmtree(server.home / "postgres", ignore_errors=True)  # the metadata DB's files (~50 MB)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def measure(args: argparse.Namespace, batches: list[dict[str, Any]]) -> None:
    """Set up (productions, Airflow), run the batches into ``batches``, clean up (also on Ctrl-C or failure)."""
    from tests.dag_testing import deploy_planned_production, plan_test_production

    n_max = max(args.n)
    stack = require_stack(n_max)
    work = Path(stack.workdir) / "bench-throughput" / time.strftime("%Y%m%dT%H%M%S")
    work.mkdir(parents=True)
    print(f"work folder (Airflow's logs, the run folders): {work}", flush=True)
    planned = [plan_test_production(stack, work / f"p{i}", f"thru{i}", window_records=args.window)
               for i in range(n_max)]  # fmt: skip
    productions: list[dict[str, Any]] = []
    server, triggered = None, []
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server = make_airflow(args.airflow, stack, work, [Path(p["spec_path"]) for p in planned], args.workers)
        server.launch()
        for plan in planned:  # while Airflow starts
            productions.append(deploy_planned_production(stack, plan))
            print(f"  production {plan['job_name']} deployed", flush=True)
        server.wait_healthy(600)
        for i in range(n_max):
            server.wait_for_dag(f"{DAG_PREFIX}_{i}")
        print(f"Airflow ({args.airflow}) at {server.base}: {n_max} gate DAGs", flush=True)
        if args.warmup:
            print("warm-up: one gate run, not reported", flush=True)
            run_batch(server, stack, productions, 1, args, 0, triggered)
        for index, n in enumerate(args.n, start=1):
            batches.append(run_batch(server, stack, productions, n, args, index, triggered))
    finally:  # every planned production: one whose deployment failed midway may have left a job or topics
        _cleanup(stack, server, planned, triggered)


def report(args: argparse.Namespace, batches: list[dict[str, Any]], failure: str | None) -> None:
    """Print the table of the batches measured; write them with ``--json``."""
    if batches:
        print()
        print(f"Gate runs in flight on one replay cluster; Airflow {args.airflow}"
              f"{f' ({args.workers} workers)' if args.airflow == 'celery' else ''}, candidate {args.candidate}, "
              f"window {args.window} records, {args.per_run} slots a run")  # fmt: skip
        print(format_table(batches))
    if args.json:
        args.json.write_text(json.dumps({**summary(args, batches), "failure": failure}, indent=2, default=str))
        print(f"\nwritten: {args.json}")


def summary(args: argparse.Namespace, batches: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``--json`` writes (besides ``failure``)."""
    return {
        "benchmark": "throughput",
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "airflow": args.airflow,
        "workers": args.workers if args.airflow == "celery" else 1,
        "candidate": args.candidate,
        "window_records": args.window,
        "slots_per_run": args.per_run,
        "cpus": os.cpu_count(),
        "batches": batches,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 2, 4], help="runs in flight per batch (default 1 2 4)")
    parser.add_argument("--airflow", choices=["celery", "standalone"], default="celery",
                        help="the Celery Airflow (workers as hosts of their own) or airflow standalone (one host)")
    parser.add_argument("--workers", type=int, default=2, help="--airflow celery: how many workers (default 2)")
    parser.add_argument("--candidate", default="v1",
                        help="v1 (PASS), v2 (FAIL) or a job definition's module:attr (default v1)")
    parser.add_argument("--window", type=int, default=8, help="records per replay window (default 8)")
    parser.add_argument("--timeout", type=float, default=60, help="minutes a batch may take (default 60)")
    parser.add_argument("--warmup", action="store_true", help="one unreported gate run before the batches")
    parser.add_argument("--json", type=Path, help="write the figures (and the slot samples) to this file")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.n) or args.window < 1 or args.workers < 1:
        parser.error("--n, --window and --workers must be at least 1")
    args.n = list(dict.fromkeys(args.n))
    args.candidate = CANDIDATES.get(args.candidate, args.candidate)
    _environment()
    from airflow_flink_replay.core.replay_spec import variant_names

    args.per_run = len(variant_names())  # the demo spec: one A/A pair, parallelism 1: a slot per variant
    batches: list[dict[str, Any]] = []
    failure = None
    try:
        measure(args, batches)
    except KeyboardInterrupt:
        failure = "interrupted"
    except Exception as err:  # what was measured before is still shown
        traceback.print_exc()
        failure = f"failed: {type(err).__name__}: {err}"
    report(args, batches, failure)
    if failure:
        print(f"\n{failure} (cleaned up); {len(batches)} of {len(args.n)} batches measured", file=sys.stderr)
        return 130 if failure == "interrupted" else 1
    expected = EXPECTED.get(args.candidate)
    verdicts = [r["verdict"] for b in batches for r in b["runs"]]
    return 0 if all(v is not None and (expected is None or v == expected) for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())

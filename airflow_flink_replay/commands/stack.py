"""``flink-replay stack prepare | up | down | status | restart-taskmanager | recycle-replay``: the embedded local
stack. ``up --airflow celery`` also starts a distributed Airflow beside it
(:mod:`airflow_flink_replay.local.celery_airflow`), which ``status`` shows and ``down`` stops.

Exit codes: 0 done (``status``: every part answers); 1 it failed or a part does not answer, or the stack folder's
``stack.json`` is not a stack record (one line naming it and the fix); 64 a command line that does not parse (a
port out of 1-65535, fewer than one task slot).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_flink_replay.commands.arguments import port, positive_int
from airflow_flink_replay.commands.output import one_line
from airflow_flink_replay.exceptions import StackSetupError

if TYPE_CHECKING:
    from airflow_flink_replay.local.stack import LocalStack, StackInfo


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``stack`` and its actions."""
    p = sub.add_parser("stack", help="set up, start, inspect or stop the embedded local stack")
    p.add_argument(
        "action",
        choices=["prepare", "up", "down", "status", "restart-taskmanager", "recycle-replay"],
        help="prepare: fetch and install the parts (the Flink-side venv, tansu, the Kafka connector) without "
        "starting anything: the minutes a first `up` spends on a fresh machine, done ahead. "
        "restart-taskmanager: replace a dead or worn TaskManager (metaspace); running jobs fail over. "
        "recycle-replay: restart the replay cluster's JobManager and TaskManager (the metaspace every Python "
        "submission leaves; run it between replay runs)",
    )
    p.add_argument(
        "--cluster", choices=["production", "replay"], default="production",
        help="restart-taskmanager: whose TaskManager (default production)",
    )
    p.add_argument(
        "--workdir", type=Path, default=None, help="work folder (default: $FLINK_REPLAY_STACK_DIR or ./.stack)"
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where the Flink-side venv and downloads are cached (default: the workdir)",
    )
    p.add_argument("--flink-rest-port", type=port, default=None)
    p.add_argument("--flink-rpc-port", type=port, default=None)
    p.add_argument("--kafka-port", type=port, default=None)
    p.add_argument("--chroma-port", type=port, default=None)
    p.add_argument("--replay-rest-port", type=port, default=None)
    p.add_argument("--replay-rpc-port", type=port, default=None)
    p.add_argument(
        "--no-replay-cluster", action="store_true",
        help="run only production's Flink cluster (replays then share it: see docs/real-cluster.md)",
    )
    p.add_argument("--task-slots", type=positive_int, default=4)
    p.add_argument(
        "--airflow", choices=["celery"], default=None,
        help="up: also start a distributed Airflow beside the stack (CeleryExecutor, PostgreSQL, Redis, workers that "
        "act as hosts of their own) on the stack's connections and the default spec; down stops it",
    )
    p.add_argument("--airflow-workers", type=positive_int, default=2, help="--airflow celery: how many workers")
    p.add_argument("--json", action="store_true", help="print machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Carry out the stack action; a stack folder whose ``stack.json`` cannot be read is one line and exit 1."""
    try:
        return _run(args)
    except StackSetupError as err:
        print(f"stack {args.action}: {one_line(err)}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    """Carry out the stack action."""
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    overrides = {
        "workdir": args.workdir,
        "cache_dir": args.cache_dir,
        "flink_rest_port": args.flink_rest_port,
        "flink_rpc_port": args.flink_rpc_port,
        "kafka_port": args.kafka_port,
        "chroma_port": args.chroma_port,
        "task_slots": args.task_slots,
        "replay_rest_port": args.replay_rest_port,
        "replay_rpc_port": args.replay_rpc_port,
        "replay_cluster": False if args.no_replay_cluster else None,
    }
    config = StackConfig(**{k: v for k, v in overrides.items() if v is not None})
    stack = LocalStack(config)
    if args.action == "prepare":
        started = time.monotonic()
        try:
            stack.install()
        except StackSetupError as err:
            print(f"stack prepare failed: {err}", file=sys.stderr)
            return 1
        print(f"stack parts ready in {time.monotonic() - started:.1f}s (start it: flink-replay stack up)")
        return 0
    if args.action == "up":
        started = time.monotonic()
        try:
            info = stack.up()
        except StackSetupError as err:
            print(f"stack up failed: {err}", file=sys.stderr)
            return 1
        airflow = None
        if args.airflow == "celery":
            try:
                info, airflow = _up_celery_airflow(stack, info, args.airflow_workers)
            except (StackSetupError, RuntimeError) as err:
                print(f"stack up: the Flink stack is up, the Celery Airflow failed: {err}", file=sys.stderr)
                return 1
        if args.json:
            print(info.model_dump_json(indent=2))
        else:
            print(f"stack up in {time.monotonic() - started:.1f}s")
            print(f"  Flink REST   {info.flink_rest_url} (production)")
            if info.replay_flink_rest_url:
                print(f"  Flink REST   {info.replay_flink_rest_url} (replays, connection flink_replay)")
            print(f"  Kafka        {info.kafka_bootstrap} (tansu)")
            print(f"  Mem0 store   chroma http://{info.chroma_host}:{info.chroma_port}")
            print(f"  connections  {info.connections_file}")
            print(f"  stack file   {stack.stack_file}")
            for line in airflow or ():
                print(line)
        return 0
    if args.action in ("restart-taskmanager", "recycle-replay"):
        try:
            if args.action == "recycle-replay":
                stack.recycle_cluster("replay")
            else:
                stack.restart_taskmanager(args.cluster)
        except StackSetupError as err:
            print(f"restart failed: {err}", file=sys.stderr)
            return 1
        print("replay cluster restarted" if args.action == "recycle-replay" else "TaskManager restarted and registered")
        return 0
    if args.action == "down":
        stopped = stack.down()
        print(json.dumps({"stopped": stopped}) if args.json else f"stopped: {', '.join(stopped) or 'nothing'}")
        return 0
    status = stack.status()
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        _print_status(status)
    return 0 if status.get("up") else 1


def default_spec_path(info: StackInfo) -> Path:
    """The spec the stack's Airflow runs the replay DAGs on: ``$FLINK_REPLAY_SPEC``, else the demo's spec in the
    stack folder (``flink-replay demo setup`` writes it)."""
    return Path(os.environ.get("FLINK_REPLAY_SPEC") or Path(info.workdir) / "demo" / "replay_spec.yaml")


def start_celery_airflow(stack: LocalStack, info: StackInfo, *, workers: int = 2, timeout: float = 300.0) -> str:
    """Start a :class:`~airflow_flink_replay.local.celery_airflow.CeleryAirflow` beside the stack (its home
    ``<stack>/airflow-celery``) on the stack's connections and :func:`default_spec_path`, wait until it is healthy,
    and record its parts in ``stack.json`` (``status`` shows them, ``down`` stops them); returns its URL. A start
    that fails stops what it started."""
    from airflow_flink_replay.local.airflow_runner import airflow_env
    from airflow_flink_replay.local.airflow_server import free_port
    from airflow_flink_replay.local.celery_airflow import CeleryAirflow
    from airflow_flink_replay.local.stack import ProcessInfo

    home = Path(info.workdir) / "airflow-celery"
    server = CeleryAirflow(airflow_env(info, home, default_spec_path(info)), free_port(),
                           Path(info.workdir) / "logs" / "airflow-celery.log", run_id_prefix="stack", workers=workers)
    server.launch()
    try:
        server.wait_healthy(timeout)
        parts = [ProcessInfo(name=p.name, pid=p.pid, log=p.log) for p in server.processes()]
        stack.record_airflow(server.base, parts, server.postgres_dir)
    except BaseException:
        server.stop()
        raise
    return server.base


def _up_celery_airflow(stack: LocalStack, info: StackInfo, workers: int) -> tuple[StackInfo, list[str]]:
    """Start the distributed Airflow beside the stack, or keep the one that runs and answers; returns the stack's
    record and the lines that tell a person where it is."""
    from airflow_flink_replay.local.stack import _pid_alive, airflow_answers

    running = info.airflow_url and info.airflow_processes and all(_pid_alive(p.pid) for p in info.airflow_processes)
    if running and info.airflow_url and airflow_answers(info.airflow_url):
        url, note = info.airflow_url, " (already running)"
    else:
        stack.stop_airflow()  # what is left of one that died
        url, note = start_celery_airflow(stack, info, workers=workers), ""
    info = stack.info() or info
    parts = [p.name for p in info.airflow_processes]
    lines = [f"  Airflow      {url}{note} (CeleryExecutor on PostgreSQL and Redis; workers "
             f"{', '.join(n for n in parts if n.startswith('worker-'))})",
             f"  Airflow logs {Path(info.workdir) / 'airflow-celery' / 'logs' / 'parts'}"]
    spec = default_spec_path(info)
    if not spec.exists():
        lines.append(f"  note: no replay spec at {spec}: the replay DAGs show an import error until FLINK_REPLAY_SPEC "
                     "names one or `flink-replay demo setup` writes the demo's")
    return info, lines


def _print_status(status: dict) -> None:
    if "flink" not in status:
        print(f"down: {status.get('reason')}")
        return
    mark = {True: "up  ", False: "DOWN"}
    fl, kf, m0 = status["flink"], status["kafka"], status["mem0"]
    print(f"{mark[fl['taskmanagers'] >= 1]} Flink  {fl['rest_url']}  taskmanagers={fl['taskmanagers']}")
    if rp := status.get("replay_flink"):
        print(f"{mark[rp['taskmanagers'] >= 1]} Flink  {rp['rest_url']}  taskmanagers={rp['taskmanagers']}  (replays)")
    print(f"{mark[kf['answers']]} Kafka  {kf['bootstrap']}  (tansu metadata)")
    print(f"{mark[m0['answers']]} Mem0   {m0['chroma']}  (chroma heartbeat)")
    if af := status.get("airflow"):
        print(f"{mark[af['answers']]} Airflow {af['url']}  (CeleryExecutor; health)")
    for name, p in status["processes"].items():
        print(f"     {name:<18} pid {p['pid']:<8} {'alive' if p['alive'] else 'DEAD'}")

"""``flink-replay stack prepare | up | down | status | restart-taskmanager | recycle-replay``: the embedded local
stack.

Exit codes: 0 done (``status``: every part answers); 1 it failed or a part does not answer, or the stack folder's
``stack.json`` is not a stack record (one line naming it and the fix); 64 a command line that does not parse (a
port out of 1-65535, fewer than one task slot).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from airflow_flink_replay.commands.arguments import port, positive_int
from airflow_flink_replay.commands.output import one_line
from airflow_flink_replay.exceptions import StackSetupError


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
    for name, p in status["processes"].items():
        print(f"     {name:<18} pid {p['pid']:<8} {'alive' if p['alive'] else 'DEAD'}")

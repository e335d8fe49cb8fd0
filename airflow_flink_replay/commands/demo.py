"""``flink-replay demo``: the whole story on the embedded stack, end to end.

1. brings the stack up (all set-up included);
2. deploys the review agent v1 as production (Kafka source, capture tee, Kafka action-state store, Mem0
   memories on the stack's Chroma) and feeds it reviews, which seeds production's memories;
3. runs the release-gate DAG with ``airflow dags test`` — candidate v2 → FAIL (labels changed for the
   late-delivery reviews, notify_support called for new customers) — then v1 as its own candidate → PASS,
   while reviews keep flowing into production;
4. prints each verdict, its reasons, production's downtime and the HTML report's path.

``--ui`` instead serves the same DAGs on ``airflow standalone`` (http://127.0.0.1:8080, no login) so a
person can trigger the gate from the UI and click through the run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``demo``."""
    p = sub.add_parser("demo", help="run the end-to-end demo (release gate: v2 FAILs, v1 PASSes)")
    p.add_argument("--ui", action="store_true", help="serve the DAGs on `airflow standalone` instead")
    p.add_argument("--port", type=int, default=8080, help="Airflow UI port for --ui")
    p.add_argument("--window", type=int, default=40, help="records per replay window")
    p.set_defaults(func=run)


def airflow_env(stack: Any, demo_dir: Path, spec_path: Path) -> dict[str, str]:
    """The environment of the demo's Airflow: own AIRFLOW_HOME, the repo's dags, the stack's connections."""
    env = {**os.environ, **stack.env}
    env.update(
        {
            "AIRFLOW_HOME": str(demo_dir / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "FLINK_REPLAY_SPEC": str(spec_path),
            "FLINK_REPLAY_STACK_DIR": stack.workdir,
        }
    )
    for conn_id, conn in json.loads(Path(stack.connections_file).read_text()).items():
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)
    return env


def _airflow(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow", *args], env=env, text=True, check=check)


def _latest_record(runs: Path, dag_id: str) -> dict[str, Any]:
    records = sorted((runs / dag_id).rglob("run_record.json"), key=lambda p: p.stat().st_mtime)
    if not records:
        raise SystemExit(f"no run record under {runs / dag_id}: the DAG run did not get to its last task")
    return json.loads(records[-1].read_text())


def _print_verdict(label: str, record: dict[str, Any]) -> None:
    print(f"\n=== {label}: {record.get('verdict') or 'no verdict'} ===")
    for reason in record.get("reasons") or []:
        if reason.get("severity") in ("fail", "inconclusive"):
            print(f"  [{reason['code']}] {reason['message']}")
    if record.get("downtime_s") is not None:
        print(f"  production downtime (stop -> running again): {record['downtime_s']:.1f} s")
    if record.get("report_dir"):
        print(f"  report: {Path(record['report_dir']) / 'report.html'}")
    print(f"  run record: {record.get('manifest', '').removeprefix('file://').replace('manifest.json', '')}"
          "run_record.json")


def _revive_taskmanager(stack: Any) -> None:
    """Bring back a TaskManager that died (PyFlink's Beam shutdown race can kill it when Python jobs end;
    docs/limitations.md) and redeploy production if it did not survive."""
    import time

    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.local.demo import PRODUCTION_JOB_NAME, DemoTopics, deploy_production
    from airflow_flink_replay.local.stack import LocalStack, StackConfig, flink_taskmanagers

    if flink_taskmanagers(stack.flink_rest_url) >= 1:
        return
    print("the TaskManager died (see docs/limitations.md): restarting it and redeploying production if needed...")
    LocalStack(StackConfig()).restart_taskmanager()
    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    deadline = time.monotonic() + 60  # a job still failing over may come back by itself: do not submit twice
    while time.monotonic() < deadline and any(
        j.name == PRODUCTION_JOB_NAME and j.state in ("RESTARTING", "CREATED", "INITIALIZING", "RECONCILING")
        for j in hook.list_jobs().jobs
    ):
        time.sleep(2)
    deploy_production(stack, DemoTopics.named("demo"))


def run(args: argparse.Namespace) -> int:
    """Carry out the demo."""
    if str(ROOT) not in sys.path:  # the example agent and its review generator live in the checkout
        sys.path.insert(0, str(ROOT))
    from airflow_flink_replay.local.demo import V1, V2, DemoTopics, ReviewFeeder, deploy_production, write_spec
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    print("bringing the local stack up (the first time installs the Flink side: a few minutes)...")
    stack = LocalStack(StackConfig()).up()
    demo_dir = Path(stack.workdir) / "demo"
    spec_path = write_spec(stack, DemoTopics.named("demo"), demo_dir / "replay_spec.yaml", window_records=args.window,
                           runs_dir=demo_dir / "runs")
    print("deploying the review agent v1 as production and feeding it reviews...")
    job_id = deploy_production(stack, DemoTopics.named("demo"))
    print(f"production: Flink job {job_id} ({stack.flink_rest_url}/#/job/running/{job_id}/overview)")
    env = airflow_env(stack, demo_dir, spec_path)
    _airflow(env, "db", "migrate")
    if args.ui:
        print(f"serving Airflow on http://127.0.0.1:{args.port} (Ctrl-C to stop); trigger "
              "flink_agents_release_gate with conf {\"candidate\": \"%s\"}" % V2)
        env["AIRFLOW__API__PORT"] = str(args.port)
        env["AIRFLOW__API__HOST"] = "127.0.0.1"
        with ReviewFeeder(stack.kafka_bootstrap, DemoTopics.named("demo").reviews, start_index=10_000, rate=2):
            return _airflow(env, "standalone", check=False).returncode
    runs = demo_dir / "runs"
    results = {}
    for label, candidate, start in (("candidate v2", V2, 20_000), ("candidate v1", V1, 30_000)):
        _revive_taskmanager(stack)
        if stack.replay_flink_rest_url and LocalStack(StackConfig()).recycle_if_worn("replay"):
            print("recycled the replay cluster (its JobManager's metaspace was filling up: docs/local-stack.md)")
        print(f"\nrunning flink_agents_release_gate with {label} ({candidate}) ...")
        with ReviewFeeder(stack.kafka_bootstrap, DemoTopics.named("demo").reviews, start_index=start, rate=4):
            _airflow(env, "dags", "test", "flink_agents_release_gate", "-c", json.dumps({"candidate": candidate}),
                     check=False)
        results[label] = _latest_record(runs, "flink_agents_release_gate")
        _print_verdict(label, results[label])
    ok = results["candidate v2"].get("verdict") == "FAIL" and results["candidate v1"].get("verdict") == "PASS"
    print("\ndemo", "OK: v2 is stopped at the gate, v1 passes" if ok else "did NOT end as expected")
    return 0 if ok else 1

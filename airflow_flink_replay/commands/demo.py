"""``flink-replay demo``: the whole story on the embedded stack, end to end, on a real Airflow.

1. brings the stack up (all set-up included);
2. deploys the review agent v1 as production (Kafka source, capture tee, Kafka action-state store, Mem0
   memories on the stack's Chroma) and feeds it reviews, which seeds production's memories; meanwhile
   ``airflow standalone`` starts (scheduler with the LocalExecutor, triggerer, DAG processor, UI);
3. triggers the release-gate DAG over Airflow's REST API, as CI does — candidate v2 → FAIL (labels changed
   for the late-delivery reviews, notify_support called for new customers) — then v1 as its own candidate
   → PASS, while reviews keep flowing into production; the tasks run in parallel, the waits in the triggerer;
4. prints one line per chain step of each run (its duration and key figure: savepoint, downtime, records in
   the window, fork size, outputs per variant), the verdict and its reasons, the report's path, and the run's
   production downtime against production stopped and restored by hand once before the runs (the floor);
   everything Airflow prints goes to a log file under ``.stack/demo/logs/`` whose path is printed first.

The spec gives Mem0's LLM key by reference (a placeholder key in ``.stack/demo/llm-api-key``, fresh each
run; Mem0 never calls its LLM here): it is read where Mem0 is built, never written to XCom, logs or reports.

``--noisy`` deploys its own production of the same agent whose stand-in chat model samples like an LLM
(``noisy_job``): the two baselines differ, the report shows the measured noise, and with 100 records per
window and the gate blocking changes of at least 10 points of outputs, v2 still FAILs and v1 PASSes.

``--ui`` keeps Airflow serving after the two runs (http://127.0.0.1:8080, no login) so a person can click
through them and trigger more, while reviews keep flowing; Ctrl-C stops it. With Airflow's
``AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS`` set (``reviewer:admin,outsider:``) it asks for a login instead and
prints where the users' passwords are (the demo's own REST calls log in as the first admin).

Exit codes: 0 the demo ended as expected (v2 FAIL, v1 PASS); 1 it did not, or the stack could not be brought up
(one line naming why and the fix); 64 a command line that does not parse (a port or window out of range).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from airflow_flink_replay.commands.arguments import port as port_number
from airflow_flink_replay.commands.arguments import positive_int
from airflow_flink_replay.commands.output import one_line, printable

ROOT = Path(__file__).resolve().parent.parent.parent


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``demo``."""
    p = sub.add_parser("demo", help="run the end-to-end demo (release gate: v2 FAILs, v1 PASSes)")
    p.add_argument("--ui", action="store_true",
                   help="keep Airflow serving after the two gate runs (Ctrl-C stops it)")
    p.add_argument("--port", type=port_number, default=None,
                   help="Airflow's port (default: 8080 with --ui, otherwise any free port)")
    p.add_argument("--window", type=positive_int, default=None,
                   help="records per replay window (default 40; --noisy 100)")
    p.add_argument("--noisy", action="store_true",
                   help="the chat model samples like an LLM (its own production): the A/A noise is not zero, and the "
                   "gate still FAILs v2 and PASSes v1")
    p.set_defaults(func=run)


def _setup(args: argparse.Namespace) -> Any:
    from airflow_flink_replay.local.demo import NOISY_DEMO, DemoSetup

    return NOISY_DEMO if args.noisy else DemoSetup()


def _revive_taskmanager(stack: Any, setup: Any) -> None:
    """Bring back a TaskManager that died (PyFlink's Beam shutdown race can kill it when Python jobs end;
    docs/limitations.md) and redeploy production if it did not survive."""
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings
    from airflow_flink_replay.local.demo import deploy_demo
    from airflow_flink_replay.local.stack import LocalStack, StackConfig, flink_taskmanagers

    if flink_taskmanagers(stack.flink_rest_url) >= 1:
        return
    print("the TaskManager died (see docs/limitations.md): restarting it and redeploying production if needed...")
    LocalStack(StackConfig()).restart_taskmanager()
    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    deadline = time.monotonic() + 60  # a job still failing over may come back by itself: do not submit twice
    while time.monotonic() < deadline and any(
        j.name == setup.job_name and j.state in ("RESTARTING", "CREATED", "INITIALIZING", "RECONCILING")
        for j in hook.list_jobs().jobs
    ):
        time.sleep(2)
    deploy_demo(stack, setup)


def _port(args: argparse.Namespace) -> int:
    """The port Airflow serves on; one already taken is refused naming the option."""
    from airflow_flink_replay.local.airflow_server import free_port
    from airflow_flink_replay.local.stack import port_free

    if args.port is None and not args.ui:
        return free_port()
    port = args.port or 8080
    if not port_free(port):
        raise SystemExit(f"port {port} is taken on 127.0.0.1: give Airflow another with --port")
    return port


def run(args: argparse.Namespace) -> int:
    """Carry out the demo: a few lines per step on the console, everything Airflow prints in a log file."""
    if str(ROOT) not in sys.path:  # the example agent and its review generator live in the checkout
        sys.path.insert(0, str(ROOT))
    from airflow_flink_replay.exceptions import StackSetupError
    from airflow_flink_replay.local.airflow_runner import DAG_IDS, airflow_env
    from airflow_flink_replay.local.airflow_server import AirflowServer
    from airflow_flink_replay.local.demo import AgentRef, deploy_demo, placeholder_key_file, write_spec
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    setup, port = _setup(args), _port(args)
    print("bringing the local stack up (the first time installs the Flink side: a few minutes)...")
    try:
        stack = LocalStack(StackConfig()).up()
    except StackSetupError as err:
        print(f"demo: the local stack did not come up: {one_line(err)}", file=sys.stderr)
        return 1
    demo_dir = Path(stack.workdir) / setup.prefix
    log_path = demo_dir / "logs" / f"demo-{time.strftime('%Y%m%d-%H%M%S')}.log"
    print(f"full Airflow log: {log_path}")
    runs = demo_dir / "runs"
    window = args.window or (100 if args.noisy else 40)
    spec_path = write_spec(stack, setup.topics, demo_dir / "replay_spec.yaml", job_name=setup.job_name,
                           job_identifier=setup.job_identifier, window_records=window, runs_dir=runs,
                           agent=AgentRef(reference=setup.v1), candidate=setup.v2, compare=setup.compare,
                           mem0_llm_key_file=placeholder_key_file(demo_dir))
    server = AirflowServer(airflow_env(stack, demo_dir / "airflow", spec_path), port, log_path, run_id_prefix="demo")
    # a SIGTERM (a CI job cancelled, `kill`) ends the demo like Ctrl-C: Airflow is stopped with it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    server.launch()  # Airflow starts while production is deployed
    try:
        model = "samples like an LLM" if args.noisy else "is deterministic"
        print(f"deploying the review agent v1 as production (its chat model {model}) and feeding it reviews...")
        job_id = deploy_demo(stack, setup)
        print(f"production: Flink job {job_id} ({stack.flink_rest_url}/#/job/running/{job_id}/overview)")
        server.wait_healthy()
        server.wait_for_dag(DAG_IDS["gate"])
        print(f"Airflow (scheduler, triggerer, UI): {server.base}")
        raw = _raw_downtime(stack, setup)
        verdicts = {label: _gate_run(stack, server, runs, label, candidate, start, DAG_IDS["gate"], setup, raw)
                    for label, candidate, start in _candidates(setup)}
        ok = verdicts["candidate v2"] == "FAIL" and verdicts["candidate v1"] == "PASS"
        print("\ndemo", "OK: v2 is stopped at the gate, v1 passes" if ok else "did NOT end as expected",
              f"(full log: {log_path})", flush=True)
        if args.ui:
            _serve(stack, server, setup)
        return 0 if ok else 1
    finally:
        server.stop()


def _serve(stack: Any, server: Any, setup: Any) -> None:
    """``--ui``: keep Airflow serving, while reviews keep flowing into production, until Ctrl-C."""
    from airflow_flink_replay.local.airflow_server import passwords_file, users
    from airflow_flink_replay.local.demo import ReviewFeeder

    print(f"serving Airflow on {server.base} (Ctrl-C to stop); trigger flink_agents_release_gate with conf "
          "{\"candidate\": \"%s\"}" % setup.v2, flush=True)
    print(f"  the runs' verdicts, charts and reports: {server.base}/flink-replay/replays", flush=True)
    if named := users(server.env):
        print(f"  log in as one of {', '.join(name for name, _ in named)}: their passwords are in "
              f"{passwords_file(server.env)}", flush=True)
    with ReviewFeeder(stack.kafka_bootstrap, setup.topics.reviews, start_index=40_000, rate=2):
        server.wait()


def _raw_downtime(stack: Any, setup: Any) -> float | None:
    """Stop production and bring it back by hand once, reviews flowing as in the gate runs: the floor their
    downtime is printed against (None when it could not be measured: the demo goes on)."""
    from airflow_flink_replay.local.demo import ReviewFeeder, raw_downtime

    with ReviewFeeder(stack.kafka_bootstrap, setup.topics.reviews, start_index=10_000, rate=setup.feed_rate):
        try:
            raw = raw_downtime(stack, setup)
        except Exception as exc:  # a figure for the console, not a step of the demo
            print(f"raw stop + restore by hand could not be measured ({type(exc).__name__}: {exc})")
            return None
    print(f"raw stop + restore by hand (drain, resubmit from the savepoint, RUNNING): {raw:.1f} s of downtime — "
          "the floor for the gate runs' stop windows")
    return raw


def _candidates(setup: Any) -> tuple[tuple[str, str, int], ...]:
    return (("candidate v2", setup.v2, 20_000), ("candidate v1", setup.v1, 30_000))


def _gate_run(
    stack: Any, server: Any, runs: Path, label: str, candidate: str, feed_from: int, dag_id: str, setup: Any,
    raw: float | None = None,
) -> str | None:
    """One release-gate run for ``candidate``, triggered over the REST API while reviews flow into
    production; prints its view (and its downtime against ``raw``, the stop + restore by hand), returns its
    verdict."""
    from airflow_flink_replay.local.airflow_runner import run_result
    from airflow_flink_replay.local.demo import ReviewFeeder
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    _revive_taskmanager(stack, setup)
    if stack.replay_flink_rest_url and LocalStack(StackConfig()).recycle_if_worn("replay"):
        print("recycled the replay cluster (its JobManager's metaspace was filling up: docs/local-stack.md)")
    print(f"\n{dag_id} with {label} ({candidate}) ...", flush=True)
    with ReviewFeeder(stack.kafka_bootstrap, setup.topics.reviews, start_index=feed_from, rate=setup.feed_rate):
        run_id = server.trigger(dag_id, {"candidate": candidate})
        state = server.wait_for_run(dag_id, run_id, timeout=1800)
    result = run_result(dag_id, run_id, state, server.task_instances(dag_id, run_id).values(), runs)
    for line in result.lines:  # from the run record: escaped
        print(printable(line))
    downtime = (result.record or {}).get("downtime_s")
    if downtime is not None and raw:
        print(f"  production's downtime {downtime:.1f} s against {raw:.1f} s stopped and restored by hand: "
              f"{downtime / raw:.2f}x")
    if result.verdict is None:
        print(f"  the failed tasks' errors are in {server.home / 'logs'} (run {run_id})")
    return result.verdict

"""``flink-replay run-dag gate|replay|nightly --spec my_spec.yaml``: one replay DAG run for your spec on the
local stack.

Runs the DAG with ``airflow dags test`` in the stack's Airflow environment (the one ``flink-replay demo``
uses: :mod:`airflow_flink_replay.local.airflow_runner`), prints one line per chain step, the verdict and
its reasons, and writes everything Airflow printed to a log file whose path it prints. Exit code 0 when
the run succeeded (a gate: PASS), 1 when it did not, 2 for a wrong spec, conf, file or folder or when the stack is
not up (one line naming it and the fix, before Airflow starts), 64 for a command line that does not parse.
``--feed samples.jsonl`` produces the file to production's input while the DAG runs: the window is captured from
what production reads after it resumed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from airflow_flink_replay.commands.arguments import folder_problems, positive_float
from airflow_flink_replay.commands.output import one_line, printable

#: The DAGs it runs (``airflow_runner.DAG_IDS`` maps them to DAG ids; imported when a DAG runs: ``--help`` and a
#: wrong command line stay fast).
DAGS = ("gate", "nightly", "replay")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``run-dag``."""
    p = sub.add_parser("run-dag", help="run a replay DAG (gate, replay, nightly) for your spec on the local stack")
    p.add_argument("dag", choices=DAGS, help="gate: release gate; replay: manual replay; nightly")
    p.add_argument("--spec", type=Path, required=True, help="your ReplaySpec YAML")
    p.add_argument("--candidate", metavar="MODULE:ATTR", help="the candidate (default: the spec's)")
    p.add_argument("--conf", default="{}", help="more DAG run conf as a JSON object (e.g. '{\"window_records\": 20}')")
    p.add_argument("--feed", type=Path, metavar="JSONL",
                   help="produce this file's records to the spec's input topic while the DAG runs (the window is "
                   "captured after production resumes)")
    p.add_argument("--feed-rate", type=positive_float, default=2.0, help="--feed: records per second (default 2)")
    p.add_argument("--key-field", default=None, help="--feed: field whose value is the Kafka key")
    p.add_argument("--python-path", type=Path, action="append", default=[], metavar="DIR",
                   help="folder your package is imported from on the Airflow side (default: the current folder)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the spec and the conf, run the DAG, print its view."""
    from airflow_flink_replay.exceptions import SpecError, StackSetupError
    from airflow_flink_replay.local.own_job import JsonlFeeder, OwnJobError, load_spec, read_jsonl, running_stack

    try:
        spec = load_spec(args.spec)
        conf = _conf(args.conf, args.candidate)
        try:
            spec.with_run_overrides(conf)  # what the DAG does with the conf, checked before Airflow starts
        except SpecError as err:
            raise OwnJobError(f"{err}\nFix: correct --conf / --candidate") from None
        if args.dag == "gate" and not conf.get("candidate") and "candidate" not in spec.variants():
            raise OwnJobError(f"the release gate needs a candidate and {args.spec} names none.\n"
                              "Fix: --candidate module:attr, or the spec's candidate field")
        if problem := folder_problems("--python-path", args.python_path):
            raise OwnJobError(problem)
        feed = read_jsonl(args.feed, args.key_field) if args.feed else []
        stack = running_stack()
    except (OwnJobError, StackSetupError) as err:
        print(f"run-dag: {one_line(err)}", file=sys.stderr)
        return 2
    from airflow_flink_replay.local.airflow_runner import DAG_IDS, AirflowRunner, airflow_env

    dag_id = DAG_IDS[args.dag]
    home = Path(stack.workdir) / "airflow"
    log_path = home / "console-logs" / f"{dag_id}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    env = airflow_env(stack, home, args.spec.resolve(), python_path=args.python_path or [Path.cwd()])
    airflow = AirflowRunner(env, log_path)
    print(printable(f"{dag_id} for {spec.name} ({args.spec}); full Airflow log: {log_path}"))
    airflow.migrate()
    runs = Path(spec.runs_uri.removeprefix("file://"))
    with contextlib.ExitStack() as feeding:
        if feed:
            feeder = feeding.enter_context(
                JsonlFeeder(stack.kafka_bootstrap, spec.production.input_topic, feed, args.feed_rate))
        result = airflow.dags_test(dag_id, conf, runs)
    if feed:
        print(f"  fed {feeder.sent} of {len(feed)} record(s) from {args.feed} to {spec.production.input_topic}")
    if result.run_id is None:
        print(f"  the DAG run did not start: see {log_path}")
        return 1
    for line in result.lines:  # from the run record: escaped
        print(printable(line))
    if result.state != "success" and result.verdict is None:
        print(f"  the failed tasks' errors are in {log_path}")
    print(f"run {result.run_id}: {result.state}")
    return 0 if result.state == "success" else 1


def _conf(text: str, candidate: str | None) -> dict:
    """The DAG run conf: ``--conf`` (a JSON object) with ``--candidate`` as its ``candidate``."""
    from airflow_flink_replay.local.own_job import OwnJobError

    try:
        conf = json.loads(text)
    except ValueError as err:
        raise OwnJobError(
            f"--conf {text[:200]!r}: not JSON ({err}).\nFix: a JSON object, e.g. '{{\"window_records\": 20}}'"
        ) from None
    except RecursionError:
        raise OwnJobError("--conf: nested too deeply.\nFix: a flat JSON object, e.g. '{\"window_records\": 20}'") \
            from None
    if not isinstance(conf, dict):
        raise OwnJobError(f"--conf {text[:200]!r}: not a JSON object.\nFix: e.g. '{{\"window_records\": 20}}'")
    return {**conf, "candidate": candidate} if candidate else conf

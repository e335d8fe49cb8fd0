"""A/A stability on an agent this project did not shape its tests around: the release gate with production's
own definition as the candidate, run again and again (run: ``.venv/bin/python benchmarks/aa_stability.py
[--runs 10] [--window 20]``; needs the local stack up, ~2 min a run).

The agent is ``tests/jobs/counter_agent`` (labelled in its module docstring): several records per key in a
window, a per-key counter in short-term memory, a random 0-1 s durable step, a tool called through
``ctx.get_resource``, production's output topic with 2 partitions, ``compare_key: $.id`` not unique per
output. Everything goes through the commands a user runs: ``flink-replay deploy`` (production and its spec),
``produce`` (its first records), then per run ``run-dag gate --candidate ... --feed`` (records keep coming while
the gate runs). Prints per run the verdict, the fidelity (baseline outputs equal to production's own for the
same input record), how the outputs were tied to their input records and the decisive reasons; then the
count of runs that did not PASS with 100% fidelity. Exit code 1 when any did not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.jobs.counter_agent.feed import reviews, write_jsonl  # noqa: E402

CLI = str(ROOT / ".venv" / "bin" / "flink-replay")
JOB = "tests.jobs.counter_agent.job"
#: The spec's policy: ``annotate`` is a pure tool (allowed: it runs in every replay), ``open_ticket`` a side
#: effect (served production's recorded result from the cassette; recorded when the candidate changed it).
POLICY = {"pure_tools": ["annotate"]}
#: Records a second while a gate runs: about what production keeps up with (a 0-1 s step per record).
FEED_RATE = 1.5


@dataclass
class Production:
    """A counter-agent production deployed with ``flink-replay deploy`` and its spec."""

    name: str
    folder: Path
    window: int
    fed: int = 0
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def spec(self) -> Path:
        return self.folder / "spec.yaml"


def cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """One ``flink-replay`` command in the repository's folder (stdout and stderr together)."""
    return subprocess.run([CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False, stdin=subprocess.DEVNULL)


def deploy(folder: Path, *, window: int, name: str | None = None, candidate: str = f"{JOB}:changed_tool",
           first: int = 10) -> Production:
    """Deploy production from the counter agent's definition, write its spec, feed it ``first`` records."""
    prod = Production(name=name or f"aa-{uuid.uuid4().hex[:6]}", folder=folder, window=window)
    folder.mkdir(parents=True, exist_ok=True)
    done = cli("deploy", "--agent-job", f"{JOB}:production", "--name", prod.name, "--candidate", candidate,
               "--window", str(window), "--spec-out", str(prod.spec), timeout=400)
    if done.returncode:
        raise RuntimeError(f"deploy failed: {done.stdout[-3000:]}{done.stderr[-3000:]}")
    with_policy(prod.spec, POLICY)
    feed = write_jsonl(folder / "first.jsonl", reviews(first))
    done = cli("produce", "--spec", str(prod.spec), "--file", str(feed), "--key-field", "id", timeout=120)
    if done.returncode:
        raise RuntimeError(f"produce failed: {done.stdout[-3000:]}{done.stderr[-3000:]}")
    prod.fed = first
    return prod


def with_policy(spec: Path, policy: dict[str, Any]) -> None:
    """Set the spec's replay policy (what ``deploy --spec-out`` wrote has none)."""
    import yaml

    body = yaml.safe_load(spec.read_text())
    body["policy"] = policy
    spec.write_text(yaml.safe_dump(body, sort_keys=False))


def gate(prod: Production, candidate: str, *, conf: dict[str, Any] | None = None, timeout: float = 900) -> dict:
    """One release-gate run with ``candidate`` while records keep coming; returns its run record, with the
    command's output under ``_printed`` and its exit code under ``_exit``."""
    n = prod.window * 3 + 20  # enough for the window whenever the capture starts, without flooding production
    feed = write_jsonl(prod.folder / f"feed-{len(prod.runs)}.jsonl", reviews(n, start=prod.fed))
    prod.fed += n
    from airflow_flink_replay.core.replay_spec import ReplaySpec

    runs_dir = Path(ReplaySpec.from_yaml(prod.spec).runs_uri.removeprefix("file://"))
    before = set(runs_dir.rglob("run_record.json")) if runs_dir.exists() else set()
    started = time.monotonic()
    done = cli("run-dag", "gate", "--spec", str(prod.spec), "--candidate", candidate, "--feed", str(feed),
               "--key-field", "id", "--feed-rate", str(FEED_RATE), "--conf", json.dumps(conf or {}), timeout=timeout)
    new = sorted(set(runs_dir.rglob("run_record.json")) - before, key=lambda p: p.stat().st_mtime)
    record: dict[str, Any] = json.loads(new[-1].read_text()) if new else {}
    record["_printed"], record["_exit"] = done.stdout + done.stderr, done.returncode
    record["_seconds"] = round(time.monotonic() - started, 1)
    prod.runs.append(record)
    return record


def comparison(record: dict[str, Any]) -> dict[str, Any]:
    """The run's full comparison result (``summary.json`` beside its report), {} without one."""
    folder = record.get("report_dir")
    path = Path(folder) / "summary.json" if folder else None
    return json.loads(path.read_text()) if path is not None and path.exists() else {}


def summary(record: dict[str, Any]) -> str:
    """One line: verdict, fidelity, how outputs were tied, decisive reasons."""
    fidelity = comparison(record).get("fidelity") or {}
    rate = fidelity.get("rate")
    figure = f"{fidelity.get('equal')}/{fidelity.get('baseline_outputs')} ({rate:.1%})" if rate is not None else "-"
    decisive = [f"{r['code']}: {r['message'][:160]}" for r in record.get("reasons") or [] if r["severity"] != "info"]
    verdict = record.get("verdict") or record.get("refusal") or "no verdict"
    line = f"{verdict} fidelity {figure} tied by {fidelity.get('tie', '-')} [{record.get('_seconds')} s]"
    return line + ("; " + " | ".join(decisive) if decisive else "")


def stable(record: dict[str, Any]) -> bool:
    """A PASS with every baseline output equal to production's own."""
    return record.get("verdict") == "PASS" and (comparison(record).get("fidelity") or {}).get("rate") == 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--window", type=int, default=20, help="records per replay window (default 20)")
    parser.add_argument("--folder", type=Path, default=ROOT / ".stack" / "bench-aa")
    parser.add_argument("--keep", action="store_true", help="leave production running afterwards")
    args = parser.parse_args(argv)
    prod = deploy(args.folder / uuid.uuid4().hex[:6], window=args.window)
    print(f"production {prod.name} deployed; spec {prod.spec}")
    try:
        for i in range(args.runs):
            record = gate(prod, f"{JOB}:production")
            print(f"run {i + 1:>2}: {summary(record)}", flush=True)
    finally:
        if not args.keep:
            stop(prod)
    unstable = [r for r in prod.runs if not stable(r)]
    print(f"{len(prod.runs) - len(unstable)} of {len(prod.runs)} A/A runs PASSED with fidelity 100%")
    return 1 if unstable else 0


def stop(prod: Production) -> None:
    """Cancel production's job and delete what it and its runs left on the stack."""
    from airflow_flink_replay.local.stack import LocalStack, StackConfig
    from tests.dag_testing import stop_production

    stack = LocalStack(StackConfig()).info()
    if stack is None:
        return
    from airflow_flink_replay.local.demo import DemoTopics

    topics = DemoTopics(reviews=f"{prod.name}-input", outputs=f"{prod.name}-outputs",
                        capture=f"{prod.name}-capture", action_state=f"{prod.name}-action-state",
                        cassette=f"{prod.name}-cassette")
    stop_production(stack, {"job_name": prod.name, "identifier": prod.name, "topics": topics,
                            "spec_path": prod.spec})


if __name__ == "__main__":
    sys.exit(main())

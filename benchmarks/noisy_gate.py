"""False FAILs of the release gate with a noisy agent: the noisy demo's gate, run again and again
(run: ``.venv/bin/python benchmarks/noisy_gate.py [--runs 10] [--v2-runs 2] [--window 100]``, or
``--simulate 200`` for the same question answered without Flink in a few seconds).

Production is the review agent v1 whose stand-in chat model samples like an LLM (``noisy_job``: borderline
labels flip now and then, scores jitter, summaries are paraphrased; ``flink-replay demo --noisy``). Each run
is the release-gate DAG (``airflow dags test``) with the spec of the noisy demo (window ``--window`` records,
the gate blocking changes of at least 10 points of outputs): ``--runs`` times with v1 itself as the candidate
— a FAIL there is a false FAIL — then ``--v2-runs`` times with v2, which must FAIL, then
``--nightly-runs`` times the nightly DAG with production's own agent as its candidate (the nightly A/A).
Every run samples afresh
(the chat model's draws are seeded by its seed, the run's memory namespace and the review). Prints per run
the verdict, the A/A noise of the noisiest fields, the fidelity figure and the decisive reasons, then the
false FAIL count. Needs the local stack up; ~2-3 min per run.

``--simulate N`` runs the decision and the comparison alone, without Flink: N windows of generated reviews,
each answered four times (production's session and three replay variants) with the complaint history carried
per customer, compared with ``compare_runs`` — the rates at the chosen window and thresholds. ``--aa-replays K``
runs the baseline K times besides itself (the noise pooled over every pair, as ``aa_replays`` does);
``--margins default`` uses the comparison's default margins instead of the noisy demo's.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def real_runs(args: argparse.Namespace) -> int:
    """The noisy demo's gate on the local stack, ``args.runs`` times with v1 and ``args.v2_runs`` with v2."""
    from airflow_flink_replay.local.airflow_runner import DAG_IDS, AirflowRunner, airflow_env
    from airflow_flink_replay.local.demo import NOISY_DEMO, AgentRef, ReviewFeeder, deploy_demo, write_spec
    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    # a production of its own, fed about what each window needs: fed the whole run long, the namespace grew by
    # ~1,500 memories a run and production fell behind its input (the first version of this benchmark)
    suffix = uuid.uuid4().hex[:6]
    setup = NOISY_DEMO.model_copy(update={"prefix": f"bench-noisy-{suffix}", "job_name": f"bench-noisy-{suffix}",
                                          "job_identifier": f"bench-noisy-{suffix}"})
    stack = LocalStack(StackConfig()).up()
    work = Path(stack.workdir) / "bench-noisy"
    runs_dir = work / "runs"
    spec = write_spec(stack, setup.topics, work / "replay_spec.yaml", job_name=setup.job_name,
                      job_identifier=setup.job_identifier, window_records=args.window, runs_dir=runs_dir,
                      agent=AgentRef(reference=setup.v1), candidate=setup.v2, compare=setup.compare)
    deploy_demo(stack, setup)
    airflow = AirflowRunner(airflow_env(stack, work / "airflow", spec), work / "logs" / "bench.log")
    airflow.migrate()
    plan = ([("v1", "gate", setup.v1)] * args.runs + [("v2", "gate", setup.v2)] * args.v2_runs
            + [("nightly A/A", "nightly", setup.v1)] * args.nightly_runs)
    verdicts: dict[str, Counter[str]] = {"v1": Counter(), "v2": Counter(), "nightly A/A": Counter()}
    for i, (label, dag, candidate) in enumerate(plan):
        started = time.monotonic()
        first = 100_000 * (i + 1) + args.feed_offset
        with ReviewFeeder(stack.kafka_bootstrap, setup.topics.reviews, start_index=first, rate=setup.feed_rate,
                          count=args.window * args.feed):  # the stop comes ~25 s in; the rest keeps
            # production fed past the window: fed 4 windows, two runs on a loaded machine found production had not
            # output the window's last 2 records 300 s on (the wait timed out), and it had once the next feed began
            result = airflow.dags_test(DAG_IDS[dag], {"candidate": candidate}, runs_dir)
        record = result.record or {}
        verdicts[label][str(result.verdict)] += 1
        noise = ", ".join(f"{p.removeprefix('$.')} {r:.0%}" for p, r in (record.get("noise") or {}).items())
        fidelity = record.get("fidelity")
        print(f"run {i + 1:2d} {dag} candidate {label}: {result.verdict} in {time.monotonic() - started:.0f}s; "
              f"A/A noise: {noise or 'none'}; fidelity {fidelity if fidelity is None else f'{fidelity:.0%}'} "
              f"(baseline = baseline-2: {record.get('fidelity_self')})", flush=True)
        served = {v.get("variant"): v.get("cassette_calls") for v in record.get("variants") or []
                  if v.get("cassette_calls")}
        print("      cassette: " + ("; ".join(f"{v} {_served(c)}" for v, c in served.items()) or "no replay decisions"))
        for reason in record.get("reasons") or []:
            if reason.get("severity") in ("fail", "inconclusive"):
                print(f"      [{reason.get('code')}] {str(reason.get('message'))[:200]}")
    if args.nightly_runs:
        print(f"nightly A/A ({args.nightly_runs} runs, production's own agent as the candidate): "
              f"{dict(verdicts['nightly A/A'])}")
    _cancel(stack, setup.job_name)
    return _summary(verdicts, args.runs, args.v2_runs)


def _served(calls: dict[str, int]) -> str:
    """'replayed r (of them a by arguments) / unmatched u = share served' for one variant's cassette calls."""
    replayed, unmatched = calls.get("replayed", 0), calls.get("unmatched", 0)
    share = replayed / (replayed + unmatched) if replayed + unmatched else 1.0
    return (f"served {replayed} (by arguments {calls.get('by_arguments', 0)}), unmatched {unmatched} "
            f"= {share:.0%} served")


def _cancel(stack: Any, job_name: str) -> None:
    """Cancel the benchmark's production (its topics and memories stay, named after it)."""
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    for job in hook.list_jobs().jobs:
        if job.name == job_name and job.state == "RUNNING":
            hook.cancel_job(job.jid)


def simulated_runs(args: argparse.Namespace) -> int:
    """The decision and the comparison alone (no Flink): ``args.simulate`` windows per candidate."""
    from airflow_flink_replay.core.compare import CompareConfig, compare_runs
    from airflow_flink_replay.local.demo import NOISY_DEMO
    from examples.review_agent.common.generator import generate_reviews
    from examples.review_agent.v1.prompts import SYSTEM_PROMPT as V1_PROMPT
    from examples.review_agent.v2.prompts import SYSTEM_PROMPT as V2_PROMPT

    config = CompareConfig(min_aligned=20, **(NOISY_DEMO.compare if args.margins == "demo" else {}))
    verdicts: dict[str, Counter[str]] = {"v1": Counter(), "v2": Counter()}
    for i in range(args.simulate):
        reviews = generate_reviews(args.window, seed=1000 + i)
        for label, prompt in (("v1", V1_PROMPT), ("v2", V2_PROMPT)):
            a, a2, b = (_simulate(reviews, p, f"{s}-{i}") for s, p in (("a", V1_PROMPT), ("a2", V1_PROMPT),
                                                                        ("b", prompt)))
            more = [_simulate(reviews, V1_PROMPT, f"a{j + 3}-{i}") for j in range(args.aa_replays - 1)]
            result = compare_runs(a, b, a2, key="$.id", config=config, extra_baselines=more)
            verdicts[label][result.verdict] += 1
    print(f"simulated: window {args.window}, margins {args.margins}, aa_replays {args.aa_replays}")
    return _summary(verdicts, args.simulate, args.simulate)


def _simulate(reviews: list[dict[str, Any]], prompt: str, session: str) -> io.StringIO:
    """One variant's outputs (:func:`~examples.review_agent.common.offline.run_offline` with the noisy demo's
    temperature and seed) as JSONL."""
    from examples.review_agent.common.job import NOISY_MODEL
    from examples.review_agent.common.offline import run_offline

    rows = run_offline(reviews, prompt, session, temperature=NOISY_MODEL["StandInReviewModel.temperature"],
                       seed=NOISY_MODEL["StandInReviewModel.seed"])
    return io.StringIO("".join(json.dumps(r) + "\n" for r in rows))


def _summary(verdicts: dict[str, Counter[str]], v1_runs: int, v2_runs: int) -> int:
    false_fails = verdicts["v1"]["FAIL"]
    print(f"\nv1 as its own candidate ({v1_runs} runs): {dict(verdicts['v1'])}; false FAILs: {false_fails}")
    print(f"v2 ({v2_runs} runs): {dict(verdicts['v2'])}")
    return 0 if verdicts["v1"]["PASS"] == v1_runs and verdicts["v2"]["FAIL"] == v2_runs else 1


def main() -> int:
    """Parse the arguments and run the benchmark."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10, help="gate runs with v1 as its own candidate")
    p.add_argument("--v2-runs", type=int, default=2, help="gate runs with v2 as the candidate")
    p.add_argument("--nightly-runs", type=int, default=0, help="nightly DAG runs, production's agent as candidate")
    p.add_argument("--feed-offset", type=int, default=0, help="first review index offset (fresh review ids)")
    p.add_argument("--feed", type=int, default=6, help="reviews fed per run, in windows (default 6)")
    p.add_argument("--window", type=int, default=100, help="records per replay window")
    p.add_argument("--simulate", type=int, default=0, metavar="N", help="N windows per candidate without Flink")
    p.add_argument("--aa-replays", type=int, default=1, help="--simulate: baseline runs besides the baseline")
    p.add_argument("--margins", choices=["demo", "default"], default="demo",
                   help="--simulate: the noisy demo's compare settings (default) or the comparison's defaults")
    args = p.parse_args()
    return simulated_runs(args) if args.simulate else real_runs(args)


if __name__ == "__main__":
    sys.exit(main())

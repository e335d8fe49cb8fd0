"""Benchmark: compare 100,000 aligned output triples (A, A', B) with 8 fields each.

Target (issue 7): under 10 s on 2 cores, comparison including reading the three JSONL files.
Goal (issue 13, not met yet: the runs are held in memory): 1,000,000 outputs per variant under 60 s and
1.5 GB RSS. Prints the time, aligned pairs per second (A-A' and A-B pairs) and peak memory (max RSS).
Several sizes run one after the other, each in its own process (so each peak RSS is its own):

    .venv/bin/python benchmarks/compare.py [--n 100000 [1000000 ...]] [--keep DIR]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from airflow_flink_replay.core.compare import CompareConfig, FieldRule, compare_runs, write_reports
from airflow_flink_replay.core.compare.synthetic import iter_run, write_jsonl


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100_000], help="aligned outputs per run (sizes)")
    parser.add_argument("--budget", type=float, default=10.0, help="seconds allowed for the comparison")
    parser.add_argument(
        "--spill-above-mb", type=int, default=512, help="partition on disk above this input size (0 = always)"
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep inputs and reports in this folder")
    args = parser.parse_args(argv)
    if len(args.n) > 1:  # one process per size: max RSS is per process
        codes = []
        for n in args.n:
            print(f"--- n = {n:,}", flush=True)
            cmd = [sys.executable, __file__, "--n", str(n), "--budget", str(args.budget * n / 100_000)]
            cmd += ["--spill-above-mb", str(args.spill_above_mb)]
            codes.append(subprocess.run([*cmd, *(["--keep", str(args.keep / str(n))] if args.keep else [])]).returncode)
        return max(codes)
    args.n = args.n[0]

    work = args.keep or Path(tempfile.mkdtemp(prefix="afr-bench-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        a = write_jsonl(work / "baseline.jsonl", iter_run(args.n, "baseline", 1, paraphrase=0.2, jitter=1e-4))
        a2 = write_jsonl(work / "baseline_2.jsonl", iter_run(args.n, "baseline_2", 2, paraphrase=0.2, jitter=1e-4))
        b = write_jsonl(
            work / "candidate.jsonl",
            iter_run(args.n, "candidate", 3, paraphrase=0.2, jitter=1e-4, label_change=0.05, tool_change=0.02),
        )
        gen = time.perf_counter() - t0
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

        config = CompareConfig(
            fields=[FieldRule(path="$.score", comparator="numeric", abs_tol=1e-3)], spill_above_mb=args.spill_above_mb
        )
        t1, c1 = time.perf_counter(), time.process_time()
        result = compare_runs(a, b, a2, key="$.id", config=config)
        compare_s, compare_cpu = time.perf_counter() - t1, time.process_time() - c1
        t2 = time.perf_counter()
        write_reports(result, work / "report")
        report_s = time.perf_counter() - t2
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

        pairs = (result.counts.aligned_candidate or 0) + (result.counts.aligned_noise or 0)
        fields = len(result.fields)
        print(f"inputs        3 x {args.n:,} outputs, {fields} fields each (generated in {gen:.1f} s, not timed)")
        print(f"compare       {compare_s:.2f} s wall, {compare_cpu:.2f} s CPU  (read + align + diff + decide)")
        print(
            f"pairs/s       {pairs / compare_s:,.0f}  ({pairs:,} aligned pairs, {pairs * fields:,} field comparisons)"
        )
        print(f"reports       {report_s:.2f} s  (summary.json, report.html, junit.xml)")
        print(f"peak memory   {peak_mb:,.0f} MiB max RSS (before comparing: {rss_before / 1024:,.0f} MiB)")
        size = sum(p.stat().st_size for p in (a, a2, b)) / 2**20
        spilled = args.spill_above_mb == 0 or size > args.spill_above_mb
        print(f"input size    {size:,.0f} MiB in 3 files ({'partitioned on disk' if spilled else 'in memory'})")
        print(f"verdict       {result.verdict}: {[r.code for r in result.reasons]}")
        ok = compare_s < args.budget
        print(f"budget        {'OK' if ok else 'OVER'}: {compare_s:.2f} s vs {args.budget:.1f} s")
        return 0 if ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

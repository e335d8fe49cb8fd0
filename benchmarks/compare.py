"""Benchmark: compare 100,000 aligned output triples (A, A', B) with 8 fields each.

Target (issue 7): under 10 s on 2 cores, comparison including reading the three JSONL files.
Goal (issue 13): 1,000,000 outputs per variant under 60 s and 1.5 GB RSS (inputs over 512 MiB are
partitioned on disk and compared by several processes). Prints the time (wall, and CPU of this process and
of its worker processes), aligned pairs per second (A-A' and A-B pairs) and peak memory: this process's max
RSS and the sampled peak of all its processes together. Several sizes run one after the other, each in its
own process (so each peak RSS is its own); ``--keep DIR`` keeps the inputs, and reuses them next time:

    .venv/bin/python benchmarks/compare.py [--n 100000 [1000000 ...]] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from airflow_flink_replay.core.compare import CompareConfig, FieldRule, compare_runs, write_reports
from airflow_flink_replay.core.compare.synthetic import iter_run, write_jsonl


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and all its descendants (KiB, from /proc; 0 where it is missing)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


class _TreePeak(threading.Thread):
    """Samples the summed RSS of this process and its workers every 0.1 s."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_kib = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            self.peak_kib = max(self.peak_kib, _tree_rss_kib(os.getpid()))


def _inputs(work: Path, n: int) -> tuple[Path, Path, Path, str]:
    """The three runs in ``work``: reused when a kept folder already holds them for ``n`` outputs."""
    a, a2, b = work / "baseline.jsonl", work / "baseline_2.jsonl", work / "candidate.jsonl"
    stamp = work / "n.txt"
    if stamp.exists() and stamp.read_text() == str(n) and all(p.exists() for p in (a, a2, b)):
        return a, a2, b, "reused"
    t0 = time.perf_counter()
    write_jsonl(a, iter_run(n, "baseline", 1, paraphrase=0.2, jitter=1e-4))
    write_jsonl(a2, iter_run(n, "baseline_2", 2, paraphrase=0.2, jitter=1e-4))
    write_jsonl(b, iter_run(n, "candidate", 3, paraphrase=0.2, jitter=1e-4, label_change=0.05, tool_change=0.02))
    stamp.write_text(str(n))
    return a, a2, b, f"generated in {time.perf_counter() - t0:.1f} s"


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
        a, a2, b, how = _inputs(work, args.n)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

        config = CompareConfig(
            fields=[FieldRule(path="$.score", comparator="numeric", abs_tol=1e-3)], spill_above_mb=args.spill_above_mb
        )
        sampler = _TreePeak()
        sampler.start()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        t1, c1 = time.perf_counter(), time.process_time()
        result = compare_runs(a, b, a2, key="$.id", config=config)
        compare_s, compare_cpu = time.perf_counter() - t1, time.process_time() - c1
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        workers_cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
        sampler.done.set()
        sampler.join()
        t2 = time.perf_counter()
        write_reports(result, work / "report")
        report_s = time.perf_counter() - t2
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

        pairs = (result.counts.aligned_candidate or 0) + (result.counts.aligned_noise or 0)
        fields = len(result.fields)
        print(f"inputs        3 x {args.n:,} outputs, {fields} fields each ({how}, not timed)")
        print(
            f"compare       {compare_s:.2f} s wall, {compare_cpu:.2f} s CPU here + {workers_cpu:.2f} s in workers  "
            "(read + align + diff + decide)"
        )
        print(
            f"pairs/s       {pairs / compare_s:,.0f}  ({pairs:,} aligned pairs, {pairs * fields:,} field comparisons)"
        )
        print(f"reports       {report_s:.2f} s  (summary.json, report.html, junit.xml)")
        print(
            f"peak memory   {peak_mb:,.0f} MiB max RSS (before comparing: {rss_before / 1024:,.0f} MiB); all processes "
            f"together {sampler.peak_kib / 1024:,.0f} MiB (sampled)"
        )
        size = sum(p.stat().st_size for p in (a, a2, b)) / 2**20
        spilled = args.spill_above_mb == 0 or size > args.spill_above_mb
        print(f"input size    {size:,.0f} MiB in 3 files ({'partitioned on disk' if spilled else 'in memory'})")
        print(f"verdict       {result.verdict}: {[r.code for r in result.reasons]}")
        ok = compare_s < args.budget
        print(f"budget        {'OK' if ok else 'OVER'}: {compare_s:.2f} s vs {args.budget:.1f} s")
        print(f"machine       {os.cpu_count()} CPUs, load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return 0 if ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

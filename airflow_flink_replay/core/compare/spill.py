"""Runs too large to hold in memory: partition them by key on disk, compare partition by partition.

All outputs of one key land in the same partition of every run (a hash of the key text), so partition
``i`` of A, A' and B aligns on its own, and memory is bounded by the largest partition (about five times its
share of the input) instead of by the runs.

Each line is parsed and flattened once, while the run is partitioned: a partition holds the flattened
outputs themselves (``(key, flattened fields, line number, input record)``, pickled in batches), so loading
it back is a fast unpickle, not a second parse and flatten. A and A' are loaded twice (once to learn the
numeric noise band, which must be known before the candidate is judged), B once.

Used when the inputs together are larger than ``CompareConfig.spill_above_mb``; the result is the same as
in memory, except which missing/extra outputs and which examples of equal rank are listed first.
"""

from __future__ import annotations

import copy
import gc
import importlib
import os
import pickle
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_flink_replay.core.compare.alignment import (
    Entry,
    Order,
    Run,
    keyed_output,
    order_within_keys,
    replay_order,
)
from airflow_flink_replay.core.compare.loading import Source, iter_json_lines, source_name
from airflow_flink_replay.core.compare.paths import MISSING, Flattener, compile_key
from airflow_flink_replay.exceptions import CompareInputError

#: Flattened outputs kept per run to name the comparator of fields that never differ.
SAMPLES = 200
#: Outputs per pickled batch in a partition file (pickle shares the repeated path strings within a batch).
BATCH = 512

#: One spilled output: (key text, flattened fields, line number, its input record's order or None). A loaded
#: partition is ordered within keys as a run read in memory (:func:`order_within_keys`): the same pairs.
Spilled = tuple[str, dict[str, Any], int, Order | None]


def part_of(key: str, parts: int) -> int:
    """The partition of a key text: the same in every process (``hash`` of a str is salted per process)."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % parts


@dataclass
class SpilledRun:
    """One run written to ``parts`` files by key; ``run`` holds its counts, paths and samples only."""

    run: Run
    parts: list[Path]

    def load(self, index: int, keys: set[str] | None = None) -> Run:
        """Partition ``index`` as an in-memory :class:`Run` (only ``keys``, when given)."""
        part = Run(name=self.run.name, source=self.run.source)
        by_key = part.by_key
        for k, flat, lineno, order in _records(self.parts[index]):
            if keys is not None and k not in keys:
                continue
            entry: Entry = (flat, lineno, order)
            entries = by_key.get(k)
            if entries is None:
                by_key[k] = [entry]
            else:
                entries.append(entry)
            part.count += 1
        order_within_keys(by_key)
        return part


def _records(path: Path) -> Iterator[Spilled]:
    with path.open("rb") as fh:
        while True:
            try:
                batch: list[Spilled] = pickle.load(fh)  # one load per dump: each batch has its own memo
            except EOFError:
                return
            yield from batch


class _Writer:
    """Batches outputs per partition and appends each full batch to its file."""

    def __init__(self, files: list[Path]) -> None:
        self.handles = [f.open("wb") for f in files]
        self.batches: list[list[Spilled]] = [[] for _ in files]

    def add(self, index: int, record: Spilled) -> None:
        batch = self.batches[index]
        batch.append(record)
        if len(batch) >= BATCH:
            pickle.dump(batch, self.handles[index], protocol=pickle.HIGHEST_PROTOCOL)
            batch.clear()

    def close(self, flush: bool) -> None:
        for batch, handle in zip(self.batches, self.handles, strict=True):
            if flush and batch:
                pickle.dump(batch, handle, protocol=pickle.HIGHEST_PROTOCOL)
            handle.close()


def partition_run(
    name: str, source: Source, key: Callable[[Any], Any], flattener: Flattener, folder: Path, parts: int
) -> SpilledRun:
    """Read one run once: count it, flatten each output (for the path statistics too: map detection, rules)
    and append it to the partition of its key (an intermediate stage's outputs by their stage's key, as
    :func:`.alignment.fill_run` keys them)."""
    run = Run(name=name, source=source_name(source))
    files = [folder / f"{name}-{i:04d}.pickle" for i in range(parts)]
    writer = _Writer(files)
    paths = run.paths
    done = False
    try:
        for lineno, obj in iter_json_lines(source):
            run.count += 1
            kv = key(obj)
            if kv is MISSING:
                run.note_unkeyed(lineno)
                continue
            k, flat = keyed_output(obj, kv, flattener, run.source, lineno)
            paths.update(flat)
            if len(run.samples) < SAMPLES:
                run.samples.append(flat)
            writer.add(part_of(k, parts), (k, flat, lineno, replay_order(obj)))
        done = True
    finally:
        writer.close(flush=done)
    return SpilledRun(run, files)


def partition_runs(
    runs: list[tuple[str, Source]], key: str, flattener: Flattener, folder: Path, parts: int, workers: int
) -> list[SpilledRun]:
    """Partition the runs: the first in this process and the others at the same time in worker processes
    (``workers`` processes in all, this one included), when every run is a file.

    Each run is flattened with a copy of ``flattener`` made before any run was read; what the copies learned
    (names, object counts for map detection, ignore hits) is merged back in the order of ``runs``, so the
    outcome is the sequential one, and the first run (in that order) with bad input raises its error, as when
    read one after the other.
    """
    n = min(len(runs), workers)
    if n <= 1 or not all(isinstance(src, str | os.PathLike) for _, src in runs):
        getter = compile_key(key)
        return [partition_run(name, src, getter, flattener, folder, parts) for name, src in runs]
    rest = runs[1:]
    groups = [runs[:1], *(rest[i :: n - 1] for i in range(n - 1))]  # runs of a group: one after the other
    results = run_parallel(_partition_group, [(group, key, flattener, folder, parts) for group in groups])
    by_name: dict[str, tuple[SpilledRun, Flattener] | tuple[str, str, int | None]] = {}
    for group, result in zip(groups, results, strict=False):
        by_name.update(zip((name for name, _ in group), result, strict=False))
    out = []
    for name, _ in runs:
        done = by_name[name]
        if len(done) == 3:
            source, text, line = done
            where = f"{source}:{line}" if line is not None else source
            raise CompareInputError(source, text.removeprefix(f"{where}: "), line=line)
        spilled, learned = done
        flattener.merge(learned)
        out.append(spilled)
    return out


def _partition_group(
    runs: list[tuple[str, Source]], key: str, flattener: Flattener, folder: Path, parts: int
) -> list[tuple[SpilledRun, Flattener] | tuple[str, str, int | None]]:
    """Partition runs one after the other, each with its own copy of ``flattener``: per run, the spilled run
    and what its copy learned, or its input error as ``(source, text, line)`` (the error type does not
    pickle); runs after an error are not read."""
    getter = compile_key(key)
    results: list[tuple[SpilledRun, Flattener] | tuple[str, str, int | None]] = []
    for name, src in runs:
        learned = copy.deepcopy(flattener)
        try:
            results.append((partition_run(name, src, getter, learned, folder, parts), learned))
        except CompareInputError as err:
            results.append((err.source, str(err), err.line))
            break
    return results


def run_parallel(function: Callable[..., Any], calls: list[tuple[Any, ...]]) -> list[Any]:
    """``function(*args)`` for each of ``calls``: the first in this process, the others at the same time in
    worker processes; the results in order. ``function`` must be a module-level function; arguments and
    results travel pickled.

    Workers are fresh interpreters (``python -P -c``), never forks of a possibly threaded caller, and they
    never import the caller's ``__main__`` nor a module lying in the current folder (:func:`_worker_path`).
    """
    procs = [_start_worker(function, args) for args in calls[1:]]
    try:
        first = function(*calls[0])
        return [first, *(_worker_result(proc) for proc in procs)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _worker_path() -> str:
    """The workers' ``PYTHONPATH``: this process's ``sys.path`` without the current folder (``''``, or its absolute
    path, which ``python -m`` puts first) unless this package is imported from it. With ``-P`` (no current folder
    first either), a worker imports this package and the libraries, never a file lying in the folder the
    comparison was started from (a ``copy.py`` there ran in every worker)."""
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:  # the current folder was removed: nothing to import from it
        cwd = ""
    home = os.path.realpath(Path(__file__).resolve().parents[3])
    return os.pathsep.join(p for p in sys.path if p and os.path.realpath(p) not in {cwd} - {home})


def _start_worker(function: Callable[..., Any], args: tuple[Any, ...]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": _worker_path()}
    proc = subprocess.Popen(
        [sys.executable, "-P", "-c", "from airflow_flink_replay.core.compare.spill import worker_main; worker_main()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None
    pickle.dump((function.__module__, function.__name__, args), proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
    proc.stdin.close()
    proc.stdin = None  # sent: communicate() must not flush it again
    return proc


def _worker_result(proc: subprocess.Popen[bytes]) -> Any:
    out, err = proc.communicate()
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-5:]
        raise RuntimeError(f"a comparison worker failed (exit {proc.returncode}): " + " | ".join(tail))
    return pickle.loads(out)


def worker_main() -> None:
    """A worker process: read ``(module, function, args)`` from stdin, write ``function(*args)`` to stdout."""
    gc.disable()  # millions of small objects and no cycles, as in compare_runs
    module, function, args = pickle.load(sys.stdin.buffer)
    result = getattr(importlib.import_module(module), function)(*args)
    pickle.dump(result, sys.stdout.buffer, protocol=pickle.HIGHEST_PROTOCOL)
    sys.stdout.buffer.flush()

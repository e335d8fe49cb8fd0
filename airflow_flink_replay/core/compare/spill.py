"""Runs too large to hold in memory: partition them by key on disk, compare partition by partition.

All outputs of one key land in the same partition of every run (a hash of the key text), so partition
``i`` of A, A' and B aligns on its own, and memory is bounded by the largest partition (about five times its
share of the input) instead of by the runs.

Each line is parsed and flattened once, while the run is partitioned: a partition holds the flattened
outputs themselves (``(key, flattened fields, line number, input order)``, pickled in batches), so loading
it back is a fast unpickle, not a second parse and flatten. A and A' are loaded twice (once to learn the
numeric noise band, which must be known before the candidate is judged), B once.

Used when the inputs together are larger than ``CompareConfig.spill_above_mb``; the result is the same as
in memory, except which missing/extra outputs and which examples of equal rank are listed first.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_flink_replay.core.compare.alignment import Entry, Run, flatten_output, order_within_keys, replay_order
from airflow_flink_replay.core.compare.loading import Source, iter_json_lines, source_name
from airflow_flink_replay.core.compare.paths import MISSING, Flattener, key_text

#: Flattened outputs kept per run to name the comparator of fields that never differ.
SAMPLES = 200
#: Outputs per pickled batch in a partition file (pickle shares the repeated path strings within a batch).
BATCH = 512

#: One spilled output: (key text, flattened fields, line number, (partition, offset) of its input or None).
Spilled = tuple[str, dict[str, Any], int, tuple[int, int] | None]


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
    and append it to the partition of its key."""
    run = Run(name=name, source=source_name(source))
    files = [folder / f"{name}-{i:04d}.pickle" for i in range(parts)]
    writer = _Writer(files)
    flatten = flattener.flatten
    paths = run.paths
    done = False
    try:
        for lineno, obj in iter_json_lines(source):
            run.count += 1
            kv = key(obj)
            if kv is MISSING:
                run.unkeyed += 1
                if len(run.unkeyed_lines) < 20:
                    run.unkeyed_lines.append(lineno)
                continue
            flat = flatten_output(flatten, obj, run.source, lineno)
            paths.update(flat)
            if len(run.samples) < SAMPLES:
                run.samples.append(flat)
            k = key_text(kv)
            writer.add(hash(k) % parts, (k, flat, lineno, replay_order(obj)))
        done = True
    finally:
        writer.close(flush=done)
    return SpilledRun(run, files)

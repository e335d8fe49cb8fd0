"""Runs too large to hold in memory: partition them by key on disk, compare partition by partition.

All outputs of one key land in the same partition of every run (a hash of the key text), so partition
``i`` of A, A' and B aligns on its own, and memory is bounded by the largest partition (about five times its
share of the input) instead of by the runs. The price: every line is read twice, A's and A2's three times
when the numeric noise band is learned (it must be known before the candidate is judged).

Used when the inputs together are larger than ``CompareConfig.spill_above_mb``; the result is the same as
in memory, except which missing/extra outputs and which examples of equal rank are listed first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_flink_replay.core.compare.alignment import Run, fill_run, flatten_output
from airflow_flink_replay.core.compare.loading import Source, iter_json_records, source_name
from airflow_flink_replay.core.compare.paths import MISSING, Flattener, key_text

#: Flattened outputs kept per run to name the comparator of fields that never differ.
SAMPLES = 200


@dataclass
class SpilledRun:
    """One run written to ``parts`` files by key; ``run`` holds its counts, paths and samples only."""

    run: Run
    parts: list[Path]

    def load(self, index: int, key: Callable[[Any], Any], flattener: Flattener, keys: set[str] | None = None) -> Run:
        """Partition ``index`` as an in-memory :class:`Run` (only ``keys``, when given)."""
        part = Run(name=self.run.name, source=self.run.source)
        return fill_run(part, _records(self.parts[index], key, keys), key, flattener)


def _records(path: Path, key: Callable[[Any], Any], keys: set[str] | None) -> Iterator[tuple[int, dict[str, Any]]]:
    loads = json.loads
    with path.open(encoding="utf-8") as fh:
        for raw in fh:
            lineno, _, text = raw.partition("\t")
            obj = loads(text)
            if keys is None or key_text(key(obj)) in keys:
                yield int(lineno), obj


def partition_run(
    name: str, source: Source, key: Callable[[Any], Any], flattener: Flattener, folder: Path, parts: int
) -> SpilledRun:
    """Read one run once: count it, flatten each output for the path statistics (map detection, rules),
    and write each keyed line to the partition of its key as ``<line number>\\t<line>``."""
    run = Run(name=name, source=source_name(source))
    files = [folder / f"{name}-{i:04d}.tsv" for i in range(parts)]
    handles = [f.open("w", encoding="utf-8") for f in files]
    flatten = flattener.flatten
    try:
        for lineno, line, obj in iter_json_records(source):
            run.count += 1
            kv = key(obj)
            if kv is MISSING:
                run.unkeyed += 1
                if len(run.unkeyed_lines) < 20:
                    run.unkeyed_lines.append(lineno)
                continue
            flat = flatten_output(flatten, obj, run.source, lineno)
            run.paths.update(flat)
            if len(run.samples) < SAMPLES:
                run.samples.append(flat)
            handles[hash(key_text(kv)) % parts].write(f"{lineno}\t{line.rstrip(chr(10))}\n")
    finally:
        for h in handles:
            h.close()
    return SpilledRun(run, files)

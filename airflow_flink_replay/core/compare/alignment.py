"""Loading a run and aligning it by correlation key.

A run is grouped by key; several outputs of one key align by their order within the key. When lines carry
the replay job's ``_replay`` field, the order within a key is the order of the input records
(partition, offset), so the order of lines in the file never matters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_flink_replay.core.compare.loading import MAX_DEPTH, Source, iter_json_lines, source_name
from airflow_flink_replay.core.compare.paths import MISSING, Flattener, key_text
from airflow_flink_replay.exceptions import CompareInputError, NestingError

#: One output: (flattened fields, line number in its file, (partition, offset) of its input or None).
Entry = tuple[dict[str, Any], int, tuple[int, int] | None]


@dataclass
class Run:
    """One run's outputs grouped by correlation key."""

    name: str
    source: str
    by_key: dict[str, list[Entry]] = field(default_factory=dict)
    count: int = 0
    unkeyed: int = 0
    unkeyed_lines: list[int] = field(default_factory=list)
    paths: set[str] = field(default_factory=set)
    #: a few flattened outputs, to name the comparator of fields that never differ (a spilled run keeps
    #: no outputs in memory)
    samples: list[dict[str, Any]] = field(default_factory=list)

    def note_unkeyed(self, lineno: int) -> None:
        """Count an output without a correlation key; the first 20 line numbers are kept for the report."""
        self.unkeyed += 1
        if len(self.unkeyed_lines) < 20:
            self.unkeyed_lines.append(lineno)


def replay_order(obj: dict[str, Any]) -> tuple[int, int] | None:
    meta = obj.get("_replay")
    if isinstance(meta, dict):
        part, off = meta.get("partition"), meta.get("offset")
        if isinstance(part, int) and isinstance(off, int):
            return part, off
    return None


def load_run(name: str, source: Source, key: Callable[[Any], Any], flattener: Flattener) -> Run:
    """Read, flatten and group one run's outputs (raises CompareInputError on bad input)."""
    run = Run(name=name, source=source_name(source))
    return fill_run(run, iter_json_lines(source), key, flattener)


def flatten_output(
    flatten: Callable[[dict[str, Any]], dict[str, Any]], obj: dict[str, Any], source: str, lineno: int
) -> dict[str, Any]:
    """``flatten(obj)``; an output nested too deeply is bad input naming its line."""
    try:
        return flatten(obj)
    except NestingError as err:
        raise CompareInputError(
            source,
            f"output nested more than {MAX_DEPTH} levels deep (at {err}). Fix: flatten that structure in the "
            "agent's output, or leave it out with --ignore",
            line=lineno,
        ) from None


def fill_run(
    run: Run, records: Iterable[tuple[int, dict[str, Any]]], key: Callable[[Any], Any], flattener: Flattener
) -> Run:
    """Flatten and group ``(line number, object)`` records into ``run``."""
    by_key = run.by_key
    paths = run.paths
    flatten = flattener.flatten
    for lineno, obj in records:
        run.count += 1
        kv = key(obj)
        if kv is MISSING:
            run.note_unkeyed(lineno)
            continue
        k = key_text(kv)
        flat = flatten_output(flatten, obj, run.source, lineno)
        paths.update(flat)
        entry = (flat, lineno, replay_order(obj))
        entries = by_key.get(k)
        if entries is None:
            by_key[k] = [entry]
        else:
            entries.append(entry)
    order_within_keys(by_key)
    return run


def order_within_keys(by_key: dict[str, list[Entry]]) -> None:
    """Several outputs of one key: in the order of their input records when all carry it, else file order."""
    for entries in by_key.values():
        if len(entries) > 1 and all(e[2] is not None for e in entries):
            entries.sort(key=lambda e: (e[2], e[1]))

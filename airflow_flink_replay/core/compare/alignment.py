"""Loading a run and aligning it by correlation key.

A run is grouped by key; several outputs of one key align by their order within the key. When lines carry
the replay job's ``_replay`` field, the order within a key is the order of the input records, so the order of
lines in the file never matters: by the input's (partition, offset) when the outputs carry it, else by the
input record's event time (``_replay.event_time_ms``: Flink Agents stamps every output with its input
record's timestamp). Outputs of one input record are then ordered by their content, so two runs with the same
outputs for a record pair equal outputs, whatever order the result topics returned them in. Without either,
the order within a key is the file order.

A pipeline's replay writes the outputs of the intermediate stages the user compares into the same stream,
marked ``_replay.stage`` (:func:`stage_of`; the last stage's outputs carry none). A stage's output is keyed
``<stage>:<key>`` (:func:`stage_key`), so it aligns only with the same stage's outputs of the other run, and
its fields are flattened below ``<stage>:$`` (``analysis:$.score``): a field group of its own, named so in
every report, that a rule targets as ``analysis:$.score`` (:func:`~.config.split_stage`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_flink_replay.core.compare.config import stage_root
from airflow_flink_replay.core.compare.loading import MAX_DEPTH, Source, iter_json_lines, source_name
from airflow_flink_replay.core.compare.paths import MISSING, Flattener, compile_key, key_text
from airflow_flink_replay.exceptions import CompareInputError, NestingError

#: Where an output's input record was: ``(partition, offset)`` of the input, or ``(event_time_ms,)``; None when
#: the output does not say (see :func:`replay_order`).
Order = tuple[int, ...]
#: One output: (flattened fields, line number in its file, its input record's :data:`Order` or None).
Entry = tuple[dict[str, Any], int, Order | None]
#: How the outputs of a key with several were ordered: by the input's (partition, offset), by the input
#: record's event time (then by content within a record), or as they came in the file.
OrderKind = Literal["input_offset", "event_time", "file_order"]


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


def event_time_of(obj: dict[str, Any]) -> int | None:
    """The input record's event time an output carries (``_replay.event_time_ms``), or None."""
    meta = obj.get("_replay")
    if isinstance(meta, dict):
        t = meta.get("event_time_ms")
        if type(t) is int:  # not a bool, not a float the writer made up
            return t
    return None


def replay_order(obj: dict[str, Any]) -> Order | None:
    """The output's input record as sort values: the input's ``(partition, offset)`` when the output carries
    both, else ``(event_time_ms,)`` (the replay job sets partition and offset to None: Flink Agents keeps only
    the record's timestamp), else None."""
    meta = obj.get("_replay")
    if isinstance(meta, dict):
        part, off = meta.get("partition"), meta.get("offset")
        if isinstance(part, int) and isinstance(off, int):
            return part, off
        t = meta.get("event_time_ms")
        if type(t) is int:
            return (t,)
    return None


def stage_of(obj: dict[str, Any]) -> str | None:
    """The pipeline stage an output belongs to (``_replay.stage``), or None for the last stage's outputs (no
    ``stage``, null, or anything but a non-empty string)."""
    meta = obj.get("_replay")
    if type(meta) is dict:
        stage = meta.get("stage")
        if type(stage) is str and stage:
            return stage
    return None


def stage_key(stage: str, key: str) -> str:
    """The key text of an intermediate stage's output: ``analysis`` and ``k-1`` -> ``analysis:k-1`` (it aligns
    with the same stage's outputs of that key only)."""
    return f"{stage}:{key}"


def output_key(obj: dict[str, Any], kv: Any) -> str:
    """An output's key text: ``kv``'s, made its stage's (:func:`stage_key`) for an intermediate stage's output."""
    stage = stage_of(obj)
    return key_text(kv) if stage is None else stage_key(stage, key_text(kv))


def keyed_output(
    obj: dict[str, Any], kv: Any, flattener: Flattener, source: str, lineno: int
) -> tuple[str, dict[str, Any]]:
    """An output's key text and flattened fields: as they are for the last stage's outputs, made the stage's
    (:func:`stage_key`, fields below :func:`~.config.stage_root`) for an intermediate stage's."""
    stage = stage_of(obj)
    if stage is None:
        return key_text(kv), flatten_output(flattener.flatten, obj, source, lineno)
    root = stage_root(stage)
    return stage_key(stage, key_text(kv)), flatten_output(lambda o: flattener.flatten(o, root), obj, source, lineno)


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
    """Flatten and group ``(line number, object)`` records into ``run`` (an intermediate stage's outputs by
    their stage's key, :func:`keyed_output`)."""
    by_key = run.by_key
    paths = run.paths
    source = run.source
    for lineno, obj in records:
        run.count += 1
        kv = key(obj)
        if kv is MISSING:
            run.note_unkeyed(lineno)
            continue
        k, flat = keyed_output(obj, kv, flattener, source, lineno)
        paths.update(flat)
        entry = (flat, lineno, replay_order(obj))
        entries = by_key.get(k)
        if entries is None:
            by_key[k] = [entry]
        else:
            entries.append(entry)
    order_within_keys(by_key)
    return run


def order_kind(entries: list[Entry]) -> OrderKind:
    """How :func:`order_within_keys` orders ``entries`` (the outputs of one key): by their input records when
    all carry the same kind of :data:`Order`, else in file order (mixed kinds do not compare)."""
    first = entries[0][2]
    if first is None or any(e[2] is None or len(e[2]) != len(first) for e in entries):
        return "file_order"
    return "input_offset" if len(first) == 2 else "event_time"


def content_text(flat: dict[str, Any]) -> str:
    """A flattened output as canonical text: equal outputs give equal text (orders the outputs of one input
    record, and finds equal outputs without comparing each pair)."""
    return json.dumps(flat, sort_keys=True, ensure_ascii=False, default=str)


def order_within_keys(by_key: dict[str, list[Entry]]) -> None:
    """Several outputs of one key: in the order of their input records, and by content within one record, when
    all carry it; else file order.

    Content decides within a record because its outputs come back from the replay's result topics in an
    arbitrary order: sorted, two runs with the same outputs for the record pair them equal. A changed output
    may then pair with a sibling of the record (its content sorts elsewhere): that counts as different, which
    it is."""
    for entries in by_key.values():
        if len(entries) > 1 and order_kind(entries) != "file_order":
            entries.sort(key=lambda e: (e[2], content_text(e[0]), e[1]))


@dataclass
class KeyShape:
    """How many outputs the correlation keys have in a run, and how keys with several were aligned: a key that
    is not unique per output (an agent emitting several outputs per input, or for several inputs of a key)
    aligns by input record or by order, and the comparison says which."""

    keys: int = 0
    outputs: int = 0
    #: keys with more than one output, and the most outputs one key has
    several: int = 0
    most: int = 0
    #: keys with several outputs by how they were ordered (:data:`OrderKind`)
    by: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, outputs: Iterable[dict[str, Any]], key: str) -> KeyShape:
        """The shape of raw outputs (e.g. production's first outputs, before a spec names its compare key)."""
        getter = compile_key(key)
        by_key: dict[str, list[Entry]] = {}
        for i, obj in enumerate(outputs):
            kv = getter(obj)
            if kv is not MISSING:
                by_key.setdefault(output_key(obj, kv), []).append(({}, i, replay_order(obj)))
        shape = cls()
        for entries in by_key.values():
            shape.add(entries)
        return shape

    def add(self, entries: list[Entry]) -> None:
        """Count one key's outputs."""
        n = len(entries)
        self.keys += 1
        self.outputs += n
        if n > 1:
            self.several += 1
            self.most = max(self.most, n)
            self.by[order_kind(entries)] += 1

    def merge(self, other: KeyShape) -> None:
        """Add the counts of other keys (another partition)."""
        self.keys += other.keys
        self.outputs += other.outputs
        self.several += other.several
        self.most = max(self.most, other.most)
        self.by.update(other.by)

    def not_unique(self, key: str) -> str:
        """``compare key $.id is not unique per output (5 keys, 40 outputs, up to 9 per key)``."""
        of = "" if self.several == self.keys else f", {self.several} of the keys with several"
        return (
            f"compare key {key} is not unique per output ({self.keys} keys, {self.outputs} outputs{of}, up to "
            f"{self.most} per key)"
        )

    def alignment(self) -> str:
        """How the keys with several outputs were aligned, in words."""
        said = {
            "event_time": "per input record (key + event time)",
            "input_offset": "per input record (key + the input's partition and offset)",
            "file_order": "by their order within the key (the outputs carry no event time)",
        }
        parts = [(said[kind], n) for kind, n in self.by.most_common()]
        if len(parts) == 1:
            return f"outputs aligned {parts[0][0]}"
        return "outputs aligned " + ", ".join(f"{how} for {n} key{'s' * (n != 1)}" for how, n in parts)

"""Wait, bounded, until production has processed the replay window (before a replay relies on its cassette).

See :mod:`airflow_flink_replay.core.window_coverage` for why and what is measured. Reads the window's input
records' event times from the capture topic once, then production's output topic from its offsets at the
savepoint onwards, a little more on each look, until every window record has an output or the time is up.
Records and outputs are tied by event time, and by the comparison's key too when the input records carry it
(:func:`~airflow_flink_replay.core.window_coverage.window_units`); or, for a pipeline whose outputs come from an
event-time window (``tie="watermark"``, the spec's ``window.outputs_tied_by``), by production's watermark: an
output stamped T means every record up to T was processed
(:func:`~airflow_flink_replay.core.window_coverage.records_before`).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from airflow_flink_replay.core.manifest import ReplayManifest
from airflow_flink_replay.core.window_coverage import Tie, WindowCoverage, records_before, window_units
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook, Record

__all__ = ["await_records", "await_window"]

#: Seconds between looks at production's output topic.
POLL_S = 1.0


KeyOf = Callable[[bytes | None], str | None]


def key_reader(key_path: str | None) -> KeyOf:
    """``value bytes -> key text or None``: the JSONPath ``key_path`` looked up in a JSON record value (None
    for every record without a path, or a value that is not JSON or lacks it)."""
    if not key_path:
        return lambda _value: None
    from airflow_flink_replay.core.compare.paths import MISSING, compile_key, key_text

    get = compile_key(key_path)

    def key_of(value: bytes | None) -> str | None:
        try:
            found = get(json.loads(value)) if value else MISSING
        except ValueError:
            return None
        return None if found is MISSING or found is None else key_text(found)

    return key_of


class _OutputTimes:
    """Production's output timestamps (with their keys when ``key_of`` reads them) from the savepoint on, read
    incrementally (each record once)."""

    def __init__(self, hook: KafkaOffsetsHook, topic: str, start_offsets: dict[int, int],
                 key_of: KeyOf | None = None) -> None:
        self.hook, self.topic, self.key_of = hook, topic, key_of
        self.next = {int(p): int(o) for p, o in start_offsets.items()}
        self.times: Counter[int] = Counter()
        self.units: Counter[tuple[int, str | None]] = Counter()

    def read_more(self) -> None:
        ends = self.hook.end_offsets(self.topic)
        ranges = {p: (self.next.get(p, 0), end) for p, end in ends.items() if end > self.next.get(p, 0)}

        def note(record: Record) -> None:
            self.next[record.partition] = record.offset + 1
            if record.timestamp_ms > 0:
                self.times[record.timestamp_ms] += 1
                if self.key_of is not None:
                    self.units[record.timestamp_ms, self.key_of(record.value)] += 1

        if ranges:
            self.hook.consume(self.topic, ranges, note)


def await_window(
    hook: KafkaOffsetsHook,
    manifest: ReplayManifest,
    *,
    timeout: float,
    log: Any,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    key_path: str | None = None,
    tie: Tie = "record",
) -> WindowCoverage | None:
    """Wait until production's outputs reach every record of ``manifest``'s window, at most ``timeout`` s
    (:func:`await_records`; ``key_path``: the comparison's key; ``tie``: how outputs tie to records,
    :data:`~airflow_flink_replay.core.window_coverage.Tie`). None when the manifest links no output topic
    (nothing to tell production's progress by: logged)."""
    outputs = manifest.capture.production_outputs
    if outputs is None:
        log.warning("cannot tell whether production processed the window before the replays read its cassette: "
                    "the manifest records no production output topic (set production.output_topic in the spec)")
        return None
    capture = manifest.capture
    ends = capture.end_offsets()
    window = {p: (start, ends[p]) for p, start in capture.start_offsets().items()}
    return await_records(hook, capture.topic, window, outputs.topic, dict(outputs.start_offsets), timeout=timeout,
                         log=log, sleep=sleep, clock=clock, key_path=key_path, tie=tie)


def await_records(
    hook: KafkaOffsetsHook,
    capture_topic: str,
    window: dict[int, tuple[int, int]],
    output_topic: str,
    output_starts: dict[int, int],
    *,
    timeout: float,
    log: Any,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    key_path: str | None = None,
    tie: Tie = "record",
) -> WindowCoverage:
    """Wait until ``output_topic`` (read from ``output_starts``) holds an output for every record of the capture
    topic's ``window`` (``{partition: (start, end)}``), tied by event time (and by the JSONPath ``key_path``
    when the window's records carry it) — or, with ``tie="watermark"``, until an output is stamped at or after
    every window record's event time — at most ``timeout`` seconds."""
    key_of = key_reader(key_path if tie == "record" else None)
    records: list[tuple[int, str | None]] = []
    hook.consume(capture_topic, window, lambda r: records.append((r.timestamp_ms, key_of(r.value))))
    units = window_units(records)
    if isinstance(units, str):
        log.warning("%s", units)
        return WindowCoverage(records=0, reached=0, note=units)
    total = units.total
    seen = _OutputTimes(hook, output_topic, output_starts, key_of if units.keyed is not None else None)
    started = clock()
    while True:
        seen.read_more()
        if tie == "watermark":
            reached, note = records_before(units.times, max(seen.times, default=None)), ""
        else:
            reached, note = units.reached(seen.times, seen.units)
        waited = clock() - started
        if note or reached >= total or waited + POLL_S > timeout:
            coverage = WindowCoverage(records=total, reached=reached, waited_s=round(waited, 2), timeout_s=timeout,
                                      note=note)
            (log.info if coverage.complete else log.warning)("%s", coverage.describe())
            return coverage
        log.info("production has output %d of the window's %d records so far; waiting (%.0f s left)",
                 reached, total, timeout - waited)
        sleep(POLL_S)

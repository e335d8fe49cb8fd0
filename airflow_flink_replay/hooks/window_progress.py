"""Wait, bounded, until production has processed the replay window (before a replay relies on its cassette).

See :mod:`airflow_flink_replay.core.window_coverage` for why and what is measured. Reads the window's input
records' event times from the capture topic once, then production's output topic from its offsets at the
savepoint onwards, a little more on each look, until every window record has an output or the time is up.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from airflow_flink_replay.core.manifest import ReplayManifest
from airflow_flink_replay.core.window_coverage import WindowCoverage, count_times, records_reached
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook, Record

__all__ = ["await_records", "await_window"]

#: Seconds between looks at production's output topic.
POLL_S = 1.0


class _OutputTimes:
    """Production's output timestamps from the savepoint on, read incrementally (each record once)."""

    def __init__(self, hook: KafkaOffsetsHook, topic: str, start_offsets: dict[int, int]) -> None:
        self.hook, self.topic = hook, topic
        self.next = {int(p): int(o) for p, o in start_offsets.items()}
        self.times: Counter[int] = Counter()

    def read_more(self) -> None:
        ends = self.hook.end_offsets(self.topic)
        ranges = {p: (self.next.get(p, 0), end) for p, end in ends.items() if end > self.next.get(p, 0)}

        def note(record: Record) -> None:
            self.next[record.partition] = record.offset + 1
            if record.timestamp_ms > 0:
                self.times[record.timestamp_ms] += 1

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
) -> WindowCoverage | None:
    """Wait until production's outputs reach every record of ``manifest``'s window, at most ``timeout`` s
    (:func:`await_records`). None when the manifest links no output topic (nothing to tell production's
    progress by: logged)."""
    outputs = manifest.capture.production_outputs
    if outputs is None:
        log.warning("cannot tell whether production processed the window before the replays read its cassette: "
                    "the manifest records no production output topic (set production.output_topic in the spec)")
        return None
    capture = manifest.capture
    ends = capture.end_offsets()
    window = {p: (start, ends[p]) for p, start in capture.start_offsets().items()}
    return await_records(hook, capture.topic, window, outputs.topic, dict(outputs.start_offsets), timeout=timeout,
                         log=log, sleep=sleep, clock=clock)


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
) -> WindowCoverage:
    """Wait until ``output_topic`` (read from ``output_starts``) holds an output for every record of the capture
    topic's ``window`` (``{partition: (start, end)}``), tied by event time, at most ``timeout`` seconds."""
    times: list[int] = []
    hook.consume(capture_topic, window, lambda r: times.append(r.timestamp_ms))
    window_times = count_times(times)
    total = sum(window_times.values())
    if len(times) > total:
        return WindowCoverage(records=0, reached=0, note=f"{len(times) - total} window record(s) carry no event "
                              "time: production's progress cannot be told by its outputs")
    seen = _OutputTimes(hook, output_topic, output_starts)
    started = clock()
    while True:
        seen.read_more()
        reached = records_reached(window_times, seen.times)
        waited = clock() - started
        if reached >= total or waited + POLL_S > timeout:
            coverage = WindowCoverage(records=total, reached=reached, waited_s=round(waited, 2), timeout_s=timeout)
            (log.info if coverage.complete else log.warning)("%s", coverage.describe())
            return coverage
        log.info("production has output %d of the window's %d records so far; waiting (%.0f s left)",
                 reached, total, timeout - waited)
        sleep(POLL_S)

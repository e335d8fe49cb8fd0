"""Production's own outputs for a replay window, read from its output topic (for the fidelity figure).

Production writes one JSON object per output to its output topic. The outputs of the window's input records
are written after those records were captured, so the read starts at the output topic's offsets for the
window's first capture timestamp (less ``margin_ms``, for event-time timestamps out of order) and runs to
the log end; the comparison keeps, per correlation key, as many outputs as the baseline has, in order
(:func:`~airflow_flink_replay.core.compare.fidelity.measure_fidelity`).
"""

from __future__ import annotations

from pathlib import Path

from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook, time_index

__all__ = ["export_outputs"]


def export_outputs(
    hook: KafkaOffsetsHook,
    topic: str,
    target: Path,
    *,
    since_ms: int | None,
    margin_ms: int = 600_000,
    index: str = "scan",
    timeout: float = 120.0,
) -> int:
    """Write ``topic``'s records from ``since_ms - margin_ms`` (all of it when ``since_ms`` is None) to the log
    end into ``target``, one value per line; returns how many. ``index``: ``scan`` (any broker, reads from the
    log start to find the offsets) or ``broker`` (Apache Kafka's time index)."""
    begins = hook.begin_offsets(topic)
    ends = hook.end_offsets(topic)
    starts: dict[int, int | None] = dict(begins)
    if since_ms is not None:
        starts = time_index(index, hook).offsets_for_time(topic, max(0, since_ms - margin_ms), begins)
    ranges = {p: (ends[p] if starts.get(p) is None else int(starts[p] or 0), ends[p]) for p in begins}
    written = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8") as out:

        def keep(record: object) -> None:
            nonlocal written
            value = getattr(record, "value", None)
            if value:
                out.write((value.decode("utf-8") if isinstance(value, bytes) else str(value)).strip() + "\n")
                written += 1

        hook.consume(topic, ranges, keep, timeout=timeout)
    return written

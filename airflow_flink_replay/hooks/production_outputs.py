"""Production's own outputs for a replay window, read from its output topic (for the fidelity figure).

Production processes the window's records after it resumes from the savepoint, so their outputs come after
the output topic's end offsets read at the savepoint (recorded in the manifest). The read runs from there to
the log end; the comparison keeps, per correlation key, as many outputs as the baseline has, in order
(:func:`~airflow_flink_replay.core.compare.fidelity.measure_fidelity`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook, Record

__all__ = ["export_outputs"]


def export_outputs(
    hook: KafkaOffsetsHook, topic: str, target: Path, *, start_offsets: Mapping[int, int], timeout: float = 120.0
) -> int:
    """Write ``topic``'s records from ``start_offsets`` to the log end into ``target``, one value per line;
    returns how many."""
    ends = hook.end_offsets(topic)
    ranges = {int(p): (int(start_offsets.get(p, 0)), end) for p, end in ends.items()}
    written = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8") as out:

        def keep(record: Record) -> None:
            nonlocal written
            if record.value:
                out.write(record.value.decode("utf-8").strip() + "\n")
                written += 1

        hook.consume(topic, ranges, keep, timeout=timeout)
    return written

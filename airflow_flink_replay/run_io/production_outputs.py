"""Production's own outputs for a replay window, read from its output topic (for the fidelity figure).

Production processes the window's records after it resumes from the savepoint, so their outputs come after
the output topic's end offsets read at the savepoint (recorded in the manifest). The read runs from there to
the log end; the comparison ties each output to its input record by the correlation key and the record's
event time (:func:`~airflow_flink_replay.core.compare.fidelity.measure_fidelity`), which is why each output
is written with the Kafka record's timestamp.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_flink_replay.core.local_files import replacing
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook, Record

__all__ = ["export_outputs"]


def export_outputs(
    hook: KafkaOffsetsHook, topic: str, target: Path, *, start_offsets: Mapping[int, int], timeout: float = 120.0
) -> int:
    """Write ``topic``'s records from ``start_offsets`` to the log end into ``target``, one value per line;
    returns how many.

    A value that is a JSON object is written with a ``_replay`` block added, ``{"variant": "production",
    "event_time_ms", "partition", "offset"}``, as the replay job writes its own: ``event_time_ms`` is the
    record's timestamp, which Flink's Kafka sink sets to the element's timestamp — the event time of the input
    record the agent answered (Flink Agents keeps it on every output). It ties production's outputs to the
    baseline's per input record, whatever order the topic's partitions return them in; a timestamp Kafka does
    not have (-1, or 0 from an old producer) is None. Partition and offset are the *output* record's, for a
    reader looking it up. Any other value is written as it is (the comparison reports it as bad input)."""
    ends = hook.end_offsets(topic)
    ranges = {int(p): (int(start_offsets.get(p, 0)), end) for p, end in ends.items()}
    written = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with replacing(target) as out:  # a symlink planted at the name is replaced, never written through

        def keep(record: Record) -> None:
            nonlocal written
            if record.value:
                out.write(_line(record) + "\n")
                written += 1

        hook.consume(topic, ranges, keep, timeout=timeout)
    return written


def _line(record: Record) -> str:
    """The record's value as one JSONL line, with the ``_replay`` block when it is a JSON object."""
    text = (record.value or b"").decode("utf-8").strip()
    try:
        value: Any = json.loads(text)
    except ValueError:
        return text
    if not isinstance(value, dict):
        return text
    value["_replay"] = {
        "variant": "production",
        "event_time_ms": record.timestamp_ms if record.timestamp_ms > 0 else None,
        "partition": record.partition,
        "offset": record.offset,
    }
    return json.dumps(value)  # ASCII: a "\ud800" escape in the value stays writable

"""Production's outputs for the fidelity figure: each written with its record's timestamp, the tie to its input
record (a fake hook: the Kafka reading itself is the offsets hook's, tested with the stack)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from airflow_flink_replay.hooks.kafka_offsets import Record
from airflow_flink_replay.run_io.production_outputs import export_outputs


class FakeOffsetsHook:
    """``end_offsets`` and ``consume`` over records given per partition."""

    def __init__(self, records: dict[int, list[Record]]) -> None:
        self.records = records
        self.ranges: dict[int, tuple[int, int]] = {}

    def end_offsets(self, topic: str) -> dict[int, int]:
        return {p: (rs[-1].offset + 1 if rs else 0) for p, rs in self.records.items()}

    def consume(self, topic: str, ranges: Mapping[int, tuple[int, int]], on_record: Callable[[Record], None],
                *, timeout: float = 60.0) -> None:
        self.ranges = dict(ranges)
        for p, (start, end) in sorted(ranges.items()):
            for record in self.records[p]:
                if start <= record.offset < end:
                    on_record(record)


def test_outputs_carry_their_record_timestamp_partition_and_offset(tmp_path: Path) -> None:
    hook = FakeOffsetsHook({
        0: [Record(0, 4, 1_000, b"k", b'{"id": "before"}'), Record(0, 5, 2_000, b"k", b'{"id": "a", "n": 1}\n')],
        1: [Record(1, 0, -1, None, b'{"id": "b"}'), Record(1, 1, 0, None, b"[1, 2]"), Record(1, 2, 3_000, None, b""),
            Record(1, 3, 4_000, None, b"not json")],
    })
    target = tmp_path / "out" / "production.jsonl"
    written = export_outputs(hook, "outputs", target, start_offsets={0: 5})  # type: ignore[arg-type]
    assert hook.ranges == {0: (5, 6), 1: (0, 4)}
    lines = target.read_text().splitlines()
    assert written == len(lines) == 4
    assert json.loads(lines[0]) == {"id": "a", "n": 1, "_replay": {"variant": "production", "event_time_ms": 2_000,
                                                                   "partition": 0, "offset": 5}}
    assert json.loads(lines[1])["_replay"] == {"variant": "production", "event_time_ms": None, "partition": 1,
                                               "offset": 0}  # Kafka has no timestamp for it
    assert lines[2:] == ["[1, 2]", "not json"]  # written as they are: the comparison reports them


def test_a_symlink_planted_at_the_outputs_file_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "production.outputs.jsonl"
    target.symlink_to(victim)
    hook = FakeOffsetsHook({0: [Record(0, 0, 1_000, b"k", b'{"id": "a"}')]})
    assert export_outputs(hook, "outputs", target, start_offsets={}) == 1  # type: ignore[arg-type]
    assert victim.read_text() == "keep me"
    assert not target.is_symlink() and json.loads(target.read_text())["id"] == "a"

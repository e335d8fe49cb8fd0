"""The replay's start offsets as the stop window and ``RecordStartOffsetsOperator`` read them, from a Kafka that
answers end offsets per topic: exact after a stop, linked through the offsets read before a savepoint that kept
production running (an earlier start-offsets XCom works as that), never guessed without them."""

from __future__ import annotations

import pytest

from airflow_flink_replay.lifecycle.start_offsets import read_start_offsets

END = {"capture": {0: 42, 1: 7}, "outputs": {0: 5}, "cassette": {0: 9}}


class Kafka:
    def end_offsets(self, topic: str) -> dict[int, int]:
        return dict(END[topic])


def test_after_a_stop_the_end_offsets_are_the_start_with_the_output_and_cassette_topics_read_alike() -> None:
    quiesce = {"job_id": "j1", "savepoint_path": "file:/sp/s-1", "mode": "drain", "production_stopped": True}
    start = read_start_offsets(Kafka(), "capture", quiesce, output_topic="outputs", cassette_topic="cassette")  # type: ignore[arg-type]
    assert (start.offsets, start.racing_records, start.job_id, start.quiesce_mode) == (END["capture"], 0, "j1", "drain")
    assert (start.output_offsets, start.cassette_offsets, start.savepoint_path) == ({0: 5}, {0: 9}, "file:/sp/s-1")


def test_a_savepoint_that_kept_production_running_is_linked_through_the_offsets_read_before() -> None:
    quiesce = {"mode": "savepoint", "production_stopped": False}
    before = {"topic": "capture", "offsets": {"0": 40, "1": 7}}  # the earlier read's XCom
    start = read_start_offsets(Kafka(), "capture", quiesce, before)  # type: ignore[arg-type]
    assert (start.offsets, start.racing_records, start.offsets_before) == (END["capture"], 2, {0: 40, 1: 7})
    with pytest.raises(ValueError, match="kept production running"):
        read_start_offsets(Kafka(), "capture", quiesce)  # type: ignore[arg-type]

"""Waiting, bounded, until production has processed the replay window (``hooks/window_progress.py``): the window's
event times read once from the capture topic, production's outputs read a little more on each look (each output
once), the keys read from JSON values, and a wait that ends when every record is reached or the time is up.

The broker is ``FakeKafka``, the in-memory stand-in of ``tests/fake_kafka.py`` (no broker runs in the unit tests);
the clock is a virtual one that the wait's own ``sleep`` advances, so a 30-second wait takes no time. The same on
the real broker: tests/integration/test_window_progress.py. How records and outputs are tied:
tests/unit/core/test_window_coverage.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

from airflow_flink_replay.core.manifest import ReplayManifest
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook
from airflow_flink_replay.hooks.window_progress import POLL_S, await_records, await_window, key_reader
from tests.fake_kafka import FakeKafka, on_fake_kafka
from tests.unit.core.test_manifest import _data

CAPTURE, OUTPUT = "reviews-capture", "reviews-out"
log = logging.getLogger("test_window_progress")


class Clock:
    """Virtual time: ``sleep`` advances it and lets production make progress (``on_sleep``)."""

    def __init__(self, on_sleep: Callable[[int], None] | None = None) -> None:
        self.now = 1000.0
        self.sleeps = 0
        self.on_sleep = on_sleep

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        if self.on_sleep is not None:
            self.on_sleep(self.sleeps)


def record(i: int) -> bytes:
    return json.dumps({"id": f"r-{i}", "text": "..."}).encode()


@pytest.fixture
def kafka() -> FakeKafka:
    """The window: 4 capture records at t = 10, 20, 30, 40 (offsets 2-5, after two older ones). Production's output
    topic holds 1 output of before the savepoint (offset 0, t = 5)."""
    broker = FakeKafka()
    broker.create(CAPTURE, 1)
    broker.create(OUTPUT, 1)
    broker.add(CAPTURE, 0, 1, record(-2))
    broker.add(CAPTURE, 0, 2, record(-1))
    for i in range(4):
        broker.add(CAPTURE, 0, 10 * (i + 1), record(i))
    broker.add(OUTPUT, 0, 5, record(-1))
    return broker


def hook(kafka: FakeKafka) -> KafkaOffsetsHook:
    return on_fake_kafka(KafkaOffsetsHook, kafka, kafka_config_id="kafka_unit")


def wait(kafka: FakeKafka, clock: Clock, timeout: float = 30.0, window: tuple[int, int] = (2, 6), **kw: Any) -> Any:
    return await_records(
        hook(kafka),
        CAPTURE,
        {0: window},
        OUTPUT,
        {0: 1},
        timeout=timeout,
        log=log,
        sleep=clock.sleep,
        clock=clock,
        **kw,
    )


def output(kafka: FakeKafka, *times: int, key: int | None = None) -> None:
    for t in times:
        kafka.add(OUTPUT, 0, t, record(key if key is not None else t))


# ------------------------------------------------------------------------------------------------ keys
def test_the_key_is_read_from_a_json_value_as_text() -> None:
    key_of = key_reader("$.id")
    assert key_of(b'{"id": "r-1"}') == "r-1"
    assert key_of(b'{"id": 42}') == "42" and key_of(b'{"id": {"b": 1, "a": 2}}') == '{"a":2,"b":1}'


@pytest.mark.parametrize("value", [None, b"", b"not json", b'{"other": 1}', b'{"id": null}', b"[1, 2]", b"\xff"])
def test_a_value_without_the_key_has_none(value: bytes | None) -> None:
    assert key_reader("$.id")(value) is None


def test_without_a_key_path_no_value_has_a_key() -> None:
    for path in (None, ""):
        assert key_reader(path)(b'{"id": "r-1"}') is None


# ------------------------------------------------------------------------------------------------ the wait
def test_a_window_production_already_processed_ends_the_wait_at_the_first_look(
    kafka: FakeKafka, caplog: pytest.LogCaptureFixture
) -> None:
    output(kafka, 10, 20, 30, 40)
    clock = Clock()
    with caplog.at_level(logging.INFO, logger=log.name):
        coverage = wait(kafka, clock)
    assert (coverage.records, coverage.reached, coverage.complete, coverage.waited_s) == (4, 4, True, 0.0)
    assert clock.sleeps == 0
    assert caplog.records[-1].levelno == logging.INFO and caplog.records[-1].getMessage() == coverage.describe()


def test_the_wait_follows_production_until_every_record_is_reached(
    kafka: FakeKafka, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(on_sleep=lambda n: output(kafka, 10 * n))  # production outputs one record a second
    with caplog.at_level(logging.INFO, logger=log.name):
        coverage = wait(kafka, clock)
    assert coverage.complete and coverage.reached == 4 and clock.sleeps == 4
    assert coverage.waited_s == 4 * POLL_S and coverage.timeout_s == 30.0
    progress = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    assert progress[0] == "production has output 0 of the window's 4 records so far; waiting (30 s left)"
    assert progress[-1].startswith("production has output 3 of the window's 4 records")


def test_each_output_is_counted_once_however_many_looks(kafka: FakeKafka) -> None:
    """Two window records share t = 40 and one output has it: read again on each look it would count twice."""
    kafka.add(CAPTURE, 0, 40, record(9))
    output(kafka, 10, 20, 30, 40)
    clock = Clock()
    coverage = wait(kafka, clock, timeout=5.0, window=(2, 7))
    assert (coverage.records, coverage.reached, coverage.complete) == (5, 4, False)


def test_production_that_never_reaches_the_window_times_the_wait_out_with_a_warning(
    kafka: FakeKafka, caplog: pytest.LogCaptureFixture
) -> None:
    output(kafka, 10, 20)
    clock = Clock()
    with caplog.at_level(logging.INFO, logger=log.name):
        coverage = wait(kafka, clock, timeout=5.0)
    assert (coverage.reached, coverage.complete) == (2, False)
    assert coverage.waited_s <= 5.0 and clock.now - 1000.0 <= 5.0  # never beyond the timeout
    assert caplog.records[-1].levelno == logging.WARNING and "2 of 4" in caplog.records[-1].getMessage()


def test_outputs_before_the_savepoint_do_not_count(kafka: FakeKafka) -> None:
    """The output at offset 0 (t = 5) is production's answer to an older record: the output topic is read from
    its offset at the savepoint (1)."""
    kafka.add(CAPTURE, 0, 5, record(8))  # a window record with the old output's time
    coverage = wait(kafka, Clock(), timeout=1.0, window=(2, 7))
    assert (coverage.records, coverage.reached) == (5, 0)


def test_records_without_an_event_time_cannot_be_judged(kafka: FakeKafka, caplog: pytest.LogCaptureFixture) -> None:
    kafka.add(CAPTURE, 0, 0, record(7))
    clock = Clock()
    with caplog.at_level(logging.INFO, logger=log.name):
        coverage = wait(kafka, clock, window=(2, 7))
    assert (coverage.records, coverage.reached, coverage.complete) == (0, 0, False)
    assert coverage.note.startswith("1 window record(s) carry no event time") and clock.sleeps == 0
    assert caplog.records[-1].levelno == logging.WARNING


def test_records_are_tied_to_outputs_by_key_when_they_carry_it(kafka: FakeKafka) -> None:
    """Outputs of the window's times but other records' keys (r-0 twice) do not reach r-1, r-2 and r-3."""
    for t in (10, 20, 30, 40):
        output(kafka, t, key=0)
    by_time = wait(kafka, Clock(), timeout=1.0)
    by_key = wait(kafka, Clock(), timeout=1.0, key_path="$.id")
    assert by_time.reached == 4
    assert (by_key.records, by_key.reached, by_key.complete) == (4, 1, False)


# ------------------------------------------------------------------------------------------------ the manifest
def manifest(outputs: dict[str, Any] | None) -> ReplayManifest:
    data = _data()
    data["capture"]["topic"] = CAPTURE
    data["capture"]["partitions"] = [
        {
            "partition": 0,
            "start_offset": 2,
            "end_offset": 6,
            "record_count": 4,
            "first_timestamp_ms": 10,
            "last_timestamp_ms": 40,
        }
    ]
    if outputs is not None:
        data["capture"]["production_outputs"] = outputs
    return ReplayManifest.model_validate(data)


def test_the_manifest_gives_the_window_and_where_productions_outputs_start(kafka: FakeKafka) -> None:
    output(kafka, 10, 20, 30, 40)
    clock = Clock()
    coverage = await_window(
        hook(kafka),
        manifest({"topic": OUTPUT, "start_offsets": {0: 1}}),
        timeout=10.0,
        log=log,
        sleep=clock.sleep,
        clock=clock,
    )
    assert coverage is not None and coverage.complete and coverage.records == 4
    late = await_window(
        hook(kafka),
        manifest({"topic": OUTPUT, "start_offsets": {0: 5}}),
        timeout=2.0,
        log=log,
        sleep=clock.sleep,
        clock=clock,
    )
    assert late is not None and late.reached == 0  # the outputs are before where production's start


def test_a_manifest_without_productions_output_topic_is_not_waited_on(
    kafka: FakeKafka, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=log.name):
        assert await_window(hook(kafka), manifest(None), timeout=10.0, log=log) is None
    assert "set production.output_topic in the spec" in caplog.records[-1].getMessage()


# ------------------------------------------------------------------------------ tied by watermark
def test_a_pipelines_aggregates_reach_every_record_up_to_their_time(
    kafka: FakeKafka, caplog: pytest.LogCaptureFixture
) -> None:
    """A pipeline with an event-time window outputs aggregates stamped with their window's end, which tie to no
    single record: an output at t = 29 (a window [0, 30) fired) means the records at 10 and 20 went through; the
    wait ends when an output is stamped at or after the last record (40)."""
    clock = Clock(on_sleep=lambda n: output(kafka, {1: 29, 2: 59}.get(n, 1)))
    with caplog.at_level(logging.INFO, logger=log.name):
        coverage = wait(kafka, clock, tie="watermark")
    assert coverage.complete and (coverage.records, coverage.reached) == (4, 4) and clock.sleeps == 2
    progress = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    assert progress == ["production has output 0 of the window's 4 records so far; waiting (30 s left)",
                        "production has output 2 of the window's 4 records so far; waiting (29 s left)"]  # fmt: skip


def test_the_same_aggregates_tied_record_by_record_reach_no_record(kafka: FakeKafka) -> None:
    output(kafka, 29, 59)
    coverage = wait(kafka, Clock(), timeout=2.0)
    assert (coverage.reached, coverage.complete) == (0, False)


def test_outputs_before_the_savepoint_do_not_advance_the_watermark_tie(kafka: FakeKafka) -> None:
    """An output stamped after the whole window but written before the savepoint (offset 0) counts for nothing."""
    broker = FakeKafka()
    broker.create(CAPTURE, 1)
    broker.create(OUTPUT, 1)
    broker.add(CAPTURE, 0, 10, record(0))
    broker.add(OUTPUT, 0, 100, record(9))
    coverage = await_records(hook(broker), CAPTURE, {0: (0, 1)}, OUTPUT, {0: 1}, timeout=2.0, log=log,
                             sleep=(clock := Clock()).sleep, clock=clock, tie="watermark")  # fmt: skip
    assert (coverage.records, coverage.reached, coverage.complete) == (1, 0, False)

"""The replay's event-time extraction from a JSONPath field (the manifest's ``capture.event_time``)."""

from __future__ import annotations

import json
import pickle

import pytest

from airflow_flink_replay.core.replay_job_spec import ReplayTiming
from airflow_flink_replay.flink.event_time import EventTimeExtractor, needs_operator, parse_jsonpath


def test_jsonpath_subset() -> None:
    assert parse_jsonpath("$.ts") == ["ts"]
    assert parse_jsonpath("$.event.meta['ts-ms']") == ["event", "meta", "ts-ms"]
    assert parse_jsonpath('$.events[2]["at"]') == ["events", 2, "at"]
    for bad, msg in (("ts", "start it with '\\$'"), ("$", "whole value"), ("$.a[*]", "cannot read")):
        with pytest.raises(ValueError, match=msg):
            parse_jsonpath(bad)


@pytest.mark.parametrize(
    ("field", "unit", "value", "expected"),
    [
        ("$.ts", "ms", {"ts": 1_767_225_600_123}, 1_767_225_600_123),
        ("$.meta.at", "s", {"meta": {"at": 1_767_225_600.5}}, 1_767_225_600_500),
        ("$.meta.at", "s", {"meta": {"at": "1767225600"}}, 1_767_225_600_000),
        ("$.when", "iso8601", {"when": "2026-01-01T00:00:00.250Z"}, 1_767_225_600_250),
        ("$.when", "iso8601", {"when": "2026-01-01T01:00:00+01:00"}, 1_767_225_600_000),
        ("$.items[1].t", "ms", {"items": [{"t": 1}, {"t": 2}]}, 2),
    ],
)
def test_extracts_event_time_in_ms(field: str, unit: str, value: dict, expected: int) -> None:
    extractor = EventTimeExtractor(field, unit)
    assert extractor.extract_timestamp(json.dumps(value), 42) == expected  # the record timestamp is not used
    assert extractor.event_time_ms(value) == expected


def test_missing_or_bad_field_names_the_field() -> None:
    extractor = EventTimeExtractor("$.event.ts")
    with pytest.raises(ValueError, match=r"event time field \$\.event\.ts not found in the record"):
        extractor.extract_timestamp('{"id": "r-1", "ts": 5}', 0)
    with pytest.raises(ValueError, match=r"\$\.event\.ts \(ms\): event time 'soon' is not a number"):
        extractor.event_time_ms({"event": {"ts": "soon"}})
    with pytest.raises(ValueError, match="has no time zone"):
        EventTimeExtractor("$.t", "iso8601").event_time_ms({"t": "2026-01-01T00:00:00"})
    with pytest.raises(ValueError, match="unit 'h'"):
        EventTimeExtractor("$.t", "h")


def test_extractor_pickles_for_the_python_worker() -> None:
    extractor = pickle.loads(pickle.dumps(EventTimeExtractor("$.a['b']", "s")))
    assert extractor.extract_timestamp('{"a": {"b": 2}}', 0) == 2000


def test_operator_only_when_the_timing_needs_one() -> None:
    assert needs_operator(ReplayTiming())
    assert not needs_operator(ReplayTiming(watermark="none"))
    assert needs_operator(ReplayTiming(watermark="none", event_time={"source": "field", "field": "$.ts"}))

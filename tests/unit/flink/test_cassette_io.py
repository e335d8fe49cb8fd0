"""Production's recorder keeps each call's arguments one by one, so a replay can match reworded free text."""

from __future__ import annotations

import pytest

from airflow_flink_replay.core.cassette import Cassette, CassetteEntry, CassetteRecording
from airflow_flink_replay.flink import cassette_io

pytestmark = pytest.mark.unit


def test_recorded_calls_keep_argument_digests_and_texts_without_secrets() -> None:
    recorder = cassette_io.CassetteRecorder(CassetteRecording(bootstrap="localhost:1", topic="t", namespace="job-7"))
    written: list[CassetteEntry] = []
    recorder._produce = written.append  # type: ignore[method-assign]
    kwargs = {"review_id": "r-1", "reason": "negative (1/5): broken, reported for job-7", "token": "sk-planted"}
    recorder.record(resource_type="tool", resource_name="notify_support", method="call", key="c-1", args=(),
                    kwargs=kwargs, result="ticket-1")
    recorder.record(resource_type="tool", resource_name="notify_support", method="call", key="c-1", args=(),
                    kwargs=kwargs, error=TimeoutError("slow"))
    served, failed = written
    assert recorder.failures == 0 and failed.error == "TimeoutError: slow"
    assert set(served.arg_digests) == {"review_id", "reason", "token"} and failed.arg_digests == served.arg_digests
    assert served.arg_texts == {"review_id": "r-1", "reason": "negative (1/5): broken, reported for <replay-namespace>"}
    # a replay (its own namespace) that words the reason otherwise is served production's result
    cassette = Cassette([served])
    from airflow_flink_replay.core.call_match import CallArguments

    replayed = CallArguments.of((), {**kwargs, "reason": "negative, 1/5: broken, reported for job-8"},
                                replace={"job-8": "<replay-namespace>"})
    found = cassette.match("notify_support", "call", "c-1", replayed)
    assert found is not None and found.entry.result == "ticket-1" and found.matched == "arguments"

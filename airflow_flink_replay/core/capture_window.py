"""The capture window: which slice of the capture topic a replay reads, and when it is complete.

A window starts at the start offsets (the capture topic's end offsets right after production stopped with
a savepoint) and ends by one of:

- ``min_records``: N records past the start (with ``exact``, cut to exactly the first N);
- ``duration_seconds``: T seconds of wall-clock time after ``started_at`` (the end offsets at that time);
- ``end_offsets``: explicit end offsets per partition (exclusive);
- ``until_timestamp_ms``: records whose Kafka timestamp is before a cut-off (needs a time index).

``min_records``/``until_timestamp_ms`` may be combined with ``duration_seconds`` (whichever comes first).
Pure: the offset/time decisions here; reading records lives in the Kafka hook.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Reason = Literal["records", "duration", "end_offsets", "timestamp"]


class CaptureWindowSpec(BaseModel):
    """What the window sensor/trigger waits for."""

    model_config = ConfigDict(extra="forbid")

    topic: str = Field(min_length=1)
    start_offsets: dict[int, int] = Field(min_length=1)
    min_records: int | None = Field(default=None, ge=1)
    duration_seconds: float | None = Field(default=None, gt=0)
    end_offsets: dict[int, int] | None = None
    until_timestamp_ms: int | None = Field(default=None, ge=0)
    started_at: datetime | None = Field(default=None, description="start of a duration window (UTC)")
    exact: bool = Field(default=True, description="cut a min_records window to exactly N records")
    time_index: Literal["scan", "broker"] = "scan"

    @model_validator(mode="after")
    def _one_end(self) -> CaptureWindowSpec:
        ends = [self.min_records, self.duration_seconds, self.end_offsets, self.until_timestamp_ms]
        if all(e is None for e in ends):
            raise ValueError(
                "the capture window has no end. Fix: give min_records (N records), duration_seconds (T), "
                "end_offsets, or until_timestamp_ms"
            )
        if self.end_offsets is not None:
            if any(e is not None for e in (self.min_records, self.duration_seconds, self.until_timestamp_ms)):
                raise ValueError("end_offsets is a complete window. Fix: do not combine it with other ends")
            if set(self.end_offsets) != set(self.start_offsets):
                raise ValueError(
                    f"end_offsets partitions {sorted(self.end_offsets)} differ from start_offsets partitions "
                    f"{sorted(self.start_offsets)}. Fix: give an end offset for every partition"
                )
            for p, end in self.end_offsets.items():
                if end < self.start_offsets[p]:
                    raise ValueError(
                        f"partition {p}: end offset {end} is before start offset {self.start_offsets[p]}. "
                        "Fix: the window must end at or after its start"
                    )
        if self.min_records is not None and self.until_timestamp_ms is not None:
            raise ValueError("give min_records or until_timestamp_ms, not both")
        return self

    def deadline(self) -> datetime | None:
        """When a duration window closes."""
        if self.duration_seconds is None:
            return None
        return (self.started_at or datetime.now(UTC)) + timedelta(seconds=self.duration_seconds)


class CaptureWindowResult(BaseModel):
    """A complete window: what the manifest step reads (the XCom of the window sensor)."""

    topic: str
    start_offsets: dict[int, int]
    end_offsets: dict[int, int]
    reason: Reason
    offset_span: int = Field(description="sum of end - start (records, unless the topic has gaps)")
    decided_at: datetime


def offset_span(start: dict[int, int], end: dict[int, int]) -> int:
    """Sum over partitions of ``end - start``."""
    return sum(max(end[p] - s, 0) for p, s in start.items())


def decide_by_offsets(
    spec: CaptureWindowSpec, current_end: dict[int, int], now: datetime | None = None
) -> tuple[Reason, dict[int, int]] | None:
    """The decision that needs only offsets and the clock (no reading).

    Returns ``(reason, end_offsets)`` when the window is complete, else None. For ``min_records`` the end
    offsets returned are the current ones; the caller cuts them to exactly N when ``spec.exact``.
    """
    now = now or datetime.now(UTC)
    missing = set(spec.start_offsets) - set(current_end)
    if missing:
        raise ValueError(f"topic {spec.topic!r} has no partition(s) {sorted(missing)} any more")
    extra = set(current_end) - set(spec.start_offsets)
    if extra:
        raise ValueError(
            f"topic {spec.topic!r} has partition(s) {sorted(extra)} without a start offset. Fix: record the start "
            "offsets of every partition (the topic grew after they were read?)"
        )
    if spec.end_offsets is not None:
        if all(current_end[p] >= e for p, e in spec.end_offsets.items()):
            return "end_offsets", dict(spec.end_offsets)
        return None
    if spec.min_records is not None and offset_span(spec.start_offsets, current_end) >= spec.min_records:
        return "records", dict(current_end)
    deadline = spec.deadline()
    if deadline is not None and now >= deadline:
        return "duration", dict(current_end)
    return None


class StartOffsets(BaseModel):
    """The replay start offsets: the capture topic's end offsets right after the savepoint.

    With stop-with-savepoint (modes ``drain``/``stop``) the capture tee writes nothing after the savepoint
    barrier, so these offsets are exactly where a job restored from the savepoint starts writing.

    In ``savepoint`` mode production keeps running. Offsets read before the savepoint was triggered
    (``offsets_before``) and after it completed bound the barrier: every record below ``offsets_before`` is
    in the savepoint's state, every record at or after the start offsets is not. The records in between
    (``racing_records``) raced the barrier; the replay starts after them, so its state may lack up to that
    many inputs that production had. Baseline and candidate see the same input, so the comparison stays
    fair; the count is carried into the manifest and the report.
    """

    topic: str
    offsets: dict[int, int]
    read_at: datetime
    job_id: str | None = None
    savepoint_path: str | None = None
    quiesce_mode: str | None = None
    offsets_before: dict[int, int] | None = Field(
        default=None, description="end offsets read before the savepoint was triggered (savepoint mode)"
    )
    racing_records: int = Field(default=0, ge=0, description="records between offsets_before and offsets")
    output_topic: str | None = Field(default=None, description="production's output topic (read only)")
    output_offsets: dict[int, int] | None = Field(
        default=None,
        description="its end offsets read with ``offsets``: production's outputs for the window come after them",
    )
    cassette_topic: str | None = Field(default=None, description="production's cassette topic (read only)")
    cassette_offsets: dict[int, int] | None = Field(
        default=None,
        description="its end offsets read with ``offsets``: the calls production makes for the window come after them",
    )


def link_start_offsets(
    quiesce_result: dict | None, offsets_after: dict[int, int], offsets_before: dict[int, int] | None
) -> tuple[dict[int, int], int]:
    """The replay start offsets and the number of records that raced the savepoint barrier.

    ``offsets_after`` are the capture topic's end offsets read after the quiesce step; ``offsets_before``
    those read before it. A quiesce that stopped production (``drain``/``stop``) makes ``offsets_after``
    exact (0 racing records). A quiesce that kept production running (``savepoint``) needs
    ``offsets_before`` to bound the barrier; without it this raises ValueError (never guess).
    """
    if not quiesce_result or (
        quiesce_result.get("mode") != "savepoint" and quiesce_result.get("production_stopped") is not False
    ):  # production was stopped with the savepoint: nothing written after the barrier
        return dict(offsets_after), 0
    if offsets_before is None:
        raise ValueError(
            f"quiesce mode {quiesce_result.get('mode')!r} kept production running, so the capture topic's end "
            "offsets do not mark the savepoint barrier by themselves. Fix: read the capture topic's end offsets "
            "before the savepoint too (RecordStartOffsetsOperator offsets_before=...), or quiesce with mode "
            "'drain' or 'stop'"
        )
    missing = sorted(set(offsets_after) - set(offsets_before))
    if missing:
        raise ValueError(
            f"offsets_before has no partition(s) {missing} of the capture topic. Fix: read them from the same "
            "topic right before the savepoint"
        )
    racing = 0
    for partition, after in offsets_after.items():
        before = offsets_before[partition]
        if after < before:
            raise ValueError(
                f"partition {partition}: end offset {after} after the savepoint is below {before} before it. "
                "Fix: read both from the same topic (was it recreated?)"
            )
        racing += after - before
    return dict(offsets_after), racing

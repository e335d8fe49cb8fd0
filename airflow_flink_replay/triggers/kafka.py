"""Deferrable waiting on Kafka: the capture window.

:class:`CaptureWindowTrigger` polls the capture topic's end offsets (through the Kafka provider's
connection, in a worker thread so the triggerer's loop never blocks) until the window is complete — N
records past the start, T seconds, explicit end offsets, or a timestamp cut-off — and fires one event with
the window (:class:`~airflow_flink_replay.core.capture_window.CaptureWindowResult` as JSON). It is
bounded by an absolute deadline kept across serialization.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_flink_replay.core.capture_window import (
    CaptureWindowResult,
    CaptureWindowSpec,
    decide_by_offsets,
    offset_span,
)
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook, time_index


def check_capture_window(
    hook: KafkaOffsetsHook, spec: CaptureWindowSpec, now: datetime | None = None
) -> CaptureWindowResult | None:
    """One look at the topic: the complete window, or None while it is still filling. Blocking."""
    now = now or datetime.now(UTC)
    current = hook.end_offsets(spec.topic)
    if spec.until_timestamp_ms is not None:
        found = time_index(spec.time_index, hook).offsets_for_time(
            spec.topic, spec.until_timestamp_ms, spec.start_offsets
        )
        if all(o is not None for o in found.values()):
            ends = {p: int(o) for p, o in found.items()}  # type: ignore[arg-type]
            return _result(spec, ends, "timestamp", now)
    decided = decide_by_offsets(spec, current, now)
    if decided is None:
        return None
    reason, ends = decided
    if reason == "records" and spec.exact:
        try:
            ends = hook.cut_first_records(spec.topic, spec.start_offsets, ends, int(spec.min_records or 0))
        except ValueError:
            return None  # fewer readable records than offsets suggest (gaps, markers): keep waiting
    return _result(spec, ends, reason, now)


def _result(spec: CaptureWindowSpec, ends: dict[int, int], reason: Any, now: datetime) -> CaptureWindowResult:
    return CaptureWindowResult(
        topic=spec.topic,
        start_offsets=dict(spec.start_offsets),
        end_offsets=ends,
        reason=reason,
        offset_span=offset_span(spec.start_offsets, ends),
        decided_at=now,
    )


def _str_keys(offsets: dict[Any, Any] | None) -> dict[str, int] | None:
    return None if offsets is None else {str(k): int(v) for k, v in offsets.items()}


class CaptureWindowTrigger(BaseTrigger):
    """Waits until the capture topic holds the replay window; fires ``{"status": "success", "window": {...}}``.

    Other events: ``{"status": "timeout", "message"}`` after ``timeout`` seconds, ``{"status": "error",
    "message"}`` when the topic cannot be read or changed shape.

    :param topic: the capture topic.
    :param start_offsets: ``{partition: offset}`` where the window starts (keys may be strings).
    :param kafka_config_id: the Kafka connection.
    :param min_records: N records past the start.
    :param duration_seconds: T seconds after ``started_at``.
    :param end_offsets: explicit exclusive end offsets.
    :param until_timestamp_ms: records with a Kafka timestamp before this cut-off.
    :param started_at: ISO time the duration counts from (default: now).
    :param exact: cut a ``min_records`` window to exactly N records.
    :param time_index: ``scan`` (any broker; tansu) or ``broker`` (Apache Kafka's time index).
    :param poll_interval: seconds between looks.
    :param timeout: seconds from creation; ignored when ``deadline`` is given.
    :param deadline: absolute epoch seconds.
    """

    def __init__(
        self,
        topic: str,
        start_offsets: dict[Any, int],
        kafka_config_id: str = "kafka_default",
        min_records: int | None = None,
        duration_seconds: float | None = None,
        end_offsets: dict[Any, int] | None = None,
        until_timestamp_ms: int | None = None,
        started_at: str | None = None,
        exact: bool = True,
        time_index: str = "scan",
        poll_interval: float = 2.0,
        timeout: float = 3600.0,
        deadline: float | None = None,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.start_offsets = _str_keys(start_offsets) or {}
        self.kafka_config_id = kafka_config_id
        self.min_records = min_records
        self.duration_seconds = duration_seconds
        self.end_offsets = _str_keys(end_offsets)
        self.until_timestamp_ms = until_timestamp_ms
        self.started_at = started_at or datetime.now(UTC).isoformat()
        self.exact = exact
        self.time_index = time_index
        self.poll_interval = float(poll_interval)
        self.timeout = float(timeout)
        self.deadline = float(deadline) if deadline is not None else time.time() + self.timeout

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and kwargs (JSON-safe: partition keys as strings)."""
        return (
            f"{self.__class__.__module__}.{self.__class__.__qualname__}",
            {
                "topic": self.topic,
                "start_offsets": self.start_offsets,
                "kafka_config_id": self.kafka_config_id,
                "min_records": self.min_records,
                "duration_seconds": self.duration_seconds,
                "end_offsets": self.end_offsets,
                "until_timestamp_ms": self.until_timestamp_ms,
                "started_at": self.started_at,
                "exact": self.exact,
                "time_index": self.time_index,
                "poll_interval": self.poll_interval,
                "timeout": self.timeout,
                "deadline": self.deadline,
            },
        )

    def spec(self) -> CaptureWindowSpec:
        """The window as a validated model."""
        return CaptureWindowSpec(
            topic=self.topic,
            start_offsets=self.start_offsets,  # type: ignore[arg-type]
            min_records=self.min_records,
            duration_seconds=self.duration_seconds,
            end_offsets=self.end_offsets,  # type: ignore[arg-type]
            until_timestamp_ms=self.until_timestamp_ms,
            started_at=datetime.fromisoformat(self.started_at),
            exact=self.exact,
            time_index=self.time_index,  # type: ignore[arg-type]
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until the window is complete, the deadline passes, or reading fails."""
        try:
            spec = self.spec()
        except ValueError as err:
            yield TriggerEvent({"status": "error", "message": str(err)})
            return
        hook = KafkaOffsetsHook(kafka_config_id=self.kafka_config_id)
        check = sync_to_async(check_capture_window, thread_sensitive=False)
        try:
            while True:
                try:
                    result = await check(hook, spec)
                except Exception as err:
                    yield TriggerEvent({"status": "error", "message": f"{type(err).__name__}: {err}"})
                    return
                if result is not None:
                    self.log.info("capture window complete (%s): %s", result.reason, result.end_offsets)
                    yield TriggerEvent({"status": "success", "window": result.model_dump(mode="json")})
                    return
                if time.time() >= self.deadline:
                    yield TriggerEvent(
                        {
                            "status": "timeout",
                            "message": f"capture window on {self.topic!r} not complete before the deadline "
                            f"({self.timeout:.0f}s): start {self.start_offsets}",
                        }
                    )
                    return
                await asyncio.sleep(self.poll_interval)
        finally:
            await sync_to_async(hook.close, thread_sensitive=False)()

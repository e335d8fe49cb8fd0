"""Deferrable sensor for the capture window (step 5 of the replay chain)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from airflow.sdk import BaseSensorOperator, conf
from airflow.sdk.exceptions import AirflowException

from airflow_flink_replay.core.capture_window import CaptureWindowSpec
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook
from airflow_flink_replay.triggers.kafka import CaptureWindowTrigger, check_capture_window


def _number(value: Any, kind: type) -> Any:
    """A rendered template or XCom value as ``kind`` (None when absent)."""
    return None if value in (None, "", "None") else kind(value)


class CaptureWindowSensor(BaseSensorOperator):
    """Waits until the capture topic holds the replay window; returns the window (XCom).

    The XCom is :class:`~airflow_flink_replay.core.capture_window.CaptureWindowResult` as JSON:
    ``{"topic", "start_offsets", "end_offsets", "reason", "offset_span", "decided_at"}``.

    :param start_offsets: ``{partition: offset}`` — typically ``RecordStartOffsetsOperator``'s
        ``offsets`` (templated; an XComArg works too). A dict with ``topic`` and ``offsets`` is accepted.
    :param topic: the capture topic (templated; taken from ``start_offsets`` when that carries it).
    :param min_records: N records past the start (cut to exactly N when ``exact``).
    :param duration_seconds: T seconds after the sensor first runs (or after ``started_at``; templated).
    :param end_offsets: explicit exclusive end offsets.
    :param until_timestamp_ms: Kafka-timestamp cut-off (``time_index`` ``scan`` works on any broker).
    :param kafka_config_id: the Kafka connection.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param poll_interval: seconds between looks at the topic.
    :param window_timeout: seconds before the wait fails.
    """

    template_fields: Sequence[str] = (
        "topic", "start_offsets", "end_offsets", "min_records", "duration_seconds", "started_at"
    )

    def __init__(
        self,
        *,
        start_offsets: Mapping[Any, Any] | str,
        topic: str | None = None,
        min_records: int | None = None,
        duration_seconds: float | None = None,
        end_offsets: Mapping[Any, int] | None = None,
        until_timestamp_ms: int | None = None,
        started_at: str | None = None,
        exact: bool = True,
        time_index: str = "scan",
        kafka_config_id: str = "kafka_default",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 2.0,
        window_timeout: float = 3600.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        kwargs.setdefault("timeout", window_timeout)
        super().__init__(**kwargs)
        self.start_offsets = start_offsets
        self.topic = topic
        self.min_records = min_records
        self.duration_seconds = duration_seconds
        self.end_offsets = end_offsets
        self.until_timestamp_ms = until_timestamp_ms
        self.started_at = started_at
        self.exact = exact
        self.time_index = time_index
        self.kafka_config_id = kafka_config_id
        self.deferrable = deferrable
        self.poll_interval_kafka = poll_interval
        self.window_timeout = window_timeout

    def _spec(self) -> CaptureWindowSpec:
        start: Any = self.start_offsets
        topic = self.topic
        if isinstance(start, Mapping) and "offsets" in start:
            topic = topic or start.get("topic")
            start = start["offsets"]
        if not topic:
            raise AirflowException("CaptureWindowSensor needs a topic. Fix: pass topic= or RecordStartOffsets' XCom")
        if not self.started_at:
            self.started_at = datetime.now(UTC).isoformat()
        try:
            return CaptureWindowSpec(
                topic=topic,
                start_offsets=start,
                min_records=_number(self.min_records, int),
                duration_seconds=_number(self.duration_seconds, float),
                end_offsets=self.end_offsets,  # type: ignore[arg-type]
                until_timestamp_ms=self.until_timestamp_ms,
                started_at=datetime.fromisoformat(self.started_at),
                exact=self.exact,
                time_index=self.time_index,  # type: ignore[arg-type]
            )
        except ValueError as err:
            raise AirflowException(f"invalid capture window: {err}") from err

    @cached_property
    def hook(self) -> KafkaOffsetsHook:
        """The Kafka offsets/admin hook (closing it only drops its reading consumer)."""
        return KafkaOffsetsHook(kafka_config_id=self.kafka_config_id)

    def _look(self, spec: CaptureWindowSpec) -> dict[str, Any] | None:
        """One look at the topic: the window (XCom form) when it is complete, else None."""
        hook = self.hook
        try:
            result = check_capture_window(hook, spec)
        finally:
            hook.close()
        if result is None:
            self.log.info("capture window on %s not complete yet (start %s)", spec.topic, spec.start_offsets)
            return None
        return result.model_dump(mode="json")

    def poke(self, context: Any) -> Any:
        """One look at the topic (non-deferrable mode)."""
        window = self._look(self._spec())
        if window is None:
            return False
        from airflow.sdk import PokeReturnValue

        return PokeReturnValue(is_done=True, xcom_value=window)

    def execute(self, context: Any) -> Any:
        """Poke in the worker when not deferrable; else look once and defer to :class:`CaptureWindowTrigger`
        only when the window is not complete yet.

        The one look first: a window already complete (the usual case once production ran again after a short
        stop) makes the trigger fire at once, and a trigger firing while Airflow is still recording the deferral
        makes the resumed task fail to report its state ("Failed to report terminal task state to supervisor")
        and be retried — seen under a real scheduler (apache/airflow#72716)."""
        if not self.deferrable:
            return super().execute(context)
        spec = self._spec()
        window = self._look(spec)
        if window is not None:
            return self.execute_complete(context, {"status": "success", "window": window})
        self.defer(trigger=self._trigger(spec), method_name="execute_complete")
        return None

    def _trigger(self, spec: CaptureWindowSpec) -> CaptureWindowTrigger:
        """The trigger that waits for ``spec``'s window in the triggerer."""
        return CaptureWindowTrigger(
            topic=spec.topic,
            start_offsets=spec.start_offsets,
            kafka_config_id=self.kafka_config_id,
            min_records=spec.min_records,
            duration_seconds=spec.duration_seconds,
            end_offsets=spec.end_offsets,
            until_timestamp_ms=spec.until_timestamp_ms,
            started_at=self.started_at,
            exact=spec.exact,
            time_index=spec.time_index,
            poll_interval=self.poll_interval_kafka,
            timeout=self.window_timeout,
        )

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Return the window, or fail with the trigger's message."""
        if not event or event.get("status") != "success":
            raise AirflowException(f"capture window failed: {(event or {}).get('message', 'no event')}")
        window = event["window"]
        self.log.info(
            "capture window complete (%s): %s start %s end %s (%s offsets)",
            window["reason"],
            window["topic"],
            window["start_offsets"],
            window["end_offsets"],
            window["offset_span"],
        )
        return window

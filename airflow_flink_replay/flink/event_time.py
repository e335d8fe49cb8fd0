"""Event time and watermarks of agent jobs, from a :class:`~airflow_flink_replay.core.replay_job_spec.ReplayTiming`.

The same code builds production's strategy (``production_job.py``) and the replay's (``replay_job.py``), so a
replay built from a manifest applies exactly the strategy the manifest recorded for production:

- event time = the Kafka record timestamp (the source's timestamp, kept) or a JSONPath field of the JSON value
  (:class:`EventTimeExtractor`, units ``ms`` / ``s`` / ``iso8601``);
- watermarks = none, monotonous, or bounded out-of-orderness, with an optional idleness timeout.

The JSONPath subset understood here is what event-time fields need: ``$.a.b``, ``$['a']``, ``$.a[0]``. This
module imports PyFlink only inside :func:`watermark_strategy_for`, so the extractor is usable (and tested)
without it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from airflow_flink_replay.core.jsonpath import simple_steps


def parse_jsonpath(path: str) -> list[str | int]:
    """``"$.event['ts']"`` → ``["event", "ts"]``; raises ValueError naming the path and the supported forms."""
    if not path.startswith("$"):
        raise ValueError(f"event time field {path!r} is not a JSONPath: start it with '$', e.g. $.ts")
    steps, stop = simple_steps(path)
    if stop < len(path):
        raise ValueError(
            f"event time field {path!r}: cannot read {path[stop:]!r}. Fix: use $.a.b, $['a'] or $.a[0] "
            "(filters and wildcards are not supported for event time)"
        )
    if not steps:
        raise ValueError(f"event time field {path!r} selects the whole value; name a field, e.g. $.ts")
    return steps


def _to_ms(raw: Any, unit: str) -> int:
    if unit == "iso8601":
        text = str(raw).strip().replace("Z", "+00:00")
        stamp = datetime.fromisoformat(text)
        if stamp.tzinfo is None:
            raise ValueError(f"ISO-8601 event time {raw!r} has no time zone")
        return int(stamp.timestamp() * 1000)
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ValueError(f"event time {raw!r} is not a number")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"event time {raw!r} is not a number") from None
    return round(value * 1000) if unit == "s" else int(value)


class EventTimeExtractor:
    """A TimestampAssigner (``extract_timestamp(value, record_timestamp)``) reading a JSONPath field.

    Picklable (plain attributes), no PyFlink import: PyFlink's ``with_timestamp_assigner`` only needs the
    ``extract_timestamp`` method. A record without the field fails the job with a message naming the field
    (the manifest step checks every window record has it).
    """

    def __init__(self, field: str, unit: str = "ms") -> None:
        if unit not in ("ms", "s", "iso8601"):
            raise ValueError(f"event time unit {unit!r} must be ms, s or iso8601")
        self.field = field
        self.unit = unit
        self.steps = parse_jsonpath(field)

    def event_time_ms(self, value: str | bytes | dict[str, Any]) -> int:
        """The event time of one JSON value, in epoch milliseconds."""
        doc: Any = json.loads(value) if isinstance(value, str | bytes) else value
        node = doc
        for step in self.steps:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                preview = value if isinstance(value, str) else json.dumps(doc, default=str)
                raise ValueError(
                    f"event time field {self.field} not found in the record {preview[:200]!r}. Fix: the manifest's "
                    "capture.event_time must name a field every record has"
                ) from None
        try:
            return _to_ms(node, self.unit)
        except ValueError as err:
            raise ValueError(f"event time field {self.field} ({self.unit}): {err}") from None

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        """PyFlink TimestampAssigner protocol."""
        return self.event_time_ms(value)


def watermark_strategy_for(timing: Any) -> Any:
    """PyFlink ``WatermarkStrategy`` for a :class:`~airflow_flink_replay.core.replay_job_spec.ReplayTiming`.

    ``watermark``: ``none`` → no watermarks, ``monotonous``, ``bounded:<ms>``; ``idleness_ms`` → with_idleness;
    ``event_time.source == "field"`` → an :class:`EventTimeExtractor` as timestamp assigner (else the record
    timestamp the source set is kept).
    """
    from pyflink.common import Duration, WatermarkStrategy

    bound = timing.max_out_of_orderness_ms  # None: no watermarks; 0: monotonous
    if bound is None:
        strategy = WatermarkStrategy.no_watermarks()
    elif bound == 0:
        strategy = WatermarkStrategy.for_monotonous_timestamps()
    else:
        strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(bound))
    if timing.idleness_ms and bound is not None:
        strategy = strategy.with_idleness(Duration.of_millis(int(timing.idleness_ms)))
    if timing.event_time.source == "field":
        strategy = strategy.with_timestamp_assigner(EventTimeExtractor(timing.event_time.field, timing.event_time.unit))
    return strategy


def needs_operator(timing: Any) -> bool:
    """Whether the timing needs a timestamp/watermark operator at all (no watermarks and record timestamps: no)."""
    return timing.watermark != "none" or timing.event_time.source == "field"

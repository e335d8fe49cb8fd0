"""The replay's start offsets: the capture topic's end offsets read right after production stopped.

Read inside the stop window (:mod:`.stop_window`) or by ``RecordStartOffsetsOperator`` (``operators/manifest.py``)
after a quiesce of its own. With stop-with-savepoint nothing is written after the barrier, so the end offsets
mark the savepoint's instant; after a ``savepoint``-mode quiesce production kept writing, and the offsets read
before the savepoint link the two (:func:`~airflow_flink_replay.core.capture_window.link_start_offsets`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_flink_replay.core.capture_window import StartOffsets, link_start_offsets

if TYPE_CHECKING:
    from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook

__all__ = ["read_start_offsets"]


def read_start_offsets(
    hook: KafkaOffsetsHook,
    topic: str,
    quiesce_result: Mapping[str, Any] | None = None,
    offsets_before: Mapping[str | int, int] | None = None,
    output_topic: str | None = None,
    cassette_topic: str | None = None,
) -> StartOffsets:
    """Read the capture topic's end offsets as the replay start offsets (and, with ``output_topic``,
    production's output topic's end offsets at the same instant: where its outputs for the window start; with
    ``cassette_topic``, its cassette topic's: where the calls it makes for the window start).

    After a quiesce that kept production running (``savepoint`` mode) ``offsets_before`` (read before the
    savepoint was triggered) is required: see :func:`~airflow_flink_replay.core.capture_window.link_start_offsets`.
    """
    outputs = hook.end_offsets(output_topic) if output_topic else None
    cassette = hook.end_offsets(cassette_topic) if cassette_topic else None
    raw: Any = offsets_before
    if isinstance(raw, Mapping) and isinstance(raw.get("offsets"), Mapping):
        raw = raw["offsets"]  # an earlier StartOffsets XCom
    before = {int(p): int(o) for p, o in raw.items()} if raw else None
    offsets, racing = link_start_offsets(
        dict(quiesce_result) if quiesce_result else None, hook.end_offsets(topic), before
    )
    return StartOffsets(
        topic=topic,
        offsets=offsets,
        read_at=datetime.now(UTC),
        job_id=(quiesce_result or {}).get("job_id"),
        savepoint_path=(quiesce_result or {}).get("savepoint_path"),
        quiesce_mode=(quiesce_result or {}).get("mode"),
        offsets_before=before,
        racing_records=racing,
        output_topic=output_topic,
        output_offsets=outputs,
        cassette_topic=cassette_topic,
        cassette_offsets=cassette,
    )

"""A job definition that passes the agent check and fails production on its first record (issue 48).

Its deserializer refuses a record without ``text`` and ``bad_records="fail"`` makes that fail the job rather
than drop the record: every task attempt reads the record again (the offsets were never committed) and fails
again. ``flink-replay deploy`` must report the job failing with that Python error, not "submitted".
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from .definitions import healthy

#: What the deserializer says of a record it refuses (the test looks for it in deploy's error).
REFUSAL = "a review needs a text"


def strict_review(raw: bytes) -> dict[str, Any]:
    """The record as a JSON object; a ``ValueError`` for one without ``text``."""
    record = dict(json.loads(raw))
    if "text" not in record:
        raise ValueError(REFUSAL)
    return record


job = dataclasses.replace(healthy, deserializer=strict_review, bad_records="fail")

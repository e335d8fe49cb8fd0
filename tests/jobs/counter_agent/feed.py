"""The counter agent's input records (plain Python: the Airflow side writes them without Flink Agents)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Distinct ids: a 40-record window holds about 8 records per key.
KEYS = 5


def reviews(n: int, *, keys: int = KEYS, start: int = 0) -> list[dict[str, Any]]:
    """``n`` input records over ``keys`` ids, each text unique."""
    return [
        {"id": f"item-{i % keys}", "review": f"review {i}: {'good' if i % 3 else 'bad'} product",
         "review_score": float(1 + i % 5)}
        for i in range(start, start + n)
    ]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    """One JSON object a line (what ``flink-replay produce --file`` and ``run-dag --feed`` send)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path

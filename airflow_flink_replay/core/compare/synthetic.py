"""Synthetic replay outputs with a known truth, for tests, the benchmark and demos of the report.

Outputs look like the demo agent's: ``{"id", "customer", "label", "score", "summary", "tools", "count",
"priority", "_replay"}``. Each knob injects one kind of difference into one run, for a fraction of keys
chosen by a seeded random generator, so a test knows exactly what the comparison must find.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

LABELS = ("positive", "neutral", "negative")
_SUMMARIES = (
    "Customer {c} reports that the {thing} stopped working after the last update and asks for help.",
    "The {thing} of customer {c} fails since the update; they would like support to look at it.",
    "After updating, {c} says the {thing} no longer works and requests assistance from support.",
)
_THINGS = ("invoice export", "mobile app", "password reset", "delivery tracker", "loyalty card")


def base_record(i: int, variant: str = "baseline", index: int = 0) -> dict[str, Any]:
    """The unperturbed output number ``i`` (deterministic)."""
    rng = random.Random(i)
    label = LABELS[rng.randrange(3)]
    return {
        "id": f"r-{i}",
        "customer": f"c-{i % 97}",
        "label": label,
        "score": round(rng.random(), 4),
        "summary": _SUMMARIES[0].format(c=f"c-{i % 97}", thing=_THINGS[i % len(_THINGS)]),
        "tools": ["notify_support"] if label == "negative" else [],
        "count": rng.randrange(1, 9),
        "priority": "high" if label == "negative" else "normal",
        "_replay": {"variant": variant, "partition": i % 4, "offset": i * 2 + index},
    }


def iter_run(
    n: int,
    variant: str = "baseline",
    seed: int = 0,
    *,
    paraphrase: float = 0.0,
    label_change: float = 0.0,
    tool_change: float = 0.0,
    jitter: float = 0.0,
    drop: float = 0.0,
    outputs_per_key: int = 1,
) -> Iterator[dict[str, Any]]:
    """Outputs of one run of ``n`` keys, one at a time (see :func:`make_run`).

    :param paraphrase: fraction of outputs whose summary is reworded (LLM noise).
    :param label_change: fraction of keys whose label flips (a real regression).
    :param tool_change: fraction of keys that call one more tool (``issue_refund``).
    :param jitter: absolute uniform jitter added to ``score``.
    :param drop: fraction of outputs left out (missing outputs).
    """
    rng = random.Random(f"{variant}:{seed}")
    for i in range(n):
        for j in range(outputs_per_key):
            rec = base_record(i, variant, j)
            if outputs_per_key > 1:
                rec["count"] = j
            if paraphrase and rng.random() < paraphrase:
                rec["summary"] = _SUMMARIES[1 + rng.randrange(2)].format(
                    c=rec["customer"], thing=_THINGS[i % len(_THINGS)]
                )
            if label_change and _selected(i, label_change):
                rec["label"] = LABELS[(LABELS.index(rec["label"]) + 1) % 3]
            if tool_change and _selected(i, tool_change, salt=7):
                rec["tools"] = [*rec["tools"], "issue_refund"]
            if jitter:
                rec["score"] = round(rec["score"] + rng.uniform(-jitter, jitter), 6)
            if drop and rng.random() < drop:
                continue
            yield rec


def make_run(
    n: int,
    variant: str = "baseline",
    seed: int = 0,
    **knobs: Any,
) -> list[dict[str, Any]]:
    """Outputs of one run of ``n`` keys as a list; the knobs are :func:`iter_run`'s."""
    return list(iter_run(n, variant, seed, **knobs))


def _selected(i: int, fraction: float, salt: int = 0) -> bool:
    """A deterministic subset of keys (same for every run that uses the knob)."""
    return random.Random(i * 1_000_003 + salt).random() < fraction


def make_audit(outputs: Iterable[dict[str, Any]], variant: str, extra_tool_keys: float = 0.0) -> list[dict[str, Any]]:
    """Audit records matching ``outputs``: one chat call per output, one tool call per listed tool.

    ``extra_tool_keys`` makes a fraction of keys also call ``notify_support`` (a side-effect change that the
    text output would not show).
    """
    recs = []
    now = time.time()
    for o in outputs:
        key = o["id"]
        calls = [("chat_model", "llm", "chat")] + [("tool", t, "call") for t in o.get("tools", [])]
        if (
            extra_tool_keys
            and "notify_support" not in o.get("tools", [])
            and _selected(int(key.split("-")[1]), extra_tool_keys, salt=11)
        ):
            calls.append(("tool", "notify_support", "call"))
        for rtype, name, method in calls:
            recs.append(
                {
                    "variant": variant,
                    "key": key,
                    "resource_type": rtype,
                    "resource_name": name,
                    "method": method,
                    "args_digest": "0" * 64,
                    "args_preview": f"{name}({key})",
                    "decision": "allow" if rtype == "chat_model" else "record",
                    "outcome": "ok" if rtype == "chat_model" else "recorded",
                    "error": None,
                    "ts": now,
                }
            )
    return recs


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> Path:
    """Write records as JSONL; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, separators=(",", ":")))
            fh.write("\n")
    return p


def write_runs(
    folder: str | Path,
    baseline: Iterable[dict[str, Any]],
    baseline_2: Iterable[dict[str, Any]],
    candidate: Iterable[dict[str, Any]],
) -> tuple[Path, Path, Path]:
    """Write A, A' and B as ``a.jsonl``, ``a2.jsonl`` and ``b.jsonl`` in ``folder``; returns their paths (A, A', B)."""
    folder = Path(folder)
    return (
        write_jsonl(folder / "a.jsonl", baseline),
        write_jsonl(folder / "a2.jsonl", baseline_2),
        write_jsonl(folder / "b.jsonl", candidate),
    )

"""Side effects beyond call counts: calls whose arguments or decision/outcome changed.

A key's calls of one signature (resource type, name, method) are compared as multisets, only for keys called
equally often in both runs (a different number of calls is the count comparison's finding, see
:mod:`~airflow_flink_replay.core.compare.audit`):

- **arguments**: the calls' argument digests (computed in the replay with the variant's own namespace read as
  a placeholder and secrets masked in the preview). Compared for the resource types in
  ``CompareConfig.compare_arguments_of`` (tools and vector stores by default: what a side effect is done
  *with*; a chat model's arguments are the prompt, which a candidate changes on purpose — its effect shows in
  the outputs);
- **outcome**: the (policy decision, outcome) pairs — ``allow/ok`` became ``allow/error``, ``record`` became
  ``allow`` (a policy that changed between runs), and so on.

The share of keys that changed goes through the same noise rule as output fields (against baseline vs
baseline-2); one example per finding shows the key and the change, arguments as changed fields.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Hashable, Mapping
from typing import Any, Literal

from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.compare.loading import AuditRecord
from airflow_flink_replay.core.compare.paths import MISSING, Flattener, differing_paths
from airflow_flink_replay.core.compare.result import CallChange, Reason
from airflow_flink_replay.core.compare.stats import newcombe_lower

Aspect = Literal["arguments", "outcome"]
#: key -> that key's calls of one signature.
Calls = Mapping[str, list[AuditRecord]]

_CODE = {"arguments": "SIDE_EFFECT_ARGUMENTS", "outcome": "SIDE_EFFECT_OUTCOME"}
_WHAT = {"arguments": "with other arguments", "outcome": "with another decision or outcome"}
#: Changed fields listed per example.
MAX_CHANGED_FIELDS = 5
_VALUE_CHARS = 80


def fact(aspect: Aspect, record: AuditRecord) -> Hashable:
    """What ``aspect`` compares of one call."""
    return record.args_digest if aspect == "arguments" else (record.decision, record.outcome)


def _facts(aspect: Aspect, calls: list[AuditRecord]) -> Counter[Hashable]:
    return Counter(fact(aspect, r) for r in calls)


def changed_keys(aspect: Aspect, a: Calls, b: Calls) -> list[str]:
    """Keys called equally often in ``a`` and ``b`` whose calls differ in ``aspect`` (as multisets), sorted."""
    return sorted(
        key
        for key in a.keys() & b.keys()
        if len(a[key]) == len(b[key]) and _facts(aspect, a[key]) != _facts(aspect, b[key])
    )


def _short(value: Any) -> str:
    text = "(absent)" if value is MISSING else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"


def changed_fields(old: str, new: str) -> list[str]:
    """``path: old → new`` for the argument fields that differ between two argument previews (canonical JSON),
    at most :data:`MAX_CHANGED_FIELDS`; empty when a preview is not whole JSON (truncated)."""
    flatten = Flattener([], "index").flatten  # every leaf by its path, list items by index
    try:
        before, after = json.loads(old), json.loads(new)
        if not isinstance(before, dict) or not isinstance(after, dict):
            return []
        a, b = flatten(before), flatten(after)
    except ValueError:  # not whole JSON, or nested too deeply to list
        return []
    paths = differing_paths(a, b)
    lines = [
        f"{p.removeprefix('$.')}: {_short(a.get(p, MISSING))} → {_short(b.get(p, MISSING))}"
        for p in paths[:MAX_CHANGED_FIELDS]
    ]
    if len(paths) > MAX_CHANGED_FIELDS:
        lines.append(f"… {len(paths) - MAX_CHANGED_FIELDS} more fields")
    return lines


def example(aspect: Aspect, key: str, a: list[AuditRecord], b: list[AuditRecord]) -> CallChange:
    """One changed call of ``key``: the first (in time) of the baseline's calls the candidate did not make alike,
    beside the first of the candidate's the baseline did not make alike."""
    only_a = _facts(aspect, a) - _facts(aspect, b)
    only_b = _facts(aspect, b) - _facts(aspect, a)
    ra = next(r for r in sorted(a, key=lambda r: r.ts) if fact(aspect, r) in only_a)
    rb = next(r for r in sorted(b, key=lambda r: r.ts) if fact(aspect, r) in only_b)
    if aspect == "arguments":
        return CallChange(
            key=key,
            aspect=aspect,
            baseline=ra.args_preview,
            candidate=rb.args_preview,
            changed=changed_fields(ra.args_preview, rb.args_preview),
        )
    return CallChange(
        key=key,
        aspect=aspect,
        baseline=f"{ra.decision} → {ra.outcome}" + _unmatched(ra),
        candidate=f"{rb.decision} → {rb.outcome}" + (f" ({rb.error})" if rb.error else "") + _unmatched(rb)
        + _changed(rb),
        changed=[f"decision/outcome: {ra.decision}/{ra.outcome}{_unmatched(ra)} → "
                 f"{rb.decision}/{rb.outcome}{_unmatched(rb)}{_changed(rb)}"],
    )


def _changed(record: AuditRecord) -> str:
    """How a call of a resource the candidate changed reads in an example: production's recording not served."""
    return " (changed: not replayed)" if record.changed else ""


def _unmatched(record: AuditRecord) -> str:
    """How a ``replay`` call no recorded result matched reads in an example."""
    return f" (unmatched: {record.fallback})" if record.fallback else ""


def judge(
    aspect: Aspect,
    label: str,
    signature: str,
    changed: int,
    noise: int | None,
    n: int,
    config: CompareConfig,
    z: float,
    shown: CallChange | None,
) -> list[Reason]:
    """The reason (if any) for ``changed`` of ``n`` keys changing in ``aspect``, against ``noise`` keys changing
    between the baseline runs (None: no baseline-2, exact rules)."""
    if changed == 0:
        return []
    p1, p0 = changed / n, (noise or 0) / n
    rates = f"{p1:.1%} of keys vs noise {p0:.1%}" if noise is not None else f"{changed} keys, exact rules"
    if noise is not None and p0 > config.max_noise_rate:
        message = (
            f"calls of {label} change {_WHAT[aspect]} between the baseline runs for {p0:.0%} of keys "
            f"(> {config.max_noise_rate:.0%}): such changes in the candidate are not judged"
        )
        return [Reason(code="SIDE_EFFECT_NOISY", severity="info", message=message, fields=[signature])]
    if noise is None:
        significant = p1 > config.exact_max_rate
    else:
        delta = p1 - p0
        if not (delta > config.abs_threshold and (p0 == 0 or delta > config.rel_threshold * p0)):
            return []
        significant = newcombe_lower(changed, n, noise, n, z) > 0
    if not significant:
        message = f"calls of {label} change {_WHAT[aspect]} for {rates}: not significant; replay more records"
        return [Reason(code="NOT_SIGNIFICANT", severity="inconclusive", message=message, fields=[signature])]
    message = f"candidate calls {label} {_WHAT[aspect]} for {changed} keys ({rates})"
    if shown is not None:
        message += f"; e.g. key {shown.key}: " + "; ".join(shown.changed or [f"{shown.baseline} → {shown.candidate}"])
    return [Reason(code=_CODE[aspect], severity="fail", message=message, fields=[signature])]

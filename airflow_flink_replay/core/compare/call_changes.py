"""Side effects beyond call counts: calls whose arguments or decision/outcome changed.

A key's calls of one signature (resource type, name, method) are compared as multisets, only for keys called
equally often in both runs (a different number of calls is the count comparison's finding, see
:mod:`~airflow_flink_replay.core.compare.audit`):

- **arguments**: the calls' argument digests (computed in the replay with the variant's own namespace read as
  a placeholder and secrets masked in the preview) — of the *identifying* arguments only when the audit tells
  them apart (``identity_digest``: a resource with free-text arguments a model wrote, see
  :mod:`~airflow_flink_replay.core.call_match`). Compared for the resource types in
  ``CompareConfig.compare_arguments_of`` (tools and vector stores by default: what a side effect is done
  *with*; a chat model's arguments are the prompt, which a candidate changes on purpose — its effect shows in
  the outputs);
- **free_text**: for such resources, on the keys whose identifying arguments did not change, each call beside the
  other run's call with the same identifying arguments (in time order): it changed when a differing string reads
  unlike (rapidfuzz similarity below ``CompareConfig.free_text_threshold``) or a preview is cut (the digests say
  it changed, the text cannot say how much). A close paraphrase is no change; what the baselines reword
  themselves is the noise;
- **outcome**: the (policy decision, outcome) pairs — ``allow/ok`` became ``allow/error``, ``record`` became
  ``allow`` (a policy that changed between runs), and so on. A ``replay`` call served production's recording and
  one unmatched that fell back to ``record`` are one outcome: whether a call matched follows from its arguments
  (the arguments aspect's finding) and varies between baseline runs; an unmatched call that was blocked or ran
  (``allow``) stays apart, and a call of a resource the candidate changed keeps its own decision.

The share of keys that changed — of calls, when the comparison has fewer keys than
``CompareConfig.call_units_below_keys`` — goes through the same noise rule as output fields (against baseline vs
baseline-2); one example per finding shows the key and the change, arguments as changed fields.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Hashable, Mapping
from typing import Any, Literal

from rapidfuzz import fuzz

from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.compare.loading import AuditRecord
from airflow_flink_replay.core.compare.paths import MISSING, Flattener, differing_paths
from airflow_flink_replay.core.compare.result import CallChange, Reason
from airflow_flink_replay.core.compare.stats import newcombe_lower

Aspect = Literal["arguments", "free_text", "outcome"]
#: key -> that key's calls of one signature.
Calls = Mapping[str, list[AuditRecord]]

_CODE = {"arguments": "SIDE_EFFECT_ARGUMENTS", "free_text": "SIDE_EFFECT_ARGUMENTS", "outcome": "SIDE_EFFECT_OUTCOME"}
_WHAT = {"arguments": "with other arguments", "free_text": "with other free text",
         "outcome": "with another decision or outcome"}
#: The outcome of a ``replay`` call served production's recording, or unmatched and recorded instead.
SERVED_OR_RECORDED = "replayed|recorded"
#: Changed fields listed per example.
MAX_CHANGED_FIELDS = 5
_VALUE_CHARS = 80


def fact(aspect: Aspect, record: AuditRecord) -> Hashable:
    """What ``aspect`` compares of one call (see the module docstring)."""
    if aspect == "arguments":
        return record.identity_digest or record.args_digest
    if aspect == "free_text":
        return record.args_digest
    if record.decision == "replay" and (record.outcome == "replayed" or record.fallback == "record"):
        return (record.decision, SERVED_OR_RECORDED)
    return (record.decision, record.outcome)


def _facts(aspect: Aspect, calls: list[AuditRecord]) -> Counter[Hashable]:
    return Counter(fact(aspect, r) for r in calls)


def has_free_text(*runs: Calls | None) -> bool:
    """Whether any call of the signature tells its identifying arguments apart (``identity_digest``)."""
    return any(r.identity_digest for calls in runs if calls for rows in calls.values() for r in rows)


def changed_calls(aspect: Aspect, a: Calls, b: Calls, text_threshold: float = 0.7) -> dict[str, int]:
    """Key -> how many of its calls changed in ``aspect``, for the keys called equally often in ``a`` and ``b``
    whose calls changed: the calls of ``a`` that ``b`` did not make alike (multisets); for ``free_text`` only keys
    whose identifying arguments are the same (a changed id is the arguments' finding), calls paired by them
    (:func:`_text_pairs`)."""
    out: dict[str, int] = {}
    for key in sorted(a.keys() & b.keys()):
        if len(a[key]) != len(b[key]):
            continue
        if aspect == "free_text":
            if _facts("arguments", a[key]) != _facts("arguments", b[key]):
                continue
            n = sum(1 for ra, rb in _text_pairs(a[key], b[key]) if _text_changed(ra, rb, text_threshold))
        else:
            n = sum((_facts(aspect, a[key]) - _facts(aspect, b[key])).values())
        if n:
            out[key] = n
    return out


def _text_pairs(a: list[AuditRecord], b: list[AuditRecord]) -> list[tuple[AuditRecord, AuditRecord]]:
    """The calls of one key in two runs, each beside the other run's call with the same identifying arguments (the
    n-th such call beside the n-th, in time order)."""
    groups: dict[Hashable, list[AuditRecord]] = {}
    for r in sorted(b, key=lambda r: r.ts):
        groups.setdefault(fact("arguments", r), []).append(r)
    pairs = []
    for r in sorted(a, key=lambda r: r.ts):
        others = groups.get(fact("arguments", r))
        if others:
            pairs.append((r, others.pop(0)))
    return pairs


def _text_changed(a: AuditRecord, b: AuditRecord, threshold: float) -> bool:
    """Whether two calls with the same identifying arguments differ in their free text by more than a paraphrase:
    a differing value that is not text on both sides, or text less alike than ``threshold``; a cut preview (the
    arguments are longer than it) counts as changed when the digests differ."""
    if a.args_digest == b.args_digest:
        return False
    flatten = Flattener([], "index").flatten
    try:
        before, after = flatten(json.loads(a.args_preview)), flatten(json.loads(b.args_preview))
    except (ValueError, TypeError, AttributeError):  # cut, or not an object
        return True
    for path in differing_paths(before, after) or ["(digest)"]:
        old, new = before.get(path, MISSING), after.get(path, MISSING)
        if not (isinstance(old, str) and isinstance(new, str)):
            return True
        if fuzz.ratio(old, new, score_cutoff=0) / 100.0 < threshold:
            return True
    return False


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


def example(
    aspect: Aspect, key: str, a: list[AuditRecord], b: list[AuditRecord], text_threshold: float = 0.7
) -> CallChange:
    """One changed call of ``key``: the first (in time) of the baseline's calls the candidate did not make alike,
    beside the first of the candidate's the baseline did not make alike (free text: the first pair that changed)."""
    if aspect == "free_text":
        ra, rb = next((ra, rb) for ra, rb in _text_pairs(a, b) if _text_changed(ra, rb, text_threshold))
    else:
        only_a = _facts(aspect, a) - _facts(aspect, b)
        only_b = _facts(aspect, b) - _facts(aspect, a)
        ra = next(r for r in sorted(a, key=lambda r: r.ts) if fact(aspect, r) in only_a)
        rb = next(r for r in sorted(b, key=lambda r: r.ts) if fact(aspect, r) in only_b)
    if aspect in ("arguments", "free_text"):
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
    unit: str = "keys",
) -> list[Reason]:
    """The reason (if any) for ``changed`` of ``n`` units (``unit``: keys, or calls) changing in ``aspect``, against
    ``noise`` units changing between the baseline runs (None: no baseline-2, exact rules)."""
    if changed == 0:
        return []
    p1, p0 = changed / n, (noise or 0) / n
    rates = f"{p1:.1%} of {unit} vs noise {p0:.1%}" if noise is not None else f"{changed} {unit}, exact rules"
    if noise is not None and p0 > config.max_noise_rate:
        message = (
            f"calls of {label} change {_WHAT[aspect]} between the baseline runs for {p0:.0%} of {unit} "
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
    message = f"candidate calls {label} {_WHAT[aspect]} for {changed} {unit} ({rates})"
    if shown is not None:
        message += f"; e.g. key {shown.key}: " + "; ".join(shown.changed or [f"{shown.baseline} → {shown.candidate}"])
    return [Reason(code=_CODE[aspect], severity="fail", message=message, fields=[signature])]

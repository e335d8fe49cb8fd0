"""Per-field comparators: exact, numeric with tolerance, text by similarity, set, multiset.

A comparator takes two leaf values (either may be :data:`MISSING`) and returns a similarity in [0, 1];
the field "differs" when the similarity is below 1 for exact/numeric/set, or below the text threshold.
Equal values never reach a comparator (the engine checks ``==`` and the JSON types first), which keeps the hot
path cheap. Every comparator tells JSON types apart (``true`` is not ``1``, ``false`` not ``0``; ``1`` and
``1.0`` are the same number): a value of another type differs, also inside lists compared as sets.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from rapidfuzz import fuzz

from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.compare.paths import MISSING, same_json

#: (a, b) -> (differs, similarity)
CompareFn = Callable[[Any, Any], tuple[bool, float]]


@dataclass(frozen=True)
class Comparator:
    """A resolved comparator for one path: its name (for the report) and its function."""

    name: str
    fn: CompareFn
    must_not_change: bool = False


def _exact(a: Any, b: Any) -> tuple[bool, float]:
    if a is MISSING or b is MISSING:
        return True, 0.0
    if same_json(a, b):
        return False, 1.0
    return True, 0.0


def _numeric(rel_tol: float, abs_tol: float) -> CompareFn:
    def cmp(a: Any, b: Any) -> tuple[bool, float]:
        if not _is_number(a) or not _is_number(b):
            return _exact(a, b)
        try:
            close = math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
        except OverflowError:  # an integer beyond the float range (JSON allows it)
            return _numeric_exactly(a, b, rel_tol, abs_tol)
        if close:
            return False, 1.0
        scale = max(abs(a), abs(b), 1e-12)
        return True, max(0.0, 1.0 - abs(a - b) / scale)

    return cmp


def _numeric_exactly(a: float, b: float, rel_tol: float, abs_tol: float) -> tuple[bool, float]:
    """The numeric comparison in exact arithmetic, for an integer no float holds; an infinite float differs."""
    if any(isinstance(x, float) and not math.isfinite(x) for x in (a, b)):
        return True, 0.0
    fa, fb = Fraction(a), Fraction(b)
    delta, scale = abs(fa - fb), max(abs(fa), abs(fb))
    if delta <= max(Fraction(rel_tol) * scale, Fraction(abs_tol)):
        return False, 1.0
    return True, max(0.0, 1.0 - float(delta / scale))


def _text(threshold: float, max_length: int = 10_000) -> CompareFn:
    """rapidfuzz's normalized Indel similarity; above ``max_length`` characters (either side), the linear
    :func:`word_overlap` instead (the edit-based ratio is quadratic: 575 KB texts took seconds per pair)."""
    cutoff = threshold * 100.0

    def cmp(a: Any, b: Any) -> tuple[bool, float]:
        if not isinstance(a, str) or not isinstance(b, str):
            return _exact(a, b)
        if len(a) > max_length or len(b) > max_length:
            score = word_overlap(a, b)
        else:
            score = fuzz.ratio(a, b, score_cutoff=0) / 100.0
        return score * 100.0 < cutoff, score

    return cmp


def word_overlap(a: str, b: str) -> float:
    """Similarity of long texts in linear time: the Dice overlap of their word multisets,
    ``2 * |A ∩ B| / (|A| + |B|)`` (1.0 for the same words in the same numbers, in any order)."""
    ca, cb = Counter(a.split()), Counter(b.split())
    total = sum(ca.values()) + sum(cb.values())
    if not total:
        return 1.0 if a == b else 0.0
    return 2 * sum((ca & cb).values()) / total


def _canon(v: Any) -> Any:
    """A hashable stand-in of a list element, equal for equal JSON values: a boolean is tagged (``True`` would
    hash and compare as ``1``), numbers stay numbers (``1`` and ``1.0`` are one), objects and lists recurse."""
    t = type(v)
    if t is bool:
        return (bool, v)
    if t is dict:
        return (dict, tuple(sorted((k, _canon(x)) for k, x in v.items())))
    if t is list:
        return (list, tuple(_canon(x) for x in v))
    return v


def _set(a: Any, b: Any) -> tuple[bool, float]:
    if not isinstance(a, list) or not isinstance(b, list):
        return _exact(a, b)
    sa = {_canon(v) for v in a}
    sb = {_canon(v) for v in b}
    if sa == sb:
        return False, 1.0
    union = sa | sb
    return True, len(sa & sb) / len(union) if union else 1.0


def _multiset(a: Any, b: Any) -> tuple[bool, float]:
    """Unordered lists that keep duplicates (tool calls, citations): equal when each element occurs as often."""
    if not isinstance(a, list) or not isinstance(b, list):
        return _exact(a, b)
    ca = Counter(_canon(v) for v in a)
    cb = Counter(_canon(v) for v in b)
    if ca == cb:
        return False, 1.0
    union = sum((ca | cb).values())
    return True, sum((ca & cb).values()) / union if union else 1.0


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _ignore(a: Any, b: Any) -> tuple[bool, float]:
    return False, 1.0


class ComparatorResolver:
    """Chooses (and caches) the comparator of each flattened path from the config's rules and types."""

    def __init__(self, config: CompareConfig) -> None:
        self._config = config
        self._by_path: dict[str, Comparator | None] = {}
        self._exact = Comparator("exact", _exact)
        self._numeric_default = Comparator("numeric", _numeric(config.rel_tol, config.abs_tol))
        self._text_default = Comparator("text", _text(config.text_threshold, config.text_max_length))
        self._set_default = Comparator("set", _set)
        self._list_default = Comparator("multiset", _multiset) if config.list_mode == "multiset" else self._set_default
        self._names: dict[str, str] = {}

    def rule_comparator(self, path: str) -> Comparator | None:
        """The comparator a rule fixes for ``path`` (None: choose by type)."""
        if path in self._by_path:
            return self._by_path[path]
        rule = self._config.rule_for(path)
        comp: Comparator | None = None
        if rule is not None:
            mnc = rule.must_not_change
            if rule.comparator == "exact":
                comp = Comparator("exact", _exact, mnc)
            elif rule.comparator == "numeric":
                rel = self._config.rel_tol if rule.rel_tol is None else rule.rel_tol
                ab = self._config.abs_tol if rule.abs_tol is None else rule.abs_tol
                comp = Comparator(f"numeric(rel={rel:g},abs={ab:g})", _numeric(rel, ab), mnc)
            elif rule.comparator == "text":
                th = self._config.text_threshold if rule.text_threshold is None else rule.text_threshold
                comp = Comparator(f"text(>={th:g})", _text(th, self._config.text_max_length), mnc)
            elif rule.comparator == "set":
                comp = Comparator("set", _set, mnc)
            elif rule.comparator == "multiset":
                comp = Comparator("multiset", _multiset, mnc)
            elif rule.comparator == "ignore":
                comp = Comparator("ignore", _ignore, mnc)
            else:  # auto, maybe with tolerances/threshold (0 is a setting too) or must_not_change
                tuned = any(v is not None for v in (rule.rel_tol, rule.abs_tol, rule.text_threshold))
                comp = (
                    self._auto_with_rule(rule.rel_tol, rule.abs_tol, rule.text_threshold, mnc) if mnc or tuned else None
                )
        self._by_path[path] = comp
        return comp

    def _auto_with_rule(self, rel: float | None, ab: float | None, th: float | None, mnc: bool) -> Comparator:
        num = _numeric(self._config.rel_tol if rel is None else rel, self._config.abs_tol if ab is None else ab)
        text = _text(self._config.text_threshold if th is None else th, self._config.text_max_length)
        min_len = self._config.text_min_length
        lists = self._list_default.fn

        def cmp(a: Any, b: Any) -> tuple[bool, float]:
            if _is_number(a) and _is_number(b):
                return num(a, b)
            if isinstance(a, str) and isinstance(b, str) and (_is_text(a, min_len) or _is_text(b, min_len)):
                return text(a, b)
            if isinstance(a, list) and isinstance(b, list):
                return lists(a, b)
            return _exact(a, b)

        return Comparator("auto", cmp, mnc)

    def compare(self, path: str, a: Any, b: Any) -> tuple[bool, float, str]:
        """Compare two unequal values at ``path``: (differs, similarity, comparator name)."""
        comp = self._by_path.get(path, MISSING)
        if comp is MISSING:
            comp = self.rule_comparator(path)
        if comp is not None:
            differs, score = comp.fn(a, b)
            return differs, score, comp.name
        # by type
        if _is_number(a) and _is_number(b):
            differs, score = self._numeric_default.fn(a, b)
            return differs, score, "numeric"
        if isinstance(a, str) and isinstance(b, str):
            min_len = self._config.text_min_length
            if _is_text(a, min_len) or _is_text(b, min_len):
                differs, score = self._text_default.fn(a, b)
                return differs, score, "text"
            return True, 0.0, "exact"
        if isinstance(a, list) and isinstance(b, list):
            differs, score = self._list_default.fn(a, b)
            return differs, score, self._list_default.name
        differs, score = _exact(a, b)
        return differs, score, "exact"

    def describe(self, path: str, sample: Any) -> str:
        """The comparator name ``path`` gets for values like ``sample`` (for fields that never differed)."""
        comp = self._by_path.get(path, MISSING)
        if comp is MISSING:
            comp = self.rule_comparator(path)
        if comp is not None:
            return comp.name
        if _is_number(sample):
            return "numeric"
        if isinstance(sample, str):
            return "text" if _is_text(sample, self._config.text_min_length) else "exact"
        if isinstance(sample, list):
            return self._list_default.name
        return "exact"

    def must_not_change(self, path: str) -> bool:
        """True if a rule marks ``path`` as must-not-change."""
        comp = self._by_path.get(path, MISSING)
        if comp is MISSING:
            comp = self.rule_comparator(path)
        return bool(comp is not None and comp.must_not_change)


def _is_text(s: str, min_len: int) -> bool:
    return len(s) >= min_len or " " in s or "\n" in s

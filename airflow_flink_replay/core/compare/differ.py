"""Diffing one aligned pair of flattened outputs, with the numeric noise band learned from A vs A'.

Numbers are judged by size, not by count (Diffy's idea applied to magnitudes): before the candidate is
compared, :class:`NumericBand` learns how far each numeric field moves between baseline and baseline-2.
The band of a field is a quantile (``numeric_noise_quantile``, 0.99 by default) of ``|a - a'|`` over all
aligned outputs, outputs where the number did not move counting as 0, and the same quantile of the relative
difference ``|a - a'| / max(|a|, |a'|)``. A difference within either band is noise (additive jitter is
judged by its size, multiplicative by its ratio; a score jittering near 0 moves far relative to its
value): it counts neither for the noise rate nor for the candidate rate. A field that never moves between
the baselines has no band, so its differences count as before.

Bands are learned per magnitude range too: per decade of ``max(|a|, |a'|)`` (0.01-0.1, 0.1-1, ...). When a
field spans several orders of magnitude, the absolute band learned on the large values is wider than a large
relative shift of the small ones (and the relative band of jittery small values wider than a shift of the
large ones); judged in its own decade, such a shift is seen. A decade with fewer than
``numeric_band_min_pairs`` A/A pairs takes the field's band.

JSON types are part of the value: ``true`` is not ``1`` (Python's ``==`` says it is). A change of JSON type
is a difference whatever the comparator (but ``ignore``), and :attr:`Differ.kinds` names it
(``type boolean -> number``) for the report, as it names the magnitude range of a number that moved beyond its
range's bands (``values 0.1-1``).
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_flink_replay.core.compare.comparators import ComparatorResolver
from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.compare.paths import MISSING, Group, json_type, same_flat, same_json, same_types

#: Integers beyond this have no float: the comparator judges them (in exact arithmetic), not the float bands.
_FLOAT_MAX = int(sys.float_info.max)


def _number(v: Any) -> bool:
    return (type(v) is float and not math.isnan(v)) or (type(v) is int and -_FLOAT_MAX <= v <= _FLOAT_MAX)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def decade(m: float) -> int | None:
    """``floor(log10(m))``: the magnitude range of a pair whose larger absolute value is ``m`` (None for 0 or a
    value that is not finite)."""
    if 0 < m < math.inf:
        return math.floor(math.log10(m))
    return None


def range_label(d: int) -> str:
    """The kind of difference of a number moved beyond the bands of its magnitude range, e.g. ``values 0.1-1``."""
    if -300 < d < 300:
        return f"values {10.0**d:g}-{10.0 ** (d + 1):g}"
    return f"values 1e{d}-1e{d + 1}"  # beyond what a float holds


#: Distinct unmoved values of a field counted before they are put in their magnitude ranges.
_MAX_UNMOVED = 4096

#: One magnitude range's moves: absolute and relative differences of the A/A pairs that moved.
_Moves = tuple[array, array]


class NumericBand:
    """Per numeric path: how far it moves between baseline and baseline-2 (absolute and relative band), over all
    its values (:attr:`bands`) and per magnitude range (:attr:`ranges`)."""

    def __init__(self, quantile: float, by_magnitude: bool = True, min_pairs: int = 100) -> None:
        self.quantile = quantile
        self.by_magnitude = by_magnitude
        self.min_pairs = min_pairs
        #: path -> decade -> (|a - a'|, relative difference) of the pairs that moved
        self._moves: dict[str, dict[int | None, _Moves]] = {}
        #: path -> decade -> A/A pairs of numbers, moved or not (per magnitude range only)
        self._pairs: dict[str, dict[int | None, int]] = {}
        #: path -> value -> A/A pairs where it did not move, not yet in ``_pairs`` (a field's values repeat: its
        #: decade is found once per value, not per pair; moved to ``_pairs`` by :meth:`_flush`)
        self._unmoved: dict[str, dict[float, int]] = {}
        #: path -> (absolute band, relative band); only paths that moved between the baselines
        self.bands: dict[str, tuple[float, float]] = {}
        #: path -> decade -> (absolute band, relative band): the ranges with ``min_pairs`` A/A pairs or more, of
        #: the paths that moved
        self.ranges: dict[str, dict[int, tuple[float, float]]] = {}

    def _learn(self, path: str, a: Any, b: Any) -> None:
        """Record one A/A pair of values at ``path`` (numbers only)."""
        if _number(a) and _number(b):
            if a != b:
                self._move(path, a, b)
            elif self.by_magnitude:
                self._still(path, a)

    def _move(self, path: str, a: float, b: float) -> None:
        """Record a number that moved between the baselines, in its magnitude range."""
        d = decade(max(abs(a), abs(b))) if self.by_magnitude else None
        by_decade = self._moves.get(path)
        if by_decade is None:
            by_decade = self._moves[path] = {}
        moves = by_decade.get(d)
        if moves is None:
            moves = by_decade[d] = (array("d"), array("d"))
        moves[0].append(abs(a - b))
        moves[1].append(_rel(a, b))
        if d is not None:
            self._still(path, a, d)

    def _still(self, path: str, a: float, d: int | None = None) -> None:
        """Count an A/A pair of numbers in its magnitude range (moved, when ``d`` is given, or not: then counted by
        value first)."""
        if d is None:
            unmoved = self._unmoved.get(path)
            if unmoved is None:
                unmoved = self._unmoved[path] = {}
            unmoved[a] = unmoved.get(a, 0) + 1
            if len(unmoved) >= _MAX_UNMOVED:
                self._flush(path)
            return
        counts = self._pairs.get(path)
        if counts is None:
            counts = self._pairs[path] = {}
        counts[d] = counts.get(d, 0) + 1

    def _flush(self, path: str | None = None) -> None:
        """Count the unmoved values of ``path`` (of every path when None) in their magnitude ranges."""
        for p in [path] if path is not None else list(self._unmoved):
            counts = self._pairs.setdefault(p, {})
            for a, n in self._unmoved.pop(p, {}).items():
                m = abs(a)
                if 0 < m < math.inf:
                    d = math.floor(math.log10(m))
                    counts[d] = counts.get(d, 0) + n

    def _count_still(self, flat: dict[str, Any]) -> None:
        """Count the numbers of an output that equals its A/A partner (per magnitude range)."""
        for p, v in flat.items():
            t = type(v)
            if t is float or t is int:
                self._still(p, v)
            elif t is Group:
                for x in v.values():
                    self._learn(p, x, x)

    def learn_pair(self, fa: dict[str, Any], fb: dict[str, Any]) -> None:
        """Record the numeric differences of one aligned baseline / baseline-2 pair."""
        for p, va in fa.items():
            ta = type(va)
            if ta is float or ta is int:
                self._learn(p, va, fb.get(p, MISSING))
            elif ta is Group:
                vb = fb.get(p, MISSING)
                other = vb if type(vb) is Group else {}
                for m, x in va.items():
                    self._learn(p, x, other.get(m, MISSING))

    def learn_runs(self, by_key_a: Mapping[str, Sequence[Any]], by_key_a2: Mapping[str, Sequence[Any]]) -> int:
        """Record the numeric differences of every aligned pair of two runs' outputs (``Run.by_key``: per key
        its entries, the flattened output first; the n-th of a key with the n-th); returns the pairs seen."""
        pairs = 0
        for k, la in by_key_a.items():
            for ea, ea2 in zip(la, by_key_a2.get(k, ()), strict=False):
                pairs += 1
                if ea[0] != ea2[0]:
                    self.learn_pair(ea[0], ea2[0])
                elif self.by_magnitude:
                    self._count_still(ea[0])
        self._flush()
        return pairs

    def finish(self, pairs: int) -> None:
        """Compute the bands over ``pairs`` aligned outputs (unmoved ones count as 0), and per magnitude range
        over its A/A pairs."""
        self._flush()
        for p, by_decade in self._moves.items():
            deltas, rels = array("d"), array("d")
            for d_abs, d_rel in by_decade.values():
                deltas.extend(d_abs)
                rels.extend(d_rel)
            n = max(pairs, len(deltas))
            band_abs, band_rel = self._q(deltas, n), self._q(rels, n)
            if band_abs > 0:
                self.bands[p] = (band_abs, band_rel)
            ranges = self._ranges(by_decade, self._pairs.get(p, {}))
            if ranges:
                self.ranges[p] = ranges
        self._moves.clear()
        self._pairs.clear()

    def _ranges(
        self, by_decade: dict[int | None, _Moves], counts: dict[int | None, int]
    ) -> dict[int, tuple[float, float]]:
        """The bands of each magnitude range with at least ``min_pairs`` A/A pairs (0 where none moved)."""
        out: dict[int, tuple[float, float]] = {}
        for d, total in counts.items():
            if d is None or total < self.min_pairs:
                continue
            moves = by_decade.get(d)
            out[d] = (self._q(moves[0], total), self._q(moves[1], total)) if moves else (0.0, 0.0)
        return out

    def merge(self, other: NumericBand) -> None:
        """Add the differences ``other`` learned (on other outputs), before :meth:`finish`."""
        other._flush()
        for p, by_decade in other._moves.items():
            mine = self._moves.setdefault(p, {})
            for d, (d_abs, d_rel) in by_decade.items():
                moves = mine.get(d)
                if moves is None:
                    moves = mine[d] = (array("d"), array("d"))
                moves[0].extend(d_abs)
                moves[1].extend(d_rel)
        for p, counts in other._pairs.items():
            mine_counts = self._pairs.setdefault(p, {})
            for d, total in counts.items():
                mine_counts[d] = mine_counts.get(d, 0) + total

    def _q(self, nonzero: array[float], n: int) -> float:
        rank = max(math.ceil(self.quantile * n), 1) - 1  # 0-based rank among n values, zeros first
        k = rank - (n - len(nonzero))
        return 0.0 if k < 0 else sorted(nonzero)[k]

    def band_of(self, path: str, a: float, b: float) -> tuple[float, float] | None:
        """The bands a difference between ``a`` and ``b`` is judged by: its magnitude range's, else the field's."""
        ranges = self.ranges.get(path)
        if ranges is not None:
            m = max(abs(a), abs(b))
            band = ranges.get(math.floor(math.log10(m))) if 0 < m < math.inf else None
            if band is not None:
                return band
        return self.bands.get(path)

    def within(self, path: str, a: float, b: float) -> bool:
        """True if ``a`` and ``b`` differ by no more than the noise does (within either band of their range)."""
        band = self.band_of(path, a, b)
        return band is not None and (abs(a - b) <= band[0] or _rel(a, b) <= band[1])

    def range_kind(self, path: str, a: float, b: float) -> str | None:
        """The magnitude range of a counted difference (``values 0.1-1``) when ``path`` has ranges of its own."""
        if path not in self.ranges:
            return None
        d = decade(max(abs(a), abs(b)))
        return None if d is None else range_label(d)

    def band_of_kind(self, path: str, kind: str) -> tuple[float, float] | None:
        """The bands of a magnitude range named by :meth:`range_kind` (the field's when it has none of its own)."""
        for d, band in self.ranges.get(path, {}).items():
            if range_label(d) == kind:
                return band
        return self.bands.get(path)


class Differ:
    """Per-pair field differ: cached comparator choice, map groups member by member, the numeric band.

    After each call :attr:`kinds` holds, for the differing paths whose difference has a kind, that kind: a
    change of JSON type (``type boolean -> number``) or the magnitude range of a number moved beyond the bands
    of its range (``values 0.1-1``)."""

    def __init__(
        self, resolver: ComparatorResolver, band: NumericBand | None = None, typed: frozenset[str] | None = None
    ) -> None:
        self.resolver = resolver
        self.band = band
        #: the paths at which outputs that are ``==`` may differ in JSON type (:meth:`Flattener.typed_paths`);
        #: None: unknown, every path is looked at
        self.typed = typed
        self.comparator_of: dict[str, str] = {}
        #: paths whose comparator was set by a difference in the first output (not only in the second)
        self.assigned: set[str] = set()
        #: path -> kind of its difference in the last pair diffed
        self.kinds: dict[str, str] = {}
        #: the paths at which the second output of the last pair diffed holds a string that is not the first's,
        #: whatever the comparator says (a paraphrase within the text threshold too): what the text rules read
        self.texts: list[str] = []

    def merge(self, comparator_of: dict[str, str], assigned: set[str]) -> None:
        """Take the comparator choices of another differ that saw the outputs after ours (its
        ``comparator_of`` and ``assigned``), as if one differ had seen them all."""
        for p, name in comparator_of.items():
            if p in assigned:
                self.comparator_of[p] = name
                self.assigned.add(p)
            else:
                self.comparator_of.setdefault(p, name)

    def __call__(self, fa: dict[str, Any], fb: dict[str, Any]) -> dict[str, float]:
        """``{path: similarity}`` of the fields that differ between two flattened outputs."""
        if self.kinds:
            self.kinds = {}
        if fa == fb and self._same_types(fa, fb):
            if self.texts:
                self.texts = []
            return {}
        out: dict[str, float] = {}
        names = self.comparator_of
        typed = self.typed
        texts: list[str] = []
        self.texts = texts
        for p, va in fa.items():
            vb = fb.get(p, MISSING)
            if va == vb:  # equal as JSON too unless a boolean is == a number somewhere (1 and 1.0 are one number)
                tv = type(va)
                if tv is type(vb):
                    if (tv is not list and tv is not Group) or (typed is not None and p not in typed):
                        continue
                    if same_types(va, vb):
                        continue
                elif same_types(va, vb):
                    continue
            if type(vb) is str:
                texts.append(p)
            differs, score, name = self._one(p, va, vb)
            names[p] = name
            self.assigned.add(p)
            if differs:
                out[p] = score
        for p, vb in fb.items():
            if p not in fa:
                if type(vb) is str:
                    texts.append(p)
                differs, score, name = self._one(p, MISSING, vb)
                names.setdefault(p, name)
                if differs:
                    out[p] = score
        return out

    def _same_types(self, fa: dict[str, Any], fb: dict[str, Any]) -> bool:
        """Whether two outputs that are ``==`` have the same JSON types (only the typed paths can differ)."""
        typed = self.typed
        if typed is None:
            return same_flat(fa, fb)
        for p in typed:
            va = fa.get(p, MISSING)
            if va is not MISSING and not same_types(va, fb[p]):
                return False
        return True

    def _one(self, p: str, va: Any, vb: Any) -> tuple[bool, float, str]:
        if type(va) is Group or type(vb) is Group:
            return self._group(p, va, vb)
        differs, score, name = self.resolver.compare(p, va, vb)
        if not differs:
            return differs, score, name
        if self.band is not None and _number(va) and _number(vb) and name.startswith(("numeric", "auto")):
            if self.band.within(p, va, vb):
                return False, 1.0, name
            kind = self.band.range_kind(p, va, vb)
            if kind is not None:
                self.kinds[p] = kind
            return differs, score, name
        ta, tb = json_type(va), json_type(vb)
        if ta != tb and ta is not None and tb is not None:
            self.kinds[p] = f"type {ta} -> {tb}"
        return differs, score, name

    def _group(self, p: str, va: Any, vb: Any) -> tuple[bool, float, str]:
        """A collapsed map: differs when any member differs; the similarity is the worst member's."""
        ga: dict[str, Any] = va if type(va) is Group else {}
        gb: dict[str, Any] = vb if type(vb) is Group else {}
        differs, worst, name = False, 1.0, "exact"
        for m in (*ga, *(m for m in gb if m not in ga)):
            x, y = ga.get(m, MISSING), gb.get(m, MISSING)
            if same_json(x, y):
                continue
            d, score, name = self._one(p, x, y)
            if d:
                differs, worst = True, min(worst, score)
        return differs, worst if differs else 1.0, name


def band_for(config: CompareConfig) -> NumericBand:
    """An empty band with the config's quantile and magnitude ranges, to learn from A vs A'."""
    return NumericBand(config.numeric_noise_quantile, config.numeric_band_by_magnitude, config.numeric_band_min_pairs)

"""Diffing one aligned pair of flattened outputs, with the numeric noise band learned from A vs A'.

Numbers are judged by size, not by count (Diffy's idea applied to magnitudes): before the candidate is
compared, :class:`NumericBand` learns how far each numeric field moves between baseline and baseline-2.
The band of a field is a quantile (``numeric_noise_quantile``, 0.99 by default) of ``|a - a'|`` over all
aligned outputs, outputs where the number did not move counting as 0, and the same quantile of the relative
difference ``|a - a'| / max(|a|, |a'|)``. A difference within either band is noise (additive jitter is
judged by its size, multiplicative by its ratio; a score jittering near 0 moves far relative to its
value): it counts neither for the noise rate nor for the candidate rate. A field that never moves between
the baselines has no band, so its differences count as before.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_flink_replay.core.compare.comparators import ComparatorResolver
from airflow_flink_replay.core.compare.paths import MISSING, Group


def _number(v: Any) -> bool:
    return (type(v) is float or type(v) is int) and not math.isnan(v)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


class NumericBand:
    """Per numeric path: how far it moves between baseline and baseline-2 (absolute and relative band)."""

    def __init__(self, quantile: float) -> None:
        self.quantile = quantile
        self._abs: dict[str, array[float]] = {}
        self._rel: dict[str, array[float]] = {}
        #: path -> (absolute band, relative band); only paths that moved between the baselines
        self.bands: dict[str, tuple[float, float]] = {}

    def _learn(self, path: str, a: Any, b: Any) -> None:
        if _number(a) and _number(b) and a != b:
            self._abs.setdefault(path, array("d")).append(abs(a - b))
            self._rel.setdefault(path, array("d")).append(_rel(a, b))

    def learn_pair(self, fa: dict[str, Any], fb: dict[str, Any]) -> None:
        """Record the numeric differences of one aligned baseline / baseline-2 pair."""
        for p, va in fa.items():
            vb = fb.get(p, MISSING)
            if va == vb:
                continue
            if type(va) is Group:
                other = vb if type(vb) is Group else {}
                for m, x in va.items():
                    self._learn(p, x, other.get(m, MISSING))
            else:
                self._learn(p, va, vb)

    def learn_runs(self, by_key_a: Mapping[str, Sequence[Any]], by_key_a2: Mapping[str, Sequence[Any]]) -> int:
        """Record the numeric differences of every aligned pair of two runs' outputs (``Run.by_key``: per key
        its entries, the flattened output first; the n-th of a key with the n-th); returns the pairs seen."""
        pairs = 0
        for k, la in by_key_a.items():
            for ea, ea2 in zip(la, by_key_a2.get(k, ()), strict=False):
                pairs += 1
                if ea[0] != ea2[0]:
                    self.learn_pair(ea[0], ea2[0])
        return pairs

    def finish(self, pairs: int) -> None:
        """Compute the bands over ``pairs`` aligned outputs (unmoved ones count as 0)."""
        for p, deltas in self._abs.items():
            n = max(pairs, len(deltas))
            band_abs, band_rel = self._q(deltas, n), self._q(self._rel[p], n)
            if band_abs > 0:
                self.bands[p] = (band_abs, band_rel)
        self._abs.clear()
        self._rel.clear()

    def merge(self, other: NumericBand) -> None:
        """Add the differences ``other`` learned (on other outputs), before :meth:`finish`."""
        for p, deltas in other._abs.items():
            self._abs.setdefault(p, array("d")).extend(deltas)
            self._rel.setdefault(p, array("d")).extend(other._rel[p])

    def _q(self, nonzero: array[float], n: int) -> float:
        rank = max(math.ceil(self.quantile * n), 1) - 1  # 0-based rank among n values, zeros first
        k = rank - (n - len(nonzero))
        return 0.0 if k < 0 else sorted(nonzero)[k]

    def within(self, path: str, a: float, b: float) -> bool:
        """True if ``a`` and ``b`` differ by no more than the noise does (within either band)."""
        band = self.bands.get(path)
        return band is not None and (abs(a - b) <= band[0] or _rel(a, b) <= band[1])


class Differ:
    """Per-pair field differ: cached comparator choice, map groups member by member, the numeric band."""

    def __init__(self, resolver: ComparatorResolver, band: NumericBand | None = None) -> None:
        self.resolver = resolver
        self.band = band
        self.comparator_of: dict[str, str] = {}
        #: paths whose comparator was set by a difference in the first output (not only in the second)
        self.assigned: set[str] = set()

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
        if fa == fb:
            return {}
        out: dict[str, float] = {}
        names = self.comparator_of
        for p, va in fa.items():
            vb = fb.get(p, MISSING)
            if va == vb and type(va) is type(vb):
                continue
            differs, score, name = self._one(p, va, vb)
            names[p] = name
            self.assigned.add(p)
            if differs:
                out[p] = score
        for p, vb in fb.items():
            if p not in fa:
                differs, score, name = self._one(p, MISSING, vb)
                names.setdefault(p, name)
                if differs:
                    out[p] = score
        return out

    def _one(self, p: str, va: Any, vb: Any) -> tuple[bool, float, str]:
        if type(va) is Group or type(vb) is Group:
            return self._group(p, va, vb)
        differs, score, name = self.resolver.compare(p, va, vb)
        if (
            differs
            and self.band is not None
            and _number(va)
            and _number(vb)
            and name.startswith(("numeric", "auto"))
            and self.band.within(p, va, vb)
        ):
            return False, 1.0, name
        return differs, score, name

    def _group(self, p: str, va: Any, vb: Any) -> tuple[bool, float, str]:
        """A collapsed map: differs when any member differs; the similarity is the worst member's."""
        ga: dict[str, Any] = va if type(va) is Group else {}
        gb: dict[str, Any] = vb if type(vb) is Group else {}
        differs, worst, name = False, 1.0, "exact"
        for m in (*ga, *(m for m in gb if m not in ga)):
            x, y = ga.get(m, MISSING), gb.get(m, MISSING)
            if x == y and type(x) is type(y):
                continue
            d, score, name = self._one(p, x, y)
            if d:
                differs, worst = True, min(worst, score)
        return differs, worst if differs else 1.0, name

"""Volatile fields: per-run values that differ between the two baselines in (almost) every output.

Request ids, trace and span ids, host names and timestamps are new in every run. Their noise rate
is (close to) 100 %, so no candidate rate can ever exceed it: judged like other fields they only make every
verdict INCONCLUSIVE (``NOISE_TOO_HIGH``), and counted in the outputs-level rate they make every output
differ, so a change spread thinly over many fields goes unseen. Diffy calls this noise cancellation.

A field is **volatile** when its values differ, under its comparator, in at least ``volatile_noise_rate``
(0.98) of at least ``min_aligned`` aligned baseline pairs, and they are identifiers: strings of one or two
words (ids, hashes, hosts, timestamps). A number is judged by its size (the numeric
band learns how far it moves) and a text of several words by similarity and meaning, however often they
differ; what cannot be judged that way stays INCONCLUSIVE. A volatile field is listed (``VOLATILE_FIELDS``)
and its values are left out of the verdict and of the outputs-level rate. What remains judged is what a
consumer of the field relies on: that it is there and of the same JSON type. A candidate that drops a
volatile field, or writes a trace id as a number, changes that in every output where the baselines never
did: a regression like any other. A field noisy but not volatile (say 60 %) still makes the comparison
INCONCLUSIVE: a real change can hide in it.

Leaving a field out of the outputs-level rate needs to know, per output, whether anything *else* differed,
and which fields are volatile is known only once every output was compared. So before the candidate is
compared, the baselines' raw values are scanned once (:class:`VolatileSuspects`, next to the numeric band):
fields whose raw values differ in at least that share of pairs are *suspects*, a superset of the volatile
ones (a comparator only makes unequal values equal; only suspects are ever taken as volatile). While
aligning, :class:`VolatileTally` counts per output the set of differing fields when they are all suspects
(few distinct sets), and the changes of presence and JSON type of the suspects; at the end the
outputs-level counts follow exactly for whichever suspects turned out volatile.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from airflow_flink_replay.core.compare.paths import MISSING, json_type
from airflow_flink_replay.core.compare.result import FieldStat, Reason

#: The set of differing fields of an output when they are all suspects (None: some field is not).
DiffSet = frozenset[str] | None

_NO_DIFFERENCE: frozenset[str] = frozenset()

#: Three words or more: a text, not an identifier.
_WORDS = re.compile(r"\S\s+\S+\s+\S")


def identifier_like(value: Any) -> bool:
    """A string of one or two words: an id, a hash, a host name, a timestamp (``2026-03-05 12:34:56``)."""
    return type(value) is str and _WORDS.search(value) is None


def at_least(count: int, rate: float, n: int) -> bool:
    """``count / n >= rate`` without a float rounding away the boundary."""
    return count >= rate * n - 1e-9


class VolatileSuspects:
    """Learned from baseline vs baseline-2 before the candidate is compared: per path, in how many aligned
    pairs its raw values differ, the baseline's being an identifier (:func:`identifier_like`)."""

    def __init__(self) -> None:
        self.differs: Counter[str] = Counter()
        self.pairs = 0

    def learn_runs(self, by_key_a: Mapping[str, Sequence[Any]], by_key_a2: Mapping[str, Sequence[Any]]) -> None:
        """Count the differing paths of every aligned pair of two runs (``Run.by_key``; the n-th output of a
        key with the n-th, as the alignment pairs them)."""
        differs = self.differs
        words = _WORDS.search  # identifier_like, inlined: this runs for every A/A pair
        for k, la in by_key_a.items():
            la2 = by_key_a2.get(k)
            if not la2:
                continue
            for ea, ea2 in zip(la, la2, strict=False):
                self.pairs += 1
                fa, fb = ea[0], ea2[0]
                if fa != fb:
                    get = fb.get
                    for p, v in fa.items():
                        if type(v) is str and get(p, MISSING) != v and words(v) is None:
                            differs[p] += 1
                    if fb.keys() != fa.keys():
                        differs.update([p for p in fb.keys() - fa.keys() if identifier_like(fb[p])])

    def merge(self, other: VolatileSuspects) -> None:
        """Add what ``other`` learned on other outputs."""
        self.differs.update(other.differs)
        self.pairs += other.pairs

    def suspects(self, rate: float | None, min_pairs: int) -> frozenset[str]:
        """The paths whose raw identifiers differ in at least ``rate`` of the pairs (none below ``min_pairs``)."""
        if rate is None or self.pairs < min_pairs:
            return frozenset()
        return frozenset(p for p, n in self.differs.items() if at_least(n, rate, self.pairs))


@dataclass
class VolatileTally:
    """What aligning counts for the suspects: changes of presence and JSON type, and the differing sets of
    the outputs where only suspects differ (see the module's docstring)."""

    suspects: frozenset[str] = frozenset()
    #: per suspect, its changes of shape (present in one output only, or of another JSON type): A/A' pairs,
    #: A/B pairs, and A/B pairs whose A/A' pair kept the shape
    shape_noise: Counter[str] = field(default_factory=Counter)
    shape_candidate: Counter[str] = field(default_factory=Counter)
    shape_only: Counter[str] = field(default_factory=Counter)
    #: differing A/A' pairs by their set of differing fields
    noise_sets: Counter[DiffSet] = field(default_factory=Counter)
    #: differing A/B pairs by their set of differing fields and the A/A' set of the same output
    candidate_sets: Counter[tuple[DiffSet, DiffSet]] = field(default_factory=Counter)

    def _within(self, diff: Mapping[str, float] | None) -> DiffSet:
        if not diff:
            return _NO_DIFFERENCE
        return frozenset(diff) if diff.keys() <= self.suspects else None

    def add_noise(self, fa: dict[str, Any], fa2: dict[str, Any], noise: Mapping[str, float]) -> None:
        """One A/A' pair that differs in ``noise``."""
        self.noise_sets[self._within(noise)] += 1
        for p in noise.keys() & self.suspects:
            if json_type(fa.get(p, MISSING)) != json_type(fa2.get(p, MISSING)):
                self.shape_noise[p] += 1

    def add_candidate(
        self,
        fa: dict[str, Any],
        fb: dict[str, Any],
        fa2: dict[str, Any] | None,
        cd: Mapping[str, float],
        noise: Mapping[str, float] | None,
    ) -> None:
        """One A/B pair that differs in ``cd``; ``fa2``/``noise``: its A' partner and A/A' difference."""
        self.candidate_sets[(self._within(cd), self._within(noise))] += 1
        for p in cd.keys() & self.suspects:
            type_a = json_type(fa.get(p, MISSING))
            if type_a != json_type(fb.get(p, MISSING)):
                self.shape_candidate[p] += 1
                if fa2 is None or json_type(fa2.get(p, MISSING)) == type_a:
                    self.shape_only[p] += 1

    def shape_counts(self) -> tuple[Counter[str], Counter[str], Counter[str]]:
        """Per suspect, its changes of shape between A and A', A and B, and A and B where A and A' kept it."""
        return self.shape_noise, self.shape_candidate, self.shape_only

    def merge(self, other: VolatileTally) -> None:
        """Add the counts of other outputs (a partition aligned elsewhere)."""
        self.shape_noise.update(other.shape_noise)
        self.shape_candidate.update(other.shape_candidate)
        self.shape_only.update(other.shape_only)
        self.noise_sets.update(other.noise_sets)
        self.candidate_sets.update(other.candidate_sets)

    def outputs_counts(self, volatile: Set[str]) -> tuple[int, int, int]:
        """The outputs-level counts without the ``volatile`` fields (all suspects): A/A' pairs and A/B pairs
        that differ in another field, and A/B pairs that do while their A/A' pair does not."""

        def outside(s: DiffSet) -> bool:
            return s is None or not s <= volatile

        noise_any = sum(n for s, n in self.noise_sets.items() if outside(s))
        cand_any = sum(n for (s, _), n in self.candidate_sets.items() if outside(s))
        cand_only = sum(
            n for (s, ns), n in self.candidate_sets.items() if outside(s) and ns is not None and ns <= volatile
        )
        return noise_any, cand_any, cand_only


def volatile_fields(
    noise_counts: Mapping[str, int],
    aligned_noise: int,
    tally: VolatileTally,
    rate: float | None,
    min_aligned: int,
    must_not_change: Callable[[str], bool],
) -> dict[str, float]:
    """The volatile fields and their noise rates: suspects (identifiers) that differ under their comparator in
    at least ``rate`` of at least ``min_aligned`` baseline pairs. A must-not-change field is never noise."""
    if rate is None or aligned_noise < min_aligned:
        return {}
    out = {}
    for p in sorted(tally.suspects):
        n = noise_counts.get(p, 0)
        if at_least(n, rate, aligned_noise) and not must_not_change(p):
            out[p] = n / aligned_noise
    return out


def _rate(rate: float) -> str:
    return "100%" if rate >= 1 else f"{rate:.1%}"


def volatile_reasons(fields: Sequence[FieldStat], max_listed: int, threshold: float | None) -> list[Reason]:
    """``VOLATILE_FIELDS`` (info): the volatile fields left out of the verdict, each with how often its values
    differ between the baselines. One whose shape the candidate changed is a regression, reported as such."""
    listed = sorted((f for f in fields if f.status == "volatile"), key=lambda f: f.path)
    if not listed:
        return []
    each = ", ".join(
        f"{f.path} {_rate(f.volatile_rate or 0.0)} ({round((f.volatile_rate or 0.0) * (f.noise_n or 0))}/{f.noise_n})"
        for f in listed[:max_listed]
    )
    more = f" and {len(listed) - max_listed} more" if len(listed) > max_listed else ""
    message = (
        f"{len(listed)} field{'s' if len(listed) != 1 else ''} differ between the baseline runs in (almost) every "
        f"output (at least {threshold:.0%}): per-run values such as ids, hosts and times, left out of the verdict "
        f"and of the outputs-level rate as volatile noise: {each}{more}; whether they are present and their JSON "
        "type are still compared"
    )
    return [
        Reason(code="VOLATILE_FIELDS", severity="info", message=message, fields=[f.path for f in listed[:max_listed]])
    ]

"""Distribution shifts: where the candidate's values go, not only how often they change (issue 41, item 2).

The noise rule (§3 of docs/comparison.md) asks how often a field differs. A candidate whose decision flips all
go one way (more approvals) at the rate of the A/A's random flips both ways passes it, and so does one that
adds a citation where the A/A adds or drops one as often, or one that moves every score up a little, each move
within the numeric band. A reviewer would tabulate where the values go; so does this module, while aligning:

* **Categorical fields** (strings, booleans, null; at most :data:`MAX_CATEGORIES` distinct values among the
  values that change): the transitions ``x -> y`` of the A/A' pairs (noise) and of the A/B pairs (candidate),
  counted on the fields that differ under their comparator. In an A/A, ``x -> y`` and ``y -> x`` are
  exchangeable (either baseline could have been the first), so the noise rate of ``x -> y`` is estimated from
  both, ``(n(x -> y) + n(y -> x)) / 2`` per A/A pair, or by its own ``x -> y`` rate when that is higher (an A/A
  that drifts one way). A candidate transition is tested against it with the exact conditional binomial test of
  two counts: given the ``m`` events of both, the candidate's share is binomial with ``q = n1 / (n1 + 2 n0)``
  (``n1 / (n1 + n0)`` against the own rate; both tests must reject).
* **Numbers and the item counts of lists** (distinct items for a list compared as a set, the default for lists
  of scalars): per output that all three runs have, the candidate's move
  ``B - A``, the A/A's ``A' - A`` and their difference ``B - A'``, summed. The shift of the mean,
  ``mean(B - A) - mean(A' - A) = mean(B - A')``, is tested by the paired z statistic of ``B - A'`` (its own
  standard error): ``B - A`` and ``A' - A`` share ``A``, so a two-sample (Welch) test of them would count A's
  own spread twice. Under the null, ``B`` and ``A'`` are two draws of the same agent for the same input:
  ``B - A'`` has mean 0.

A shift decides only when it is also beyond margins, the noise rule's, so that a tiny shift made significant by a
huge window does not FAIL: a transition's candidate rate must exceed the A/A's by more than ``abs_threshold``
(points of outputs) and by more than ``rel_threshold`` of it; a mean must move in more than ``abs_threshold`` of
the outputs (B unlike A), by more than ``abs_threshold`` of the field's mean size (``mean |A|``; a list's mean
item count) and by more than ``rel_threshold`` of the A/A's mean move per output (``mean |A' - A|``), and, for a
number, by more than its comparator's tolerance. The tests beyond the margins are corrected together
(Bonferroni): each at ``alpha / k``. A field that FAILs by the noise rule already is not reported again. Only
counts and sums are kept, so partitions aligned in other processes merge (:meth:`ShiftTally.merge`) into the
tally one walk would have made.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_flink_replay.core.compare.comparators import ComparatorResolver
from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.compare.paths import MISSING
from airflow_flink_replay.core.compare.result import Reason
from airflow_flink_replay.core.compare.stats import binomial_greater, weighted

#: A field with more distinct values than this among its changes is not categorical (a text, an id, a name).
MAX_CATEGORIES = 12
#: A string longer than this is text, never a category (and is not kept in the tally).
MAX_CATEGORY_CHARS = 200
#: The JSON types of categorical values.
_CATEGORICAL = (str, bool, type(None))

# The slots of a number's (or a list's item count's) sums over the outputs all three runs have.
_N, _SIZE, _AA_MOVE, _AA_SUM, _AA_SQ, _E_SUM, _E_SQ, _UP_B, _DOWN_B, _UP_AA, _DOWN_AA = range(11)

#: A path's list indices: ``[k]`` segments, the names around them (quoted names may hold brackets).
_SEGMENT = re.compile(r"\.[^.\[]+|\[(\d+)\]|\['(?:[^'\\]|\\.)*'\]")


def _list_steps(path: str) -> tuple[tuple[str, int], ...]:
    """The lists ``path`` lies in and its index in each: ``$.calls[2].args[0]`` -> ``(($.calls, 2), ($.calls[2].args,
    0))``."""
    return tuple((path[: m.start()], int(m.group(1))) for m in _SEGMENT.finditer(path, 1) if m.group(1) is not None)


def _distinct(items: list[Any]) -> int:
    """How many distinct JSON values ``items`` holds (``true`` is not ``1``; ``1`` and ``1.0`` are one number)."""
    try:
        return len({(type(v) is bool, v) for v in items})
    except TypeError:  # objects or lists among them
        return len({json.dumps(v, sort_keys=True) for v in items})


def _add(acc: list[float], a: float, x: float, y: float) -> None:
    """Add one output's A, A' and B values (numbers, or item counts) to a path's sums."""
    a, x, y = float(a), float(x), float(y)  # an integer beyond the float range raises OverflowError here
    dn, db, e = x - a, y - a, y - x
    acc[_N] += 1
    acc[_SIZE] += abs(a)
    acc[_AA_MOVE] += abs(dn)
    acc[_AA_SUM] += dn
    acc[_AA_SQ] += dn * dn
    acc[_E_SUM] += e
    acc[_E_SQ] += e * e
    if db > 0:
        acc[_UP_B] += 1
    elif db < 0:
        acc[_DOWN_B] += 1
    if dn > 0:
        acc[_UP_AA] += 1
    elif dn < 0:
        acc[_DOWN_AA] += 1


@dataclass
class ShiftTally:
    """What aligning counts for the distribution shifts: categorical transitions, and per number and list the
    sums of the moves (see the module's docstring)."""

    #: counting at all (with baseline-2 and ``distribution_shifts``)
    enabled: bool = False
    #: how much one A/A count weighs in the exact tests (below 1 when several pairs of baseline runs are pooled)
    noise_weight: float = 1.0
    #: some output has lists expanded by index (lists of objects): item counts come from the ``[k]`` paths
    indexed: bool = False
    #: per categorical path: transitions (x, y) of A/A' pairs and of A/B pairs, and the values seen changing
    noise_moves: dict[str, Counter[tuple[Any, Any]]] = field(default_factory=dict)
    candidate_moves: dict[str, Counter[tuple[Any, Any]]] = field(default_factory=dict)
    categories: dict[str, set[Any]] = field(default_factory=dict)
    not_categorical: set[str] = field(default_factory=set)
    #: per numeric path, and per list path (item counts): the sums of the slots ``_N`` .. ``_DOWN_AA``
    numbers: dict[str, list[float]] = field(default_factory=dict)
    lengths: dict[str, list[float]] = field(default_factory=dict)
    #: numeric paths holding an integer no float holds: not tested
    untestable: set[str] = field(default_factory=set)
    #: the settings, to tell a list compared as a set (while aligning only: not sent back from a worker)
    config: CompareConfig | None = field(default=None, repr=False)
    _steps: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict, repr=False)
    _as_set: dict[str, bool] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, config: CompareConfig, has_noise: bool, paths: Collection[str]) -> ShiftTally:
        """An empty tally for a comparison with these settings and the runs' flattened ``paths``."""
        enabled = config.distribution_shifts and has_noise
        indexed = enabled and any(_list_steps(p) for p in paths if "[" in p)
        return cls(enabled=enabled, indexed=indexed, config=config)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(config=None, _steps={}, _as_set={})  # the caches, and what only aligning needs
        return state

    def _count(self, path: str, items: list[Any]) -> int:
        """A list's item count as its comparator sees it: distinct items for a list compared as a set (the default
        for lists of scalars: ``["a", "a", "b"]`` is ``["a", "b"]``), all of them otherwise."""
        as_set = self._as_set.get(path)
        if as_set is None:
            config = self.config
            rule = config.rule_for(path) if config is not None else None
            name = rule.comparator if rule is not None else "auto"
            default = config is None or config.list_mode != "multiset"
            as_set = default if name in ("auto", "ignore") else name == "set"
            self._as_set[path] = as_set
        return _distinct(items) if as_set else len(items)

    def add_noise(self, fa: dict[str, Any], fa2: dict[str, Any], noise: Mapping[str, float]) -> None:
        """One A/A' pair that differs in ``noise`` (its differing paths)."""
        self._transitions(fa, fa2, noise, self.noise_moves)

    def add_candidate(
        self, fa: dict[str, Any], fb: dict[str, Any], fa2: dict[str, Any] | None, cd: Mapping[str, float]
    ) -> None:
        """One A/B pair that differs in ``cd`` (maybe none); ``fa2``: A's partner in A' (None without one)."""
        if cd:
            self._transitions(fa, fb, cd, self.candidate_moves)
        if fa2 is not None:
            self._moves(fa, fa2, fb)

    def _transitions(
        self, fa: dict[str, Any], fb: dict[str, Any], paths: Mapping[str, float], into: dict[str, Counter]
    ) -> None:
        off = self.not_categorical
        for p in paths:
            if p in off:
                continue
            x, y = fa.get(p, MISSING), fb.get(p, MISSING)  # a missing value is no category
            if not isinstance(x, _CATEGORICAL) or not isinstance(y, _CATEGORICAL):
                continue
            if (type(x) is str and len(x) > MAX_CATEGORY_CHARS) or (type(y) is str and len(y) > MAX_CATEGORY_CHARS):
                self._drop(p)
                continue
            seen = self.categories.get(p)
            if seen is None:
                seen = self.categories[p] = set()
            seen.add(x)
            seen.add(y)
            if len(seen) > MAX_CATEGORIES:
                self._drop(p)
                continue
            counts = into.get(p)
            if counts is None:
                counts = into[p] = Counter()
            counts[x, y] += 1

    def _drop(self, path: str) -> None:
        """``path`` is not categorical: forget its transitions."""
        self.not_categorical.add(path)
        self.noise_moves.pop(path, None)
        self.candidate_moves.pop(path, None)
        self.categories.pop(path, None)

    def _moves(self, fa: dict[str, Any], fa2: dict[str, Any], fb: dict[str, Any]) -> None:
        """Add the numbers and list item counts of one output that all three runs have."""
        numbers, untestable = self.numbers, self.untestable
        for p, a in fa.items():
            t = type(a)
            if t is float or t is int:
                x, y = fa2.get(p), fb.get(p)
                tx, ty = type(x), type(y)
                if (tx is float or tx is int) and (ty is float or ty is int):
                    if untestable and p in untestable:
                        continue
                    acc = numbers.get(p)
                    if acc is None:
                        acc = numbers[p] = [0.0] * 11
                    try:
                        if x == a and y == a:  # the common case: nothing moved
                            acc[_N] += 1
                            acc[_SIZE] += abs(float(a))
                        else:
                            _add(acc, a, x, y)  # type: ignore[arg-type]  # numbers: checked above
                    except OverflowError:
                        untestable.add(p)
            elif t is list and not self.indexed:
                x, y = fa2.get(p), fb.get(p)
                if type(x) is list and type(y) is list:
                    if x == a and y == a:  # nothing moved: only the size counts (as in _add)
                        acc = self.lengths.get(p)
                        if acc is None:
                            acc = self.lengths[p] = [0.0] * 11
                        acc[_N] += 1
                        acc[_SIZE] += float(self._count(p, a) if a else 0)
                    else:
                        self._add_length(p, self._count(p, a), self._count(p, x), self._count(p, y))
        if self.indexed:
            la2, lb = self._item_counts(fa2), self._item_counts(fb)
            for p, count in self._item_counts(fa).items():
                x, y = la2.get(p), lb.get(p)
                if x is not None and y is not None:
                    self._add_length(p, count, x, y)

    def _add_length(self, path: str, a: int, x: int, y: int) -> None:
        acc = self.lengths.get(path)
        if acc is None:
            acc = self.lengths[path] = [0.0] * 11
        _add(acc, a, x, y)

    def _item_counts(self, flat: dict[str, Any]) -> dict[str, int]:
        """The item count of every list of an output: a list kept whole (a leaf), or expanded by index."""
        out: dict[str, int] = {}
        cache = self._steps
        for p, v in flat.items():
            steps = cache.get(p)
            if steps is None:
                steps = cache[p] = _list_steps(p)
            for list_path, k in steps:
                if out.get(list_path, 0) <= k:
                    out[list_path] = k + 1
            if type(v) is list:
                out[p] = self._count(p, v)
        return out

    def merge(self, other: ShiftTally) -> None:
        """Add the counts of other outputs (a partition aligned elsewhere)."""
        self.enabled = self.enabled or other.enabled
        self.indexed = self.indexed or other.indexed
        for p in other.not_categorical:
            self._drop(p)
        for p, values in other.categories.items():
            if p in self.not_categorical:
                continue
            mine = self.categories.setdefault(p, set())
            mine |= values
            if len(mine) > MAX_CATEGORIES:
                self._drop(p)
        for moves, theirs in ((self.noise_moves, other.noise_moves), (self.candidate_moves, other.candidate_moves)):
            for p, counts in theirs.items():
                if p not in self.not_categorical:
                    moves.setdefault(p, Counter()).update(counts)
        for path in other.untestable:
            self.untestable.add(path)
            self.numbers.pop(path, None)
        for store, theirs_sums in ((self.numbers, other.numbers), (self.lengths, other.lengths)):
            for p, sums in theirs_sums.items():
                if p in self.untestable and store is self.numbers:
                    continue
                mine_sums = store.setdefault(p, [0.0] * 11)
                for i, v in enumerate(sums):
                    mine_sums[i] += v


@dataclass(frozen=True)
class Shift:
    """One shift beyond the margins: its path, its p-value, and the evidence in words."""

    path: str
    p_value: float
    message: str


def _fmt(value: float, scale: float) -> str:
    """``value`` signed, to three significant digits of ``scale`` (so a mean move of 1e-17 next to a shift of 0.3
    reads +0)."""
    digits = 2 - math.floor(math.log10(abs(scale))) if scale else 3
    rounded = round(value, max(digits, 0))
    return f"{rounded + 0.0:+.{max(digits, 0)}f}" if digits > 0 else f"{rounded:+.3g}"


def _show(value: Any) -> str:
    """A categorical value as the report shows it: a string bare, anything else as JSON."""
    if type(value) is str:
        return value
    return {True: "true", False: "false", None: "null"}[value]


def transition_shifts(tally: ShiftTally, n0: int, n1: int, config: CompareConfig) -> list[Shift]:
    """The candidate's transitions of categorical fields beyond the margins of the A/A's (``n0`` A/A' pairs,
    ``n1`` A/B pairs), each with its one-sided exact p-value.

    The noise of ``x -> y`` is the A/A's symmetric rate, or its own ``x -> y`` rate when that is higher (an A/A
    that drifts one way, say a live tool whose answers changed between the runs: then the candidate's drift the
    same way is noise too); the p-value is the larger of the two exact tests, so both must reject."""
    out = []
    for p, cand in sorted(tally.candidate_moves.items()):
        noise = tally.noise_moves.get(p, Counter())
        for (x, y), c in sorted(cand.items(), key=lambda kv: (-kv[1], _show(kv[0][0]), _show(kv[0][1]))):
            fwd, back = noise[x, y], noise[y, x]
            r0, r1 = max((fwd + back) / (2 * n0), fwd / n0), c / n1
            fwd_w, n0w = weighted(fwd, n0, tally.noise_weight)  # pooled pairs, as the pairs they are worth
            back_w = weighted(back, n0, tally.noise_weight)[0]
            if not (r1 - r0 > config.abs_threshold and r1 - r0 > config.rel_threshold * r0):
                continue
            p_value = max(
                binomial_greater(c, c + fwd_w + back_w, n1 / (n1 + 2 * n0w)),  # against the symmetric rate
                binomial_greater(c, c + fwd_w, n1 / (n1 + n0w)),  # against the A/A's own x -> y
            )
            reverse = cand[y, x]
            how = "a one-way shift" if reverse / n1 <= r0 else "more changes both ways"
            there, back_again = f"{_show(x)}->{_show(y)}", f"{_show(y)}->{_show(x)}"
            aa = (
                f"the A/A moves it {r0:.1%} either way ({fwd} / {back})"
                if fwd <= back
                else f"the A/A moves it {there} in {r0:.1%} ({fwd}; {back_again} in {back})"
            )
            out.append(
                Shift(
                    p,
                    p_value,
                    f"{p} {there} in {c} of {n1} outputs ({r1:.1%}), {aa}: {how} ({back_again} in {reverse}); "
                    f"one-sided exact binomial p = {p_value:.2g}",
                )
            )
    return out


@dataclass(frozen=True)
class _Moves:
    """A path's sums as the statistics a reviewer reads."""

    n: int
    size: float
    aa_move: float
    aa_mean: float
    aa_se: float
    shift: float
    se: float
    up_b: int
    down_b: int
    up_aa: int
    down_aa: int

    @classmethod
    def of(cls, acc: list[float]) -> _Moves | None:
        n = acc[_N]
        if n < 2 or not all(math.isfinite(v) for v in acc):
            return None
        shift, aa_mean = acc[_E_SUM] / n, acc[_AA_SUM] / n
        var = max(acc[_E_SQ] / n - shift * shift, 0.0) * n / (n - 1)
        aa_var = max(acc[_AA_SQ] / n - aa_mean * aa_mean, 0.0) * n / (n - 1)
        return cls(
            n=int(n),
            size=acc[_SIZE] / n,
            aa_move=acc[_AA_MOVE] / n,
            aa_mean=aa_mean,
            aa_se=math.sqrt(aa_var / n),
            shift=shift,
            se=math.sqrt(var / n),
            up_b=int(acc[_UP_B]),
            down_b=int(acc[_DOWN_B]),
            up_aa=int(acc[_UP_AA]),
            down_aa=int(acc[_DOWN_AA]),
        )

    def beyond(self, config: CompareConfig) -> bool:
        """Beyond the margins: moved in more than ``abs_threshold`` of the outputs, by more than ``abs_threshold`` of
        the mean size and by more than ``rel_threshold`` of the A/A's mean move per output."""
        d = abs(self.shift)
        return (
            self.up_b + self.down_b > config.abs_threshold * self.n
            and d > config.abs_threshold * self.size
            and d > config.rel_threshold * self.aa_move
        )

    def p_value(self) -> float:
        """Two-sided p-value of the paired z statistic of ``B - A'``."""
        if self.se == 0:
            return 0.0 if self.shift else 1.0
        return math.erfc(abs(self.shift / self.se) / math.sqrt(2))

    def moves(self) -> str:
        """The mean moves of B and A' from A, the A/A standard errors the shift is, and the paired test."""
        if self.aa_se > 0:
            sd = self.aa_se * math.sqrt(self.n)
            errors = f"{abs(self.shift) / self.aa_se:.1f} A/A standard errors (sd of A'-A {sd:.3g})"
        else:
            errors = "the A/A never moves it"
        z = f"{self.shift / self.se:+.1f}" if self.se else "inf"
        means = f"B-A {_fmt(self.aa_mean + self.shift, self.shift)}, A'-A {_fmt(self.aa_mean, self.shift)}"
        return f"{means}: {errors}; paired z = {z}, two-sided p = {self.p_value():.2g}"


def mean_shifts(tally: ShiftTally, resolver: ComparatorResolver, config: CompareConfig) -> list[Shift]:
    """The numbers and list item counts whose mean the candidate shifts beyond the margins, with their p-values."""
    out = []
    for p, acc in sorted(tally.numbers.items()):
        m = _Moves.of(acc)
        if m is None or m.n < config.min_aligned or not m.beyond(config):
            continue
        if not resolver.compare(p, m.size, m.size + abs(m.shift))[0]:
            continue  # within the comparator's tolerance (or an ignored field)
        out.append(
            Shift(
                p,
                m.p_value(),
                f"{p}: mean shifted by {_fmt(m.shift, m.shift)} ({abs(m.shift) / m.size if m.size else math.inf:.1%} "
                f"of its mean size {m.size:.3g}) over {m.n} outputs, {m.moves()}; the candidate moved it up in "
                f"{m.up_b} and down in {m.down_b} outputs, the A/A {m.up_aa} / {m.down_aa}",
            )
        )
    for p, acc in sorted(tally.lengths.items()):
        m = _Moves.of(acc)
        comp = resolver.rule_comparator(p)
        if m is None or m.n < config.min_aligned or not m.beyond(config) or (comp and comp.name == "ignore"):
            continue
        out.append(
            Shift(
                p,
                m.p_value(),
                f"items in {p}: mean count {m.size:.2f} -> {m.size + m.aa_mean + m.shift:.2f}, shifted by "
                f"{_fmt(m.shift, m.shift)} over {m.n} outputs, {m.moves()}; more items in {m.up_b} and fewer in "
                f"{m.down_b} of the candidate's outputs, the A/A {m.up_aa} / {m.down_aa}",
            )
        )
    return out


def shift_reasons(
    tally: ShiftTally,
    n0: int,
    n1: int,
    resolver: ComparatorResolver,
    config: CompareConfig,
    decided: Collection[str] = (),
) -> list[Reason]:
    """``DISTRIBUTION_SHIFT`` (fail): the shifts beyond the margins that are significant at ``alpha / k``, ``k``
    the shifts beyond the margins (Bonferroni). Nothing without baseline-2 or with too few aligned outputs, nor
    for the ``decided`` fields (those that FAIL already: their change is reported as such)."""
    if not (config.distribution_shifts and tally.enabled) or min(n0, n1) < config.min_aligned:
        return []
    found = [*transition_shifts(tally, n0, n1, config), *mean_shifts(tally, resolver, config)]
    shifts = [s for s in found if s.path not in decided]
    if not shifts:
        return []
    alpha = config.distribution_shift_alpha or config.alpha
    level = alpha / len(shifts)
    hits = sorted((s for s in shifts if s.p_value < level), key=lambda s: (s.p_value, s.path))
    if not hits:
        return []
    listed = config.max_fields_listed
    more = f"; and {len(hits) - 5} more" if len(hits) > 5 else ""
    tested = f"{alpha:g}"
    if len(shifts) > 1:
        tested += f"/{len(shifts)} (Bonferroni over the shifts beyond the margins)"
    message = "; ".join(s.message for s in hits[:5]) + more + f" — each significant at {tested}"
    return [
        Reason(
            code="DISTRIBUTION_SHIFT",
            severity="fail",
            message=message,
            fields=list(dict.fromkeys(s.path for s in hits))[:listed],
        )
    ]

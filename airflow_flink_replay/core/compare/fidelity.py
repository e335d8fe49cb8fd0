"""Fidelity: does the baseline replay reproduce what production itself output for the same input?

A replay can be fair (the three variants see the same state, input and policy) and still not faithful: a
tool that returns a placeholder, memory that was not forked right, an input the replay reads differently.
Production's own outputs for the window's records are the reference. :func:`measure_fidelity` ties each
output to its input record — the correlation key and the record's event time, which Flink Agents stamps on
every output (the replay records it as ``_replay.event_time_ms``, production's Kafka sink writes it as the
record timestamp, :func:`~airflow_flink_replay.run_io.production_outputs.export_outputs` adds it) — and counts
the baseline outputs in which no field differs from one of production's outputs for the same record: fields
flattened and compared as the comparison does (its comparators: text by similarity, numbers within their
tolerance and within the band the two baselines showed), with the same ignored paths (and the ``_replay``
block) left out. A pipeline's replay also writes the outputs of intermediate stages (``_replay.stage``):
production's sink holds the last stage's outputs only, so those are left out on every side.

Within one input record outputs are matched as multisets, never by order: an agent that emits several
outputs per record, read back from partitioned topics, returns them in any order (pairing the n-th with the
n-th counted byte-identical outputs as different, and made a correct A/A run INCONCLUSIVE). Production
outputs of no baseline record (the output of the record before the window, which the offsets read at the
savepoint can include, or of records after it) are not counted. When the outputs cannot be tied (no event
times), they are matched by content within the key, and the figure says so (``FidelityStat.tie``).

:func:`with_fidelity` adds the figure to a :class:`ComparisonResult`; below ``CompareConfig.fidelity_floor``
the verdict becomes INCONCLUSIVE (``LOW_FIDELITY``): a gate built on a replay that does not reproduce
production cannot be trusted. An agent that samples (an LLM at a temperature) does not even reproduce
itself: with the second baseline the floor applies to the fidelity relative to how often the baseline equals
baseline-2, measured the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_flink_replay.core.compare.alignment import content_text, event_time_of, flatten_output, stage_of
from airflow_flink_replay.core.compare.comparators import ComparatorResolver
from airflow_flink_replay.core.compare.config import RESERVED_IGNORE, CompareConfig
from airflow_flink_replay.core.compare.differ import Differ, NumericBand
from airflow_flink_replay.core.compare.loading import Source, iter_json_lines, source_name
from airflow_flink_replay.core.compare.paths import MISSING, Flattener, compile_key, key_text
from airflow_flink_replay.core.compare.result import ComparisonResult, FidelityStat, FidelityTie, Reason
from airflow_flink_replay.core.compare.stats import z_one_sided

__all__ = ["FidelityReference", "measure_fidelity", "with_fidelity"]

#: Fields listed as differing most.
TOP_FIELDS = 5
#: Most outputs one unit (an input record, or a key without event times) may have on either side for the
#: outputs left after equal ones paired to be paired by fewest differing paths: that step diffs every such
#: pair (n x m). Above it they pair in content order, one diff each (a key with thousands of outputs, e.g. a
#: compare key that is the same in every output, stays linear).
GREEDY_MAX = 200

#: One side's outputs per key text: (event time of the input record or None, flattened output), ordered as
#: the comparison orders them (by event time and content when all carry an event time, else file order).
Outputs = dict[str, list[tuple[int | None, dict[str, Any]]]]

_TIED = "outputs tied to their input record by key and event time"


def measure_fidelity(
    baseline: Source,
    production: Source,
    *,
    key: str,
    ignore: list[str],
    config: CompareConfig | None = None,
    baseline_2: Source | None = None,
    extra_baselines: Sequence[Source] = (),
) -> FidelityStat:
    """Compare the baseline's outputs with production's own outputs for the same input records.

    :param baseline: the baseline replay's outputs (JSONL).
    :param production: production's outputs for the window (JSONL), read from its output topic.
    :param key: the correlation key's JSONPath (the comparison's).
    :param ignore: the paths the comparison ignored (``ComparisonResult.ignore``; ``$._replay`` always is).
    :param baseline_2: the second baseline's outputs: how often the baseline reproduces *itself*, measured the
        same way, is what production can be expected to match at best when the agent is noisy (an LLM that
        samples): the floor applies to the fidelity relative to it.
    :param extra_baselines: more runs of the baseline (``aa_replays`` > 1): the baseline's agreement with itself
        is pooled over every one of them.
    """
    reference = FidelityReference(
        baseline, key=key, ignore=ignore, config=config, baseline_2=baseline_2, extra_baselines=extra_baselines
    )
    return reference.measure(production)


class FidelityReference:
    """The baseline side of :func:`measure_fidelity`, read once: the baseline's outputs, the differ (with the
    numeric band baseline-2 showed) and the baseline's agreement with baseline-2. :meth:`measure` compares
    production's outputs with it, as often as they are read again (the compare step waits for production)."""

    def __init__(
        self,
        baseline: Source,
        *,
        key: str,
        ignore: list[str],
        config: CompareConfig | None = None,
        baseline_2: Source | None = None,
        extra_baselines: Sequence[Source] = (),
    ) -> None:
        self.config = config or CompareConfig()
        self._getter = compile_key(key)
        self._flattener = Flattener(list(dict.fromkeys([*RESERVED_IGNORE, *ignore])), self.config.list_mode)
        self._base = self._read(baseline)
        others = [self._read(s) for s in ([baseline_2] if baseline_2 is not None else [])]
        others += [self._read(s) for s in extra_baselines] if others else []
        band = None
        if others and self.config.numeric_noise_band:  # numbers within what the other baselines showed: equal
            band = NumericBand(self.config.numeric_noise_quantile)
            # the n-th with the n-th (in event time and content order), as the comparison learns it
            base = _flattened(self._base)
            band.finish(sum(band.learn_runs(base, _flattened(other)) for other in others))
        self._differ = Differ(ComparatorResolver(self.config), band)
        self.baseline_outputs = sum(len(v) for v in self._base.values())
        self.self_rate = None
        if others and self.baseline_outputs:  # pooled over the other baselines: each as often as the baseline
            equal = 0
            for i, other in enumerate(others):
                tie, _ = _tie(self._base, other, "baseline-2" if i == 0 else f"baseline_{i + 2}")
                equal += _agreement(self._base, other, self._differ, tie).equal
            self.self_rate = equal / (self.baseline_outputs * len(others))

    def _read(self, source: Source) -> Outputs:
        """Read, flatten and group one side's outputs by key (outputs without the key are left out, as the
        comparison leaves them out of the alignment, and so are a pipeline's intermediate stages' outputs,
        ``_replay.stage``: production's sink holds the last stage's only)."""
        name = source_name(source)
        flatten = self._flattener.flatten
        out: Outputs = {}
        for lineno, obj in iter_json_lines(source):
            kv = self._getter(obj)
            if kv is MISSING or stage_of(obj) is not None:
                continue
            out.setdefault(key_text(kv), []).append((event_time_of(obj), flatten_output(flatten, obj, name, lineno)))
        for entries in out.values():
            if len(entries) > 1 and all(t is not None for t, _ in entries):
                entries.sort(key=lambda e: (e[0], content_text(e[1])))
        return out

    def measure(self, production: Source) -> FidelityStat:
        """The baseline's outputs against ``production``'s (JSONL)."""
        prod = self._read(production)
        tie, note = _tie(self._base, prod, "production")
        agreement = _agreement(self._base, prod, self._differ, tie)
        n = self.baseline_outputs
        return FidelityStat(
            production=source_name(production),
            baseline_outputs=n,
            production_outputs=sum(len(v) for v in prod.values()),
            aligned=agreement.aligned,
            equal=agreement.equal,
            rate=(agreement.equal / n) if n else None,
            self_rate=self.self_rate,
            fields={path: count for path, count in agreement.differing.most_common(TOP_FIELDS)},
            example_keys=agreement.examples,
            floor=self.config.fidelity_floor,
            tie=tie,
            tie_note=note,
            production_outside=agreement.outside,
        )


def _flattened(outputs: Outputs) -> dict[str, list[tuple[dict[str, Any]]]]:
    """``outputs`` shaped as ``Run.by_key`` (the flattened output first in each entry), for the band."""
    return {k: [(flat,) for _, flat in entries] for k, entries in outputs.items()}


def _tie(base: Outputs, other: Outputs, other_name: str) -> tuple[FidelityTie, str]:
    """How ``base``'s outputs are tied to ``other``'s, and why: per input record (key + event time), unless
    the baseline's outputs carry no event time, or ``other``'s outputs for the baseline's keys that could be
    the window's (no time, or not earlier than the key's first baseline output) meet none of the baseline's
    records — their timestamps are not the input records' — and then by content within the key.

    ``other``'s outputs that are all earlier than the baseline's records of their key are no evidence against
    the tie: that is production before it caught up with the window (the record before the window's output),
    and a content match would pair them with the window's outputs while the compare step waits."""
    n = sum(len(v) for v in base.values())
    untimed = sum(1 for v in base.values() for t, _ in v if t is None)
    if untimed:
        return "content", f"{untimed} of {n} baseline outputs carry no event time (_replay.event_time_ms)"
    could_be = without_time = 0
    for k, entries in other.items():
        mine = base.get(k)
        if not mine:
            continue
        times = {t for t, _ in mine}
        first = min(t for t in times if t is not None)  # all of them: untimed baselines were handled above
        for t, _ in entries:
            if t in times:
                return "input_record", _TIED
            if t is None or t >= first:
                could_be += 1
                without_time += t is None
    if not could_be:
        return "input_record", _TIED
    if without_time == could_be:
        return "content", f"{other_name}'s outputs carry no timestamp to tie them to their input record"
    return "content", (
        f"none of {other_name}'s outputs for the baseline's keys has the event time of a baseline output (its "
        "record timestamps are not the input records')"
    )


@dataclass
class _Agreement:
    """What matching one side's outputs against the baseline's found."""

    aligned: int = 0
    equal: int = 0
    differing: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    #: the other side's outputs in no unit of the baseline (not counted)
    outside: int = 0

    def pair(self, key: str, paths: list[str]) -> None:
        """Count one matched pair that differs in ``paths`` (none: equal)."""
        self.aligned += 1
        if not paths:
            self.equal += 1
            return
        self.differing.update(paths)
        if len(self.examples) < TOP_FIELDS and key not in self.examples:
            self.examples.append(key)


def _agreement(base: Outputs, other: Outputs, differ: Differ, tie: FidelityTie) -> _Agreement:
    """``base``'s outputs matched with ``other``'s unit by unit (an input record, or the key when ``tie`` is
    ``content``), fields compared by ``differ``."""
    found = _Agreement()
    for k in sorted(base):
        units_b, units_o = _units(base[k], tie), _units(other.get(k, []), tie)
        for unit, outs_b in units_b.items():
            _match_unit(k, outs_b, units_o.pop(unit, []), differ, found)
        found.outside += sum(len(v) for v in units_o.values())
    found.outside += sum(len(v) for k, v in other.items() if k not in base)
    return found


def _units(
    entries: list[tuple[int | None, dict[str, Any]]], tie: FidelityTie
) -> dict[int | None, list[dict[str, Any]]]:
    """A key's outputs by unit: by event time, or all in one when tied by content."""
    units: dict[int | None, list[dict[str, Any]]] = {}
    for t, flat in entries:
        units.setdefault(t if tie == "input_record" else None, []).append(flat)
    return units


def _match_unit(
    key: str, outs_b: list[dict[str, Any]], outs_o: list[dict[str, Any]], differ: Differ, found: _Agreement
) -> None:
    """Match one unit's outputs as multisets: equal content first, then the rest of the baseline's greedily
    with the rest of the other side's, fewest differing paths first (a pair with none counts equal). Above
    :data:`GREEDY_MAX` outputs on a side the rest pair in content order instead."""
    if not outs_o:
        return
    rest_o: dict[str, list[dict[str, Any]]] = {}
    for flat in outs_o:
        rest_o.setdefault(content_text(flat), []).append(flat)
    rest_b: list[tuple[str, dict[str, Any]]] = []
    for flat in outs_b:
        text = content_text(flat)
        same = rest_o.get(text)
        if same:
            same.pop()
            found.pair(key, [])
        else:
            rest_b.append((text, flat))
    left_o = sorted(((text, flat) for text, flats in rest_o.items() for flat in flats), key=lambda e: e[0])
    if not rest_b or not left_o:
        return
    if max(len(rest_b), len(left_o)) > GREEDY_MAX:
        for (_, b), (_, o) in zip(sorted(rest_b, key=lambda e: e[0]), left_o, strict=False):
            found.pair(key, sorted(differ(b, o)))
        return
    scored = []
    for i, (_, b) in enumerate(rest_b):
        for j, (_, o) in enumerate(left_o):
            diff = differ(b, o)
            scored.append((len(diff), sum(1.0 - s for s in diff.values()), i, j, diff))
    scored.sort(key=lambda e: e[:4])
    used_b: set[int] = set()
    used_o: set[int] = set()
    for _, _, i, j, diff in scored:
        if i in used_b or j in used_o:
            continue
        used_b.add(i)
        used_o.add(j)
        found.pair(key, sorted(diff))
        if len(used_b) == len(rest_b) or len(used_o) == len(left_o):
            break


#: The floor is applied to the fidelity's one-sided upper confidence bound at this level
#: (:meth:`~airflow_flink_replay.core.compare.result.FidelityStat.relative_upper`).
FIDELITY_ALPHA = 0.05


def with_fidelity(result: ComparisonResult, stat: FidelityStat, *, not_enforced: str | None = None) -> ComparisonResult:
    """``result`` with the fidelity figure, a reason stating it, and the verdict INCONCLUSIVE when it is
    below the configured floor (a FAIL stays FAIL). ``not_enforced``: why the floor does not apply to this
    run (the figure is still reported), e.g. a savepoint taken while production kept running."""
    from airflow_flink_replay.core.compare.engine import decide_verdict

    reasons = [r for r in result.reasons if r.code not in ("FIDELITY", "LOW_FIDELITY")]
    figure = (
        f"{stat.equal} of {stat.baseline_outputs} baseline outputs equal production's own outputs for the same "
        f"input ({stat.rate:.1%})"
        if stat.rate is not None
        else "no baseline outputs to compare with production's"
    )
    figure += _tie_text(stat)
    if stat.baseline_outputs > stat.aligned:
        figure += f"; {stat.baseline_outputs - stat.aligned} have no production output to compare with"
    if stat.fields:
        figure += "; differing most: " + ", ".join(f"{p} ({n})" for p, n in stat.fields.items())
    relative = stat.relative
    if stat.self_rate is not None and stat.self_rate < 1.0 and relative is not None:
        figure += (
            f"; the baseline reproduces itself (baseline-2) in {stat.self_rate:.1%}: relative to the agent's own "
            f"noise the fidelity is {relative:.0%}"
        )
    bound = stat.relative_upper(z_one_sided(FIDELITY_ALPHA))
    if bound is not None and relative is not None and relative < (stat.floor or 0) <= bound:
        figure += f" (up to {bound:.0%} at {1 - FIDELITY_ALPHA:.0%} confidence: within chance of the floor)"
    low = stat.floor is not None and (bound is None or bound < stat.floor)
    if low and not_enforced:
        figure += f"; below the floor {stat.floor:.0%}, not enforced: {not_enforced}"
        low = False
    if low:
        reasons.append(
            Reason(
                code="LOW_FIDELITY",
                severity="inconclusive",
                message=f"the baseline does not reproduce production: {figure}, below the floor "
                f"{stat.floor:.0%}; the replay is not faithful enough to judge the candidate",
                fields=list(stat.fields),
            )
        )
    else:
        reasons.append(Reason(code="FIDELITY", severity="info", message=figure, fields=list(stat.fields)))
    verdict = decide_verdict(reasons)
    return result.model_copy(update={"fidelity": stat, "reasons": reasons, "verdict": verdict})


def _tie_text(stat: FidelityStat) -> str:
    """How the outputs were matched, for the figure: per input record, or by content and why."""
    if stat.tie == "input_record":
        text = ", matched per input record (key + event time)"
        outside = "of other input records (e.g. the record before the window)"
    else:
        text = f", matched by content within each key, not per input record: {stat.tie_note}"
        outside = "of keys the baseline has no output for"
    if stat.production_outside:
        text += f"; {stat.production_outside} production outputs {outside} not counted"
    return text

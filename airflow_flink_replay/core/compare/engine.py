"""The comparison engine: align A, A' and B by key, diff per field, apply the noise rule, decide.

The hot loop does one dict comparison per aligned pair (equal outputs cost almost nothing) and per-field
comparator calls only for values that are not ``==``. deepdiff runs only for the handful of examples shown
in the report.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import json
import math
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeGuard, cast

from airflow_flink_replay.core.compare.alignment import Entry, KeyShape, Run, load_run
from airflow_flink_replay.core.compare.audit import compare_audits
from airflow_flink_replay.core.compare.comparators import ComparatorResolver
from airflow_flink_replay.core.compare.config import RESERVED_IGNORE, CompareConfig, canonical_path, is_under
from airflow_flink_replay.core.compare.content_audits import (
    REASON_CODES,
    ContentTally,
    content_tally,
    judge_content,
    mask_flagged,
)
from airflow_flink_replay.core.compare.differ import Differ, NumericBand, band_for
from airflow_flink_replay.core.compare.loading import MAX_DEPTH, Source, read_audit, source_name
from airflow_flink_replay.core.compare.meaning import MeaningTally, judge_meaning, meaning_tally
from airflow_flink_replay.core.compare.paths import MISSING, Flattener, Group, compile_key, unflatten
from airflow_flink_replay.core.compare.result import (
    AlignmentKind,
    ComparisonResult,
    Counts,
    DifferenceKind,
    Example,
    ExampleValue,
    FieldStat,
    NoisePair,
    Reason,
    ResourceStat,
    Unmatched,
    Verdict,
)
from airflow_flink_replay.core.compare.shifts import ShiftTally, shift_reasons
from airflow_flink_replay.core.compare.spill import SpilledRun, part_of, partition_runs, run_parallel
from airflow_flink_replay.core.compare.stats import newcombe_lower, wilson_lower, z_one_sided
from airflow_flink_replay.core.compare.unmatched import unmatched_reasons
from airflow_flink_replay.core.compare.volatile import (
    VolatileSuspects,
    VolatileTally,
    volatile_fields,
    volatile_reasons,
)
from airflow_flink_replay.exceptions import CompareInputError, PathError

#: Order of reasons of equal severity in the report (the first one is the headline).
REASON_ORDER = (
    "MUST_NOT_CHANGE",
    "FIELD_REGRESSION",
    "OUTPUT_REGRESSION",
    "DISTRIBUTION_SHIFT",
    "TEXT_MEANING",
    "TEXT_JUDGE",
    "NEW_RESOURCE_CALL",
    "SIDE_EFFECT_REGRESSION",
    "SIDE_EFFECT_ARGUMENTS",
    "SIDE_EFFECT_OUTCOME",
    "AUDIT_RULE",
    *REASON_CODES.values(),
    "MISSING_OUTPUTS",
    "EXTRA_OUTPUTS",
    "LOW_FIDELITY",
    "TOO_FEW_ALIGNED",
    "NOISE_TOO_HIGH",
    "NOT_SIGNIFICANT",
)


@dataclass
class AuditSources:
    """Optional side-effect audits of the three runs (baseline and candidate go together).

    Each is a JSONL file, a folder of ``*.jsonl`` files (one per replay worker), a text stream, or a list.
    """

    baseline: Source | list[Source] | None = None
    candidate: Source | list[Source] | None = None
    baseline_2: Source | list[Source] | None = None
    #: the audits of the baselines after baseline-2 (``aa_replays`` > 1), in order: baseline_3, ...
    extra_baselines: list[Source | list[Source]] | None = None
    #: the resources the candidate changed, ``{name: "changed" | "added"}`` (the agent check's): listed with how
    #: the candidate's replay treated their calls (``CHANGED_RESOURCES``)
    changed: Mapping[str, str] | None = None

    @classmethod
    def coerce(cls, value: AuditSources | Mapping[str, Any] | None) -> AuditSources | None:
        """Accept an AuditSources, a mapping with the same keys, or None."""
        if value is None or isinstance(value, AuditSources):
            return value
        unknown = set(value) - {"baseline", "candidate", "baseline_2", "extra_baselines", "changed"}
        if unknown:
            raise ValueError(
                f"audits: unknown keys {sorted(unknown)}; use baseline, candidate, baseline_2, extra_baselines, changed"
            )
        return cls(**value)

    def given(self) -> bool:
        return any(v is not None for v in (self.baseline, self.candidate, self.baseline_2))


def _preview(flat: dict[str, Any], limit: int = 160) -> str:
    text = json.dumps(unflatten(flat), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: Longest value shown in an example (a 575 KB text would make the report as big).
EXAMPLE_VALUE_CHARS = 4000
#: Most fields shown per example (differing fields first).
EXAMPLE_FIELDS = 40


def _json(v: Any) -> str:
    if v is MISSING:
        return "—"
    text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)
    if len(text) > EXAMPLE_VALUE_CHARS:
        return text[:EXAMPLE_VALUE_CHARS] + f"… (+{len(text) - EXAMPLE_VALUE_CHARS:,} characters)"
    return text


def compare_runs(
    baseline: Source,
    candidate: Source,
    baseline_2: Source | None = None,
    key: str = "$.id",
    config: CompareConfig | None = None,
    audits: AuditSources | Mapping[str, Any] | None = None,
    ignore: list[str] | None = None,
    extra_baselines: Sequence[Source] = (),
) -> ComparisonResult:
    """Compare a candidate run B with a baseline run A, calibrated by a second baseline run A'.

    :param baseline: A's outputs (JSONL path or text stream), one output object per line.
    :param candidate: B's outputs.
    :param baseline_2: A' (the baseline run again) to measure noise; without it exact rules apply.
    :param key: JSONPath of the correlation key in each output, e.g. ``$.id``.
    :param config: thresholds and comparators (defaults: :class:`CompareConfig`).
    :param audits: optional side-effect audit files of the runs (:class:`AuditSources` or a mapping).
    :param ignore: extra JSONPaths to ignore (added to ``config.ignore``; ``$._replay`` always is).
    :param extra_baselines: more runs of the baseline (baseline_3, ...; ``aa_replays`` > 1): the noise is measured
        on every pair of baseline runs, pooled (:attr:`ComparisonResult.noise_pairs` shows each pair).
    :raises CompareInputError: unreadable input, bad JSON (with its line number), bad key path.
    """
    started = time.monotonic()
    config = config or CompareConfig()
    try:
        ignore = [canonical_path(p, "--ignore path") for p in ignore or []]
    except PathError as err:
        raise CompareInputError("--ignore", str(err)) from None
    ignore_all = list(dict.fromkeys([*RESERVED_IGNORE, *config.ignore, *(ignore or [])]))
    if ignore:
        config = config.model_copy(update={"ignore": list(dict.fromkeys([*config.ignore, *ignore]))})
    extras = list(extra_baselines or ())
    if extras and baseline_2 is None:
        raise CompareInputError("extra baselines", "more baselines need baseline-2 first (give it as --baseline-2)")
    audit_sources = AuditSources.coerce(audits)
    if (
        audit_sources is not None
        and audit_sources.given()
        and (audit_sources.baseline is None or audit_sources.candidate is None)
    ):
        raise CompareInputError(
            "audits", "give both the baseline and the candidate audit (baseline-2 audit is optional)"
        )
    try:
        getter = compile_key(key)
    except PathError as err:
        raise CompareInputError("--key", str(err)) from None
    set_paths = [r.path for r in config.fields if r.comparator in ("set", "multiset")]
    flattener = Flattener(
        ignore_all,
        config.list_mode,
        set_paths=set_paths,
        map_paths=config.map_paths,
        map_min_keys=config.map_min_keys,
        max_depth=MAX_DEPTH,
    )

    # Loading builds millions of small objects and no cycles: the cyclic GC would only rescan them.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _compare(
            _Inputs(baseline, candidate, baseline_2, extras), key, config, audit_sources, getter, flattener, started
        )
    except RecursionError:  # a safety net: lines and outputs too deep are refused with their line before this
        raise CompareInputError(
            "inputs",
            "a value nested too deeply to compare (e.g. a list kept whole by a set rule). Fix: flatten it in the "
            "agent's output, or leave it out with --ignore",
        ) from None
    finally:
        if gc_was_enabled:
            gc.enable()


@dataclass(frozen=True)
class _Inputs:
    """The runs to compare: A, B, A' and any more runs of the baseline."""

    baseline: Source
    candidate: Source
    baseline_2: Source | None
    extras: list[Source]


def _baseline_name(i: int) -> str:
    """The name of the ``i``-th baseline run: baseline, baseline_2, baseline_3, ..."""
    return "baseline" if i == 0 else f"baseline_{i + 1}"


def noise_pairs(n_runs: int) -> list[tuple[int, int]]:
    """The noise pairs of ``n_runs`` baseline runs: the baseline with each other run, baseline-2 first.

    Each shares the baseline with the candidate's pair (baseline, candidate), as the single A/A pair does: what
    is peculiar to the baseline's own run moves the noise and the candidate's rate alike. Pairs of the other
    runs among themselves would not (measured with the noisy demo's agent, ``benchmarks/noisy_gate.py --simulate
    300 --aa-replays 3 --margins default``: no fewer INCONCLUSIVE verdicts, and more false FAILs when counted as
    independent)."""
    return [(0, j) for j in range(1, n_runs)]


def _compare(
    inputs: _Inputs,
    key: str,
    config: CompareConfig,
    audit_sources: AuditSources | None,
    getter: Any,
    flattener: Flattener,
    started: float,
) -> ComparisonResult:
    """Load and align in memory, or partitioned on disk when the inputs are large; then conclude."""
    parts = _spill_parts(config, inputs.baseline, inputs.candidate, inputs.baseline_2, *inputs.extras)
    if not parts:
        aligned = _align_in_memory(inputs, getter, flattener, config)
        return _conclude(aligned, key, config, audit_sources, flattener, started)
    parts *= _workers(config)  # each process holds one partition at a time: together, what one would hold
    with tempfile.TemporaryDirectory(prefix="afr-compare-", dir=config.spill_dir) as tmp:
        aligned = _align_spilled(inputs, key, flattener, config, Path(tmp), parts)
        return _conclude(aligned, key, config, audit_sources, flattener, started)


@dataclass
class _Aligned:
    """The runs (their counts, paths and samples), the alignment, and how to fetch outputs for examples."""

    run_a: Run
    run_b: Run
    run_a2: Run | None
    al: _Alignment
    diff: Differ
    resolver: ComparatorResolver
    keys_ab: Set[str]
    n_keys: int
    #: the runs restricted to some keys (all of them in memory; reloaded from disk when spilled)
    example_runs: Callable[[set[str]], tuple[Run, Run | None, Run]]
    #: the baseline runs after baseline-2 (their names and sources)
    extra_runs: list[Run] = field(default_factory=list)


def _align_in_memory(inputs: _Inputs, getter: Any, flattener: Flattener, config: CompareConfig) -> _Aligned:
    run_a = load_run("baseline", inputs.baseline, getter, flattener)
    run_b = load_run("candidate", inputs.candidate, getter, flattener)
    run_a2 = load_run("baseline_2", inputs.baseline_2, getter, flattener) if inputs.baseline_2 is not None else None
    extras = [load_run(_baseline_name(i + 2), src, getter, flattener) for i, src in enumerate(inputs.extras)]
    baselines = [run_a, *([run_a2] if run_a2 is not None else []), *extras]
    changed = flattener.collapse_maps()
    _collapse_maps([*baselines, run_b], changed)
    resolver = ComparatorResolver(config)
    pairs = noise_pairs(len(baselines))
    band = None
    if pairs and config.numeric_noise_band:
        band = band_for(config)
        band.finish(sum(band.learn_runs(baselines[i].by_key, baselines[j].by_key) for i, j in pairs))
    suspects = VolatileSuspects()
    if config.volatile_noise_rate is not None:
        for i, j in pairs:
            suspects.learn_runs(baselines[i].by_key, baselines[j].by_key)
    tally = VolatileTally(suspects.suspects(config.volatile_noise_rate, config.min_aligned))
    diff = Differ(resolver, band, flattener.typed_paths(changed))
    al = _Alignment(max_listed=config.max_listed, volatile=tally, content=content_tally(config))
    al.meaning = meaning_tally(config, run_a)
    al.shifts = ShiftTally.of(config, run_a2 is not None, run_a.paths)
    al = _align(run_a, run_b, run_a2, diff, config.max_examples, al)
    for i, j in pairs[1:]:
        _align_pair(baselines, (i, j), diff, al)
    keys_ab = run_a.by_key.keys() | run_b.by_key.keys()
    n_keys = len(keys_ab | (run_a2.by_key.keys() if run_a2 is not None else set()))
    return _Aligned(
        run_a, run_b, run_a2, al, diff, resolver, keys_ab, n_keys, lambda _keys: (run_a, run_a2, run_b), extras
    )


def _spill_parts(config: CompareConfig, *sources: Source | None) -> int:
    """How many partitions to spill the runs into (0: compare in memory)."""
    if config.spill_above_mb is None:
        return 0
    sizes = [os.path.getsize(s) if _is_file(s) else None for s in sources if s is not None]
    total = sum(size or 0 for size in sizes)
    if config.spill_above_mb > 0 and (None in sizes or total <= config.spill_above_mb * 2**20):
        return 0  # small enough, or streams (their size is unknown)
    return max(2, math.ceil(total / (config.spill_part_mb * 2**20)))


def _is_file(source: Source) -> TypeGuard[str | os.PathLike[str]]:
    return isinstance(source, str | os.PathLike) and os.path.isfile(source)


def _align_spilled(
    inputs: _Inputs, key: str, flattener: Flattener, config: CompareConfig, folder: Path, parts: int
) -> _Aligned:
    """Partition the runs by key on disk (:mod:`.spill`), learn the band, then align partition by partition."""
    runs: list[tuple[str, Source]] = [("baseline", inputs.baseline), ("candidate", inputs.candidate)]
    if inputs.baseline_2 is not None:
        runs.append(("baseline_2", inputs.baseline_2))
    runs += [(_baseline_name(i + 2), src) for i, src in enumerate(inputs.extras)]
    workers = _workers(config)
    spilled_runs = partition_runs(runs, key, flattener, folder, parts, workers)
    sa, sb = spilled_runs[0], spilled_runs[1]
    sa2 = spilled_runs[2] if inputs.baseline_2 is not None else None
    extras = spilled_runs[3:]
    changed = flattener.collapse_maps()
    _collapse_maps([s.run for s in spilled_runs], changed, samples=True)

    def load(i: int, keys: set[str] | None = None) -> tuple[Run, Run | None, Run]:
        return _load_part(sa, sb, sa2, changed, i, keys)

    # contiguous groups of partitions, in order: merged in that order, the outcome is the sequential one
    groups = [list(g) for g in _split(range(parts), min(workers, parts))]
    band = None
    suspects = VolatileSuspects()
    baselines = [sa, *([sa2] if sa2 is not None else []), *extras]
    if sa2 is not None and (config.numeric_noise_band or config.volatile_noise_rate is not None):
        learned = run_parallel(_band_of_parts, [(baselines, changed, g, config) for g in groups])
        for _, _, part_suspects in learned:
            suspects.merge(part_suspects)
        if config.numeric_noise_band:
            band = band_for(config)
            for part_band, _, _ in learned:
                band.merge(part_band)
            band.finish(sum(pairs for _, pairs, _ in learned))
    resolver = ComparatorResolver(config)
    typed = flattener.typed_paths(changed)
    diff = Differ(resolver, band, typed)
    tally = VolatileTally(suspects.suspects(config.volatile_noise_rate, config.min_aligned))
    al = _Alignment(max_listed=config.max_listed, volatile=tally, content=content_tally(config))
    keys_ab: set[str] = set()
    n_keys = 0
    kept: dict[str, _KeyOutputs] = {}
    for part_al, comparator_of, assigned, part_keys, part_n, part_kept in run_parallel(
        _align_parts, [(sa, sb, sa2, changed, g, config, band, tally.suspects, typed, extras) for g in groups]
    ):
        al.merge(part_al, config.max_examples)
        diff.merge(comparator_of, assigned)
        keys_ab |= part_keys
        n_keys += part_n
        kept.update(part_kept)

    def example_runs(keys: set[str]) -> tuple[Run, Run | None, Run]:
        if keys <= kept.keys():  # always: the outputs of every key that was an example are kept
            return _kept_runs(sa, sb, sa2, {k: kept[k] for k in keys})
        runs = [load(i, keys) for i in sorted({part_of(k, parts) for k in keys})]
        return _merged([r[0] for r in runs]), _merged([r[1] for r in runs]), _merged([r[2] for r in runs])  # type: ignore[return-value]

    return _Aligned(
        sa.run,
        sb.run,
        sa2.run if sa2 else None,
        al,
        diff,
        resolver,
        keys_ab,
        n_keys,
        example_runs,
        [s.run for s in extras],
    )


def _workers(config: CompareConfig) -> int:
    """Processes that share a spilled comparison (this one included): ``spill_workers``, else one per CPU."""
    return config.spill_workers or os.cpu_count() or 1


def _split(items: range, n: int) -> list[range]:
    """``items`` in ``n`` contiguous slices of (nearly) equal size, in order."""
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (i < extra)
        out.append(items[start:end])
        start = end
    return out


def _load_part(
    sa: SpilledRun, sb: SpilledRun, sa2: SpilledRun | None, changed: dict[str, str], i: int, keys: set[str] | None
) -> tuple[Run, Run | None, Run]:
    ra, rb = sa.load(i, keys), sb.load(i, keys)
    ra2 = sa2.load(i, keys) if sa2 is not None else None
    _collapse_maps([r for r in (ra, rb, ra2) if r is not None], changed)
    return ra, ra2, rb


def _band_of_parts(
    baselines: list[SpilledRun], changed: dict[str, str], parts: list[int], config: CompareConfig
) -> tuple[NumericBand, int, VolatileSuspects]:
    """What partitions ``parts`` of the baseline runs teach the numeric band (the candidate is not needed), how
    many pairs they align, and the volatile suspects' counts; one partition in memory at a time."""
    band = band_for(config)
    suspects = VolatileSuspects()
    pairs = 0
    for i in parts:
        runs = [s.load(i) for s in baselines]
        _collapse_maps(runs, changed)
        for x, y in noise_pairs(len(runs)):
            if config.numeric_noise_band:
                pairs += band.learn_runs(runs[x].by_key, runs[y].by_key)
            if config.volatile_noise_rate is not None:
                suspects.learn_runs(runs[x].by_key, runs[y].by_key)
        del runs  # before the next partition is loaded
    return band, pairs, suspects


#: The outputs of one key in A, A' (None without it) and B.
_KeyOutputs = tuple[list[Entry], list[Entry] | None, list[Entry]]


def _kept_runs(
    sa: SpilledRun, sb: SpilledRun, sa2: SpilledRun | None, kept: dict[str, _KeyOutputs]
) -> tuple[Run, Run | None, Run]:
    """The runs restricted to the kept keys, as :meth:`SpilledRun.load` would give them."""
    ra, rb = Run(name=sa.run.name, source=sa.run.source), Run(name=sb.run.name, source=sb.run.source)
    ra2 = Run(name=sa2.run.name, source=sa2.run.source) if sa2 is not None else None
    for k, (la, la2, lb) in kept.items():
        ra.by_key[k] = la
        rb.by_key[k] = lb
        if ra2 is not None and la2:
            ra2.by_key[k] = la2
    return ra, ra2, rb


#: Tie-breaks of examples count from ``i * _TIE_STRIDE`` in partition ``i``: earlier partitions stay earlier
#: wherever they were aligned.
_TIE_STRIDE = 2**40


def _align_parts(
    sa: SpilledRun,
    sb: SpilledRun,
    sa2: SpilledRun | None,
    changed: dict[str, str],
    parts: list[int],
    config: CompareConfig,
    band: NumericBand | None,
    suspects: frozenset[str] = frozenset(),
    typed: frozenset[str] | None = None,
    extras: list[SpilledRun] | None = None,
) -> tuple[_Alignment, dict[str, str], set[str], set[str], int, dict[str, _KeyOutputs]]:
    """Align partitions ``parts`` one after the other: the alignment, the differ's comparator choices (see
    :meth:`Differ.merge`), the keys of A and B, how many keys in all, and the outputs of the keys that are
    examples (at least those the merged alignment keeps)."""
    diff = Differ(ComparatorResolver(config), band, typed)
    al = _Alignment(max_listed=config.max_listed, volatile=VolatileTally(suspects), content=content_tally(config))
    al.meaning = meaning_tally(config, sa.run)
    al.shifts = ShiftTally.of(config, sa2 is not None, sa.run.paths)
    keys_ab: set[str] = set()
    n_keys = 0
    kept: dict[str, _KeyOutputs] = {}
    for i in parts:
        ra, ra2, rb = _load_part(sa, sb, sa2, changed, i, None)
        al.tie = itertools.count(i * _TIE_STRIDE)
        _align(ra, rb, ra2, diff, config.max_examples, al)
        if extras and ra2 is not None:
            more = [s.load(i) for s in extras]
            _collapse_maps(more, changed)
            baselines = [ra, ra2, *more]
            for pair in noise_pairs(len(baselines))[1:]:
                _align_pair(baselines, pair, diff, al)
            del more, baselines
        for heap in al.heaps.values():  # the outputs of this partition's examples, so none is read again
            for _, k, _ in heap:
                if k not in kept and k in ra.by_key:
                    kept[k] = (ra.by_key[k], ra2.by_key.get(k, []) if ra2 is not None else None, rb.by_key[k])
        part_keys = ra.by_key.keys() | rb.by_key.keys()
        keys_ab |= part_keys
        n_keys += len(part_keys | (ra2.by_key.keys() if ra2 is not None else set()))
        del ra, ra2, rb, part_keys
    in_heaps = {k for heap in al.heaps.values() for _, k, _ in heap}
    return al, diff.comparator_of, diff.assigned, keys_ab, n_keys, {k: kept[k] for k in in_heaps}


def _merged(runs: list[Any]) -> Run | None:
    if not runs or runs[0] is None:
        return None
    out = Run(name=runs[0].name, source=runs[0].source)
    for r in runs:
        out.by_key.update(r.by_key)
    return out


def _conclude(
    aligned: _Aligned,
    key: str,
    config: CompareConfig,
    audit_sources: AuditSources | None,
    flattener: Flattener,
    started: float,
) -> ComparisonResult:
    """Field statistics, decision, audits and examples from an alignment: the result."""
    run_a, run_b, run_a2, al, diff = aligned.run_a, aligned.run_b, aligned.run_a2, aligned.al, aligned.diff
    al.fold_pairs()
    volatile = volatile_fields(
        al.noise_counts,
        al.aligned_noise,
        al.volatile,
        config.volatile_noise_rate,
        config.min_aligned,
        aligned.resolver.must_not_change,
    )
    outputs = _outputs_stat(al, run_a2 is not None, config, z_one_sided(config.alpha), volatile)
    fields, z = _field_stats(al, run_a, run_b, run_a2, aligned.resolver, diff, config, outputs, volatile)
    if _noisy_beyond(outputs):
        outputs = _outputs_stat(al, run_a2 is not None, config, z, volatile)
    counts = _counts(al, run_a, run_b, run_a2, aligned.n_keys)
    _with_pair_rates(fields, al)
    reasons = _decide(_Facts(fields, outputs, counts, run_a, run_a2 is not None, config, key))
    reasons.extend(_alignment_reasons(al.shape, key))
    failed = {f.path for f in fields if f.status in ("regression", "changed")}
    reasons.extend(shift_reasons(al.shifts, al.aligned_noise, al.aligned_cand, aligned.resolver, config, failed))
    content, content_reasons = judge_content(al.content, al.aligned_noise if run_a2 else None, al.aligned_cand, config)
    reasons.extend(content_reasons)
    meaning, meaning_reasons = judge_meaning(al.meaning, al.aligned_noise if run_a2 else None, al.aligned_cand, config)
    reasons.extend(meaning_reasons)
    reasons.extend(_unmatched_rules(config, flattener, run_a.paths | run_b.paths | (run_a2.paths if run_a2 else set())))
    resources: list[ResourceStat] = []
    if audit_sources is not None and audit_sources.given():
        resources, audit_reasons = _audits(audit_sources, counts, aligned.keys_ab, config)
        reasons.extend(audit_reasons)
    shown = _shown_fields(fields, al.heaps)
    ex_a, ex_a2, ex_b = aligned.example_runs({k for f in shown for _, k, _ in al.heaps[f.path]})
    examples = _examples(shown, al.heaps, ex_a, ex_a2, ex_b, diff, config)
    verdict = decide_verdict(reasons)
    listed = fields[: config.max_fields_listed]
    omitted: Counter[str] = Counter(f.status for f in fields[config.max_fields_listed :])
    result = ComparisonResult(
        verdict=verdict,
        mode="noise_calibrated" if run_a2 is not None else "exact",
        method=describe_method(config, run_a2 is not None),
        reasons=reasons,
        fields=listed,
        fields_omitted=dict(omitted),
        outputs=outputs,
        resources=resources,
        content_audits=content,
        meaning=meaning,
        counts=counts,
        key=key,
        ignore=flattener.ignore,
        noise_pairs=[pair.stat(name) for name, pair in al.pair_stats],
        inputs=_inputs(run_a, run_a2, run_b, audit_sources, aligned.extra_runs),
        examples=examples,
        missing=[_unmatched(k, i, e) for k, i, e in al.missing],
        extra=[_unmatched(k, i, e) for k, i, e in al.extra],
        config=config,
        duration_s=round(time.monotonic() - started, 3),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    return mask_flagged(result, al.content)  # a value the audits flagged is masked wherever the result shows it


@dataclass
class _PairNoise:
    """What one more pair of baseline runs (beyond baseline and baseline-2) adds to the noise."""

    aligned: int = 0
    differing: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    kinds: Counter[tuple[str, str]] = field(default_factory=Counter)
    missing: int = 0
    extra: int = 0

    def merge(self, other: _PairNoise) -> None:
        for name in ("aligned", "differing", "missing", "extra"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.counts.update(other.counts)
        self.kinds.update(other.kinds)

    def stat(self, name: str) -> NoisePair:
        return NoisePair(
            pair=name,
            aligned=self.aligned,
            differing=self.differing,
            rate=self.differing / self.aligned if self.aligned else 0.0,
            missing=self.missing,
            extra=self.extra,
        )


@dataclass
class _Alignment:
    """What aligning A, A' and B by key found: difference counts per path and the unmatched outputs."""

    noise_counts: Counter[str] = field(default_factory=Counter)
    cand_counts: Counter[str] = field(default_factory=Counter)
    cand_only: Counter[str] = field(default_factory=Counter)
    #: per (path, kind of difference: :attr:`Differ.kinds`), noise and candidate outputs with one, and the sum of
    #: the candidate's similarity losses (a number's relative move)
    noise_kinds: Counter[tuple[str, str]] = field(default_factory=Counter)
    cand_kinds: Counter[tuple[str, str]] = field(default_factory=Counter)
    cand_moves: dict[tuple[str, str], float] = field(default_factory=dict)
    aligned_noise: int = 0
    aligned_cand: int = 0
    #: the first ``max_listed`` missing and extra outputs (for the report) and how many there are
    max_listed: int = 50
    missing: list[tuple[str, int, Entry]] = field(default_factory=list)
    extra: list[tuple[str, int, Entry]] = field(default_factory=list)
    n_missing: int = 0
    n_extra: int = 0
    missing_a2: int = 0
    extra_a2: int = 0
    #: outputs with a difference in any field: noise pairs, candidate pairs, candidate pairs where A = A'
    noise_any: int = 0
    cand_any: int = 0
    cand_any_only: int = 0
    #: per path, a min-heap of the most telling examples: ((candidate-only, 1 - similarity, -order), key, index)
    heaps: dict[str, list[tuple[tuple[int, float, int], str, int]]] = field(default_factory=dict)
    tie: Iterator[int] = field(default_factory=itertools.count)
    #: how many outputs A's keys have, and how keys with several were aligned
    shape: KeyShape = field(default_factory=KeyShape)
    #: the volatile suspects' counts (:mod:`.volatile`)
    volatile: VolatileTally = field(default_factory=VolatileTally)
    #: the content audits' counts (:mod:`.content_audits`; None when they are off)
    content: ContentTally | None = None
    #: the meaning rule's counts and the text judge's samples (:mod:`.meaning`; None when both are off)
    meaning: MeaningTally | None = None
    #: the distribution shifts' counts (:mod:`.shifts`)
    shifts: ShiftTally = field(default_factory=ShiftTally)
    #: the pairs of baseline runs beyond the first (``aa_replays`` > 1), by their runs' indexes
    #: (:func:`noise_pairs`), until :meth:`fold_pairs`
    pairs: dict[tuple[int, int], _PairNoise] = field(default_factory=dict)
    #: per pair of baseline runs, first pair first, once folded; and the weight of a noise count in a test
    pair_stats: list[tuple[str, _PairNoise]] = field(default_factory=list)
    noise_weight: float = 1.0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["tie"]  # a counter does not pickle on every Python; it only orders examples while aligning
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.tie = itertools.count()

    def merge(self, other: _Alignment, max_ex: int) -> None:
        """Add the alignment of the partitions after ours (as if one walk had seen them all)."""
        self.noise_counts.update(other.noise_counts)
        self.cand_counts.update(other.cand_counts)
        self.cand_only.update(other.cand_only)
        self.noise_kinds.update(other.noise_kinds)
        self.add_kinds(other.cand_kinds, other.cand_moves)
        for name in ("aligned_noise", "aligned_cand", "missing_a2", "extra_a2", "noise_any", "cand_any"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.cand_any_only += other.cand_any_only
        self.missing = (self.missing + other.missing)[: self.max_listed]
        self.extra = (self.extra + other.extra)[: self.max_listed]
        self.n_missing += other.n_missing
        self.n_extra += other.n_extra
        self.shape.merge(other.shape)
        self.volatile.merge(other.volatile)
        self.shifts.merge(other.shifts)
        if self.content is not None and other.content is not None:
            self.content.merge(other.content)
        if self.meaning is None or other.meaning is None:
            self.meaning = self.meaning or other.meaning
        else:
            self.meaning.merge(other.meaning)
        for path, heap in other.heaps.items():
            for item in heap:
                self.keep_example(path, item, max_ex)
        for runs, pair in other.pairs.items():
            self.pairs.setdefault(runs, _PairNoise()).merge(pair)

    def fold_pairs(self) -> None:
        """Pool the noise of every pair of baseline runs into the noise counts, keeping each pair's own.

        The rates are the pooled ones: a better estimate of the noise than one pair's. The pairs share the
        baseline's run, so their pooled counts are not as many independent pairs as they number; the
        significance tests count them as one pair's (:attr:`noise_weight` = 1 / pairs): more pairs steady the
        noise rate without claiming a precision the shared run does not give (counted as independent, or as
        the ``r/2`` pairs a U-statistic over ``r`` runs is worth, the noisy demo's A/A FAILed more often with
        three pairs than with one)."""
        if not self.pairs:
            return
        first = _PairNoise(
            self.aligned_noise,
            self.noise_any,
            Counter(self.noise_counts),
            Counter(self.noise_kinds),
            self.missing_a2,
            self.extra_a2,
        )
        self.pair_stats = [
            (_pair_name((0, 1)), first),
            *((_pair_name(runs), self.pairs[runs]) for runs in sorted(self.pairs, key=lambda ij: (ij[1], ij[0]))),
        ]
        for _, pair in self.pair_stats[1:]:
            self.aligned_noise += pair.aligned
            self.noise_any += pair.differing
            self.noise_counts.update(pair.counts)
            self.noise_kinds.update(pair.kinds)
            self.missing_a2 += pair.missing
            self.extra_a2 += pair.extra
        self.noise_weight = 1 / len(self.pair_stats)
        self.shifts.noise_weight = self.noise_weight  # the rules that pooled the same pairs weigh them alike
        for tally in (self.content, self.meaning):
            if tally is not None:
                tally.noise_weight = self.noise_weight
        self.pairs = {}

    def add_kinds(self, counts: Mapping[tuple[str, str], int], moves: Mapping[tuple[str, str], float]) -> None:
        """Count candidate differences by kind, with their summed similarity losses."""
        self.cand_kinds.update(counts)
        for pk, move in moves.items():
            self.cand_moves[pk] = self.cand_moves.get(pk, 0.0) + move

    def add_missing(self, k: str, i: int, e: Entry) -> None:
        self.n_missing += 1
        if len(self.missing) < self.max_listed:
            self.missing.append((k, i, e))

    def add_extra(self, k: str, i: int, e: Entry) -> None:
        self.n_extra += 1
        if len(self.extra) < self.max_listed:
            self.extra.append((k, i, e))

    def keep_example(self, path: str, item: tuple[tuple[int, float, int], str, int], max_ex: int) -> None:
        h = self.heaps.setdefault(path, [])
        if len(h) < max_ex:
            heapq.heappush(h, item)
        elif item[0] > h[0][0]:
            heapq.heapreplace(h, item)


def _pair_name(runs: tuple[int, int]) -> str:
    """``(0, 2)`` -> ``"baseline ~ baseline_3"``."""
    return " ~ ".join(_baseline_name(i) for i in runs)


def _align_pair(baselines: list[Run], runs: tuple[int, int], diff: Differ, al: _Alignment) -> None:
    """One more pair of baseline runs: its differences are noise like baseline vs baseline-2's, counted apart
    (:class:`_PairNoise`) until :meth:`_Alignment.fold_pairs` pools them. The rules that read values learn
    from it too (the volatile fields' shapes, the distribution shifts' transitions, the content audits' and
    the meaning rule's A/A findings)."""
    pair = al.pairs.setdefault(runs, _PairNoise())
    run_x, run_y = baselines[runs[0]], baselines[runs[1]]
    tally = al.volatile if al.volatile.suspects else None
    audit = al.content.add if al.content is not None else None
    meaning = al.meaning.add if al.meaning is not None else None
    shifts = al.shifts if al.shifts.enabled else None
    empty: list[Entry] = []
    y_keys = run_y.by_key
    for k, lx in run_x.by_key.items():
        ly = y_keys.get(k, empty)
        pair.missing += max(len(lx) - len(ly), 0)
        pair.extra += max(len(ly) - len(lx), 0)
        for i in range(min(len(lx), len(ly))):
            fx, fy = lx[i][0], ly[i][0]
            pair.aligned += 1
            noise = diff(fx, fy)
            if diff.texts:
                if audit is not None:
                    audit(k, i, fx, fy, False, diff.texts)
                if meaning is not None:
                    meaning(k, i, fx, fy, False, diff.texts)
            if not noise:
                continue
            pair.differing += 1
            pair.counts.update(noise.keys())
            if tally is not None:
                tally.add_noise(fx, fy, noise)
            if shifts is not None:
                shifts.add_noise(fx, fy, noise)
            if diff.kinds:
                pair.kinds.update(diff.kinds.items())
    pair.extra += sum(len(ly) for k, ly in y_keys.items() if k not in run_x.by_key)


def _align(run_a: Run, run_b: Run, run_a2: Run | None, diff: Differ, max_ex: int, al: _Alignment) -> _Alignment:
    """Walk A's keys once: diff each output with its counterpart in A' (noise) and in B (candidate).

    Adds to ``al`` (a partitioned comparison calls it once per partition)."""
    tie = al.tie
    tally = al.volatile if al.volatile.suspects else None
    audit = al.content.add if al.content is not None else None
    meaning = al.meaning.add if al.meaning is not None else None
    shifts = al.shifts if al.shifts.enabled else None
    empty: list[Entry] = []
    b_keys = run_b.by_key
    a2_keys = run_a2.by_key if run_a2 is not None else None
    for k, la in run_a.by_key.items():
        lb = b_keys.get(k, empty)
        la2 = a2_keys.get(k, empty) if a2_keys is not None else None
        al.shape.add(la)
        for i, ea in enumerate(la):
            fa = ea[0]
            noise: dict[str, float] | None = None
            if la2 is not None:
                if i < len(la2):
                    al.aligned_noise += 1
                    noise = diff(fa, la2[i][0])
                    if diff.texts:  # the text rules read only the strings that changed
                        if audit is not None:
                            audit(k, i, fa, la2[i][0], False, diff.texts)
                        if meaning is not None:
                            meaning(k, i, fa, la2[i][0], False, diff.texts)
                    if noise:
                        al.noise_counts.update(noise.keys())
                        al.noise_any += 1
                        if tally is not None:
                            tally.add_noise(fa, la2[i][0], noise)
                        if shifts is not None:
                            shifts.add_noise(fa, la2[i][0], noise)
                        if diff.kinds:
                            al.noise_kinds.update(diff.kinds.items())
                else:
                    al.missing_a2 += 1
            if i >= len(lb):
                al.add_missing(k, i, ea)
                continue
            al.aligned_cand += 1
            cd = diff(fa, lb[i][0])
            if diff.texts:
                if audit is not None:
                    audit(k, i, fa, lb[i][0], True, diff.texts)
                if meaning is not None:
                    meaning(k, i, fa, lb[i][0], True, diff.texts)
            if shifts is not None:
                shifts.add_candidate(fa, lb[i][0], la2[i][0] if la2 is not None and noise is not None else None, cd)
            if not cd:
                continue
            al.cand_any += 1
            al.cand_any_only += not noise
            al.cand_counts.update(cd.keys())
            if tally is not None:
                fa2 = la2[i][0] if la2 is not None and noise is not None else None
                tally.add_candidate(fa, lb[i][0], fa2, cd, noise)
            if diff.kinds:
                pks = list(diff.kinds.items())
                al.add_kinds(Counter(pks), {pk: 1.0 - cd[pk[0]] for pk in pks})
            for p, score in cd.items():
                only = noise is None or p not in noise
                if only:
                    al.cand_only[p] += 1
                if max_ex:  # ties: the earliest output wins
                    al.keep_example(p, ((1 if only else 0, 1.0 - score, -next(tie)), k, i), max_ex)
        if len(lb) > len(la):
            for j in range(len(la), len(lb)):
                al.add_extra(k, j, lb[j])
        if la2 is not None and len(la2) > len(la):
            al.extra_a2 += len(la2) - len(la)
    for k, lb in b_keys.items():
        if k not in run_a.by_key:
            for j, e in enumerate(lb):
                al.add_extra(k, j, e)
    if a2_keys is not None:
        al.extra_a2 += sum(len(la2) for k, la2 in a2_keys.items() if k not in run_a.by_key)
    return al


def _collapse_maps(runs: list[Run], changed: dict[str, str], samples: bool = False) -> None:
    """Re-key every output's leaves below a map keyed by ids to the collapsed path (one :class:`Group` per
    collapsed path and output), so a change anywhere below counts once per output."""
    if not changed:
        return
    for run in runs:
        for entries in run.by_key.values():
            for idx, (flat, line, order) in enumerate(entries):
                if any(p in changed for p in flat):
                    entries[idx] = (_collapsed(flat, changed), line, order)
        if samples:
            run.samples = [_collapsed(flat, changed) for flat in run.samples]
        run.paths = {changed.get(p, p) for p in run.paths}


def _collapsed(flat: dict[str, Any], changed: dict[str, str]) -> dict[str, Any]:
    new: dict[str, Any] = {}
    for p, v in flat.items():
        c = changed.get(p)
        if c is None:
            new[p] = v
        else:
            group = new.get(c)
            if group is None:
                group = new[c] = Group()
            group[p] = v
    return new


def _outputs_stat(
    al: _Alignment, has_noise: bool, config: CompareConfig, z: float, volatile: Mapping[str, float] | None = None
) -> FieldStat:
    """The output-level rate: outputs with a difference in any field but the ``volatile`` ones, judged against
    the noise like a field (at ``z``: one of the tests the Bonferroni correction counts, when the baselines
    differed too). It never makes the comparison INCONCLUSIVE for noise (the fields say which of them is too
    noisy)."""
    noise_any, cand_any, cand_only = al.noise_any, al.cand_any, al.cand_any_only
    if volatile:
        noise_any, cand_any, cand_only = al.volatile.outputs_counts(volatile.keys())
    stat = _field_stat(
        "$",
        f"any field but the {len(volatile)} volatile ones" if volatile else "any field",
        noise_any if has_noise else None,
        al.aligned_noise if has_noise else None,
        cand_any,
        al.aligned_cand,
        cand_only,
        False,
        config,
        z,
        al.noise_weight,
    )
    if stat.status == "too_noisy":
        stat.status = "ok"
    return stat


def _unmatched_rules(config: CompareConfig, flattener: Flattener, paths: set[str]) -> list[Reason]:
    """A rule that matches no field of any input is reported, never silently ignored."""
    sample = ", ".join(sorted(paths)[:4]) or "none"
    reasons = []
    unmatched = [
        ("--ignore", p)
        for i, p in enumerate(flattener.ignore)
        if i not in flattener.ignore_hits and p not in RESERVED_IGNORE
    ]
    unmatched += [("field rule", r.path) for r in config.fields if not any(is_under(r.regex, q) for q in paths)]
    for what, path in unmatched:
        reasons.append(
            Reason(
                code="RULE_MATCHES_NOTHING",
                severity="info",
                message=f"{what} {path} matches no field in any input (fields look like: {sample}); check its spelling",
                fields=[path],
            )
        )
    return reasons


#: Field statuses, worst first (the report's order of fields).
_STATUS_RANK = {
    "changed": 0,
    "regression": 0,
    "not_significant": 1,
    "too_noisy": 2,
    "ok": 3,
    "improved": 4,
    "volatile": 5,
}


def _field_stats(
    al: _Alignment,
    run_a: Run,
    run_b: Run,
    run_a2: Run | None,
    resolver: ComparatorResolver,
    diff: Differ,
    config: CompareConfig,
    outputs: FieldStat | None = None,
    volatile: Mapping[str, float] | None = None,
) -> tuple[list[FieldStat], float]:
    """One :class:`FieldStat` per leaf path seen in any run, worst first, and the ``z`` they were tested at
    (Bonferroni over the fields beyond the thresholds in which the baselines differed, and ``outputs``, the
    outputs-level rate, unless it is the same test as one of theirs: the same counts). A ``volatile`` field
    is judged on its changes of shape only (present on one side, or of another JSON type)."""
    has_noise = run_a2 is not None
    all_paths = sorted(run_a.paths | run_b.paths | (run_a2.paths if run_a2 else set()))
    kinds = _kinds_by_path(al, diff.band, has_noise)
    volatile = volatile or {}

    def judged(p: str, z: float) -> FieldStat:
        noise, cand, only = (
            al.volatile.shape_counts() if p in volatile else (al.noise_counts, al.cand_counts, al.cand_only)
        )
        stat = _with_band(
            _field_stat(
                p,
                diff.comparator_of.get(p) or resolver.describe(p, _sample(p, run_a, run_b)),
                noise[p] if has_noise else None,
                al.aligned_noise if has_noise else None,
                cand[p],
                al.aligned_cand,
                only[p],
                resolver.must_not_change(p),
                config,
                z,
                al.noise_weight,
            ),
            diff.band,
        )
        stat = _with_kinds(stat, kinds.get(p, []), al, config, z)
        if p in volatile:  # its values are noise; a change of its shape (or other evidence) is not
            stat.volatile_rate = volatile[p]
            stat.status = "volatile" if stat.status in ("ok", "too_noisy") else stat.status
        return stat

    z = z_one_sided(config.alpha)
    fields = [judged(p, z) for p in all_paths]
    tested = tested_fields(fields, has_noise)
    beyond = [(f.noise_diffs, f.candidate_diffs) for f in fields if _noisy_beyond(f)]
    if tested and outputs is not None and tested_fields([outputs], has_noise):
        tested += (outputs.noise_diffs, outputs.candidate_diffs) not in beyond
    if tested > 1:  # Bonferroni: the chance that noise alone makes any of them regress stays within alpha
        z = z_one_sided(config.alpha / tested)
        fields = [judged(f.path, z) if _noisy_beyond(f) else f for f in fields]
    fields.sort(key=lambda f: (_STATUS_RANK[f.status], -max(f.delta, 0.0), -f.candidate_rate, f.path))
    return fields, z


def tested_fields(fields: list[FieldStat], has_noise: bool) -> int:
    """How many fields the significance test decides among noise: those whose candidate rate is beyond the
    noise rule's thresholds *and* in which the two baselines differed (noise-calibrated comparison only).
    Each of them is tested at ``alpha / tested`` so that with a noisy agent — where several fields differ
    between any two runs — an A/A comparison still FAILs with chance at most ``alpha``, not ``alpha`` per
    noisy field. A field the baselines never disagreed on has no measured noise to be fooled by, and one real
    change drives several such fields together (a label, the summary that names it, the tool it calls): they
    keep ``alpha``."""
    if not has_noise:
        return 0
    return sum(1 for f in fields if _noisy_beyond(f))


def _noisy_beyond(f: FieldStat) -> bool:
    return f.status in ("regression", "not_significant") and bool(f.noise_diffs)


def _with_band(stat: FieldStat, band: NumericBand | None) -> FieldStat:
    if band is not None and stat.path in band.bands:
        stat.noise_band_abs, stat.noise_band_rel = band.bands[stat.path]
    return stat


def _kinds_by_path(al: _Alignment, band: NumericBand | None, has_noise: bool) -> dict[str, list[DifferenceKind]]:
    """Per path, its kinds of difference (changes of JSON type, magnitude ranges), most frequent first."""
    out: dict[str, list[DifferenceKind]] = {}
    for p, kind in sorted(al.cand_kinds.keys() | al.noise_kinds.keys()):
        x1 = al.cand_kinds[p, kind]
        stat = DifferenceKind(kind=kind, candidate_diffs=x1, noise_diffs=al.noise_kinds[p, kind] if has_noise else None)
        if not kind.startswith("type "):
            stat.mean_move = al.cand_moves.get((p, kind), 0.0) / x1 if x1 else None
            bands = band.band_of_kind(p, kind) if band is not None else None
            if bands is not None:
                stat.band_abs, stat.band_rel = bands
        out.setdefault(p, []).append(stat)
    for stats in out.values():
        stats.sort(key=lambda k: (-k.candidate_diffs, -(k.noise_diffs or 0), k.kind))
    return out


def _with_kinds(
    stat: FieldStat, kinds: list[DifferenceKind], al: _Alignment, config: CompareConfig, z: float
) -> FieldStat:
    """Attach the field's kinds of difference, and judge its changes of JSON type on their own: a change of type is
    its own kind of difference, which a field's overall rate can hide (a noisy text that the candidate also empties
    to null). Any transition counts, against the A/A's changes of type, by the same noise rule as the field."""
    stat.kinds = kinds
    types = [k for k in kinds if k.kind.startswith("type ")]
    x1 = sum(k.candidate_diffs for k in types)
    if not x1:
        return stat
    x0 = sum(k.noise_diffs or 0 for k in types) if stat.noise_n is not None else None
    typed = _field_stat(stat.path, "type", x0, stat.noise_n, x1, al.aligned_cand, 0, False, config, z, al.noise_weight)
    stat.type_lower_bound = typed.lower_bound
    escalate = {"regression": ("ok", "too_noisy", "not_significant"), "not_significant": ("ok", "too_noisy")}
    if stat.status in escalate.get(typed.status, ()):
        stat.status = typed.status
    return stat


def _alignment_reasons(shape: KeyShape, key: str) -> list[Reason]:
    """An info reason when the key is not unique per output in the baseline: outputs of a key are then paired
    per input record (or by their order within the key), and the reader should know which."""
    if not shape.several:
        return []
    return [Reason(code="ALIGNMENT", severity="info", message=f"{shape.not_unique(key)}: {shape.alignment()}")]


def _alignment_kind(shape: KeyShape) -> AlignmentKind:
    """``Counts.alignment`` from the baseline's key shape."""
    if not shape.several:
        return "unique_key"
    return cast(AlignmentKind, next(iter(shape.by))) if len(shape.by) == 1 else "mixed"


def _counts(al: _Alignment, run_a: Run, run_b: Run, run_a2: Run | None, n_keys: int) -> Counts:
    has_noise = run_a2 is not None
    return Counts(
        baseline=run_a.count,
        baseline_2=run_a2.count if run_a2 else None,
        candidate=run_b.count,
        keys=n_keys,
        aligned_candidate=al.aligned_cand,
        aligned_noise=al.aligned_noise if has_noise else None,
        missing_in_candidate=al.n_missing,
        extra_in_candidate=al.n_extra,
        missing_in_baseline_2=al.missing_a2 if has_noise else None,
        extra_in_baseline_2=al.extra_a2 if has_noise else None,
        noise_pairs=max(len(al.pair_stats), 1) if has_noise else None,
        unkeyed={r.name: r.unkeyed for r in (run_a, run_a2, run_b) if r is not None and r.unkeyed},
        alignment=_alignment_kind(al.shape),
    )


def _audits(
    sources: AuditSources, counts: Counts, output_keys: Any, config: CompareConfig
) -> tuple[list[ResourceStat], list[Reason]]:
    """Read the audits, record their sizes in ``counts`` and compare them."""
    assert sources.baseline is not None and sources.candidate is not None
    aud_a = read_audit(sources.baseline)
    aud_b = read_audit(sources.candidate)
    aud_a2 = read_audit(sources.baseline_2) if sources.baseline_2 is not None else None
    counts.audit_records = {"baseline": len(aud_a), "candidate": len(aud_b)}
    if aud_a2 is not None:
        counts.audit_records["baseline_2"] = len(aud_a2)
    for i, extra in enumerate(sources.extra_baselines or []):  # counted; their calls' noise is not compared (yet)
        counts.audit_records[_baseline_name(i + 2)] = len(read_audit(extra))
    return compare_audits(aud_a, aud_b, aud_a2, output_keys, config, changed=sources.changed)


def decide_verdict(reasons: list[Reason]) -> Verdict:
    """FAIL if any reason fails, else INCONCLUSIVE if any is inconclusive, else PASS; sorts ``reasons``."""
    severity_rank = {"fail": 0, "inconclusive": 1, "info": 2}
    code_rank = {code: i for i, code in enumerate(REASON_ORDER)}
    reasons.sort(key=lambda r: (severity_rank[r.severity], code_rank.get(r.code, len(code_rank))))
    if any(r.severity == "fail" for r in reasons):
        return "FAIL"
    if any(r.severity == "inconclusive" for r in reasons):
        return "INCONCLUSIVE"
    return "PASS"


def _inputs(
    run_a: Run, run_a2: Run | None, run_b: Run, audits: AuditSources | None, extras: list[Run]
) -> dict[str, str | None]:
    inputs: dict[str, str | None] = {
        "baseline": run_a.source,
        "baseline_2": run_a2.source if run_a2 else None,
        "candidate": run_b.source,
    }
    for run in extras:
        inputs[run.name] = run.source
    if audits is not None and audits.given() and audits.baseline is not None and audits.candidate is not None:
        inputs["baseline_audit"] = _names(audits.baseline)
        inputs["candidate_audit"] = _names(audits.candidate)
        inputs["baseline_2_audit"] = _names(audits.baseline_2)
        for i, extra in enumerate(audits.extra_baselines or []):
            inputs[f"{_baseline_name(i + 2)}_audit"] = _names(extra)
    return inputs


def _with_pair_rates(fields: list[FieldStat], al: _Alignment) -> None:
    """Each field's noise rate in every pair of baseline runs (the report's spread), when there are several."""
    if len(al.pair_stats) < 2:
        return
    for f in fields:
        if f.noise_n is None or f.volatile_rate is not None:
            continue
        f.noise_pair_rates = [
            round(pair.counts.get(f.path, 0) / pair.aligned, 4) if pair.aligned else 0.0 for _, pair in al.pair_stats
        ]


def _names(source: Source | list[Source] | None) -> str | None:
    if source is None:
        return None
    if isinstance(source, list):
        return ", ".join(source_name(s) for s in source)
    return source_name(source)


def _sample(path: str, *runs: Run) -> Any:
    """A value of ``path`` from the first outputs that have it (to name the comparator of equal fields)."""
    for run in runs:
        flats = run.samples or (e[0] for entries in itertools.islice(run.by_key.values(), 200) for e in entries)
        for flat in flats:
            if path in flat:
                return flat[path]
    return MISSING


def _unmatched(k: str, i: int, e: Entry) -> Unmatched:
    return Unmatched(key=k, index=i, line=e[1], preview=_preview(e[0]))


def describe_method(config: CompareConfig, has_noise: bool) -> str:
    """The rule and statistic in words (shown in the report and summary.json)."""
    if has_noise:
        return (
            "Noise-calibrated (Diffy's rule): for each field, the noise rate is how often baseline and "
            "baseline-2 differ, the candidate rate how often baseline and candidate differ. A field regresses "
            f"when the candidate rate exceeds the noise rate by more than {config.abs_threshold:.1%} (absolute) "
            f"and by more than {config.rel_threshold:.0%} of the noise rate (relative), and the one-sided "
            f"{1 - config.alpha:.0%} lower bound of (candidate rate - noise rate) by Newcombe's hybrid "
            "Wilson-score interval is above zero; when k tests are beyond the thresholds where the baselines "
            "differed too (fields, and the outputs-level rate unless it equals a field's), each is tested at "
            f"{config.alpha:g}/k (Bonferroni), so that the noise of several fields together makes a false FAIL "
            f"no likelier than {config.alpha:g}. Fields noisier than "
            f"{config.max_noise_rate:.0%} cannot decide (INCONCLUSIVE)"
            + (
                f"; identifiers whose values differ in at least {config.volatile_noise_rate:.0%} of baseline pairs "
                "(request ids, hosts, timestamps) are volatile: left out, only their presence and JSON type judged."
                if config.volatile_noise_rate is not None
                else "."
            )
        )
    return (
        "Exact rules (no baseline-2, so the noise cannot be measured and is taken as zero): a field FAILs when "
        f"it differs under its comparator in more than {config.exact_max_rate:.1%} of aligned outputs. Run the "
        "baseline twice (--baseline-2) to calibrate against noise."
    )


def _field_stat(
    path: str,
    comparator: str,
    x0: int | None,
    n0: int | None,
    x1: int,
    n1: int,
    only: int,
    must_not_change: bool,
    config: CompareConfig,
    z: float,
    noise_weight: float = 1.0,
) -> FieldStat:
    """The noise rule for one rate: ``x1`` of ``n1`` candidate pairs differ, ``x0`` of ``n0`` baseline pairs
    (None: exact rules); ``noise_weight`` scales the baseline counts in the bound when they pool pairs of runs
    that share a run (:meth:`_Alignment.fold_pairs`)."""
    p1 = x1 / n1 if n1 else 0.0
    st = FieldStat(
        path=path,
        comparator=comparator,
        candidate_diffs=x1,
        candidate_n=n1,
        candidate_rate=p1,
        delta=p1,
        candidate_only_diffs=only,
        must_not_change=must_not_change,
    )
    if must_not_change and only > 0:
        st.status = "changed"
    if x0 is not None and n0 is not None:
        p0 = x0 / n0 if n0 else 0.0
        st.noise_diffs, st.noise_n, st.noise_rate = x0, n0, p0
        st.delta = p1 - p0
        st.relative = st.delta / p0 if p0 > 0 else None
        w = noise_weight
        st.lower_bound = newcombe_lower(x1, n1, x0 * w, n0 * w, z) if n1 and n0 else None  # type: ignore[arg-type]
        if st.status == "changed":
            return st
        beyond = st.delta > config.abs_threshold and (p0 == 0 or st.delta > config.rel_threshold * p0)
        if beyond:
            st.status = "regression" if (st.lower_bound or -1.0) > 0 else "not_significant"
        elif p0 > config.max_noise_rate:
            st.status = "too_noisy"
    else:
        st.lower_bound = wilson_lower(x1, n1, z) if n1 else None
        if st.status != "changed" and p1 > config.exact_max_rate:
            st.status = "regression"
    return st


@dataclass(frozen=True)
class _Facts:
    """What the decision rules look at."""

    fields: list[FieldStat]
    outputs: FieldStat
    counts: Counts
    run_a: Run
    has_noise: bool
    config: CompareConfig
    key: str


def _no_noise_baseline(f: _Facts) -> list[Reason]:
    if f.has_noise:
        return []
    return [
        Reason(
            code="NO_NOISE_BASELINE",
            severity="info",
            message="no baseline-2: noise not measured, exact rules applied (every difference counts)",
        )
    ]


def _unkeyed_outputs(f: _Facts) -> list[Reason]:
    return [
        Reason(
            code="UNKEYED_OUTPUTS",
            severity="info",
            message=f"{n} {name} outputs have no value at {f.key} and were not aligned",
        )
        for name, n in f.counts.unkeyed.items()
    ]


def _too_few_aligned(f: _Facts) -> list[Reason]:
    c, need = f.counts, f.config.min_aligned
    if c.aligned_candidate >= need and not (f.has_noise and (c.aligned_noise or 0) < need):
        return []
    hint = ""
    if c.unkeyed:
        hint = f"; {sum(c.unkeyed.values())} outputs lack the key {f.key} — is the key path right?"
    noise = f" and {c.aligned_noise} noise" if f.has_noise else ""
    return [
        Reason(
            code="TOO_FEW_ALIGNED",
            severity="inconclusive",
            message=f"only {c.aligned_candidate} candidate{noise} outputs aligned; at least {need} needed{hint}",
        )
    ]


def _base(f: _Facts) -> int:
    return max(f.run_a.count - f.run_a.unkeyed, 1)


def _per_pair(pooled: int | None, pairs: int | None) -> int | None:
    """A count pooled over the pairs of baseline runs, as one pair's (the mean, rounded): the exact tests compare
    it with the candidate's over the same window."""
    return None if pooled is None else round(pooled / (pairs or 1))


def _missing_outputs(f: _Facts) -> list[Reason]:
    c = f.counts
    x0 = _per_pair(c.missing_in_baseline_2, c.noise_pairs)
    return unmatched_reasons("missing", c.missing_in_candidate, x0, _base(f), f.config)


def _extra_outputs(f: _Facts) -> list[Reason]:
    c = f.counts
    return unmatched_reasons(
        "extra", c.extra_in_candidate, _per_pair(c.extra_in_baseline_2, c.noise_pairs), _base(f), f.config
    )


def _changed_msg(fields: list[FieldStat], config: CompareConfig) -> str:
    return "; ".join(f"{s.path} changed for {s.candidate_only_diffs} outputs but must not change" for s in fields)


def _regressed_msg(fields: list[FieldStat], config: CompareConfig) -> str:
    more = f"; and {len(fields) - 5} more" if len(fields) > 5 else ""
    return "; ".join(_field_msg(s) for s in fields[:5]) + more


def _unsure_msg(fields: list[FieldStat], config: CompareConfig) -> str:
    return (
        "; ".join(_field_msg(s) for s in fields[:5])
        + " — above the thresholds but not significant with this many outputs; replay more records"
    )


def _noisy_msg(fields: list[FieldStat], config: CompareConfig) -> str:
    return (
        "; ".join(f"{s.path} differs between the baseline runs in {s.noise_rate or 0:.0%}" for s in fields[:5])
        + f" (> {config.max_noise_rate:.0%}): a regression there cannot be seen; compare it as text "
        "(fields: comparator 'text') or ignore it"
    )


def _outputs_changed(f: _Facts) -> list[Reason]:
    """The output-level rate decides only what no field decides: a change spread thinly over many fields."""
    o = f.outputs
    if o.status == "regression" and not any(s.status in ("regression", "changed") for s in f.fields):
        changed = sum(1 for s in f.fields if s.candidate_diffs)
        message = (
            f"{_field_msg(o).replace('$ differs in', 'outputs with any change:', 1)}; no single field shows it: "
            f"the change is spread over {changed} fields"
        )
        return [Reason(code="OUTPUT_REGRESSION", severity="fail", message=message, fields=["$"])]
    if o.status == "not_significant" and all(s.status == "ok" for s in f.fields):
        return [
            Reason(
                code="NOT_SIGNIFICANT",
                severity="inconclusive",
                message=_field_msg(o).replace("$ differs in", "outputs with any change:", 1)
                + " — above the thresholds but not significant with this many outputs; replay more records",
                fields=["$"],
            )
        ]
    return []


def _volatile_fields(f: _Facts) -> list[Reason]:
    """The volatile fields, listed with their rates (:mod:`.volatile`); they decide nothing."""
    return volatile_reasons(f.fields, f.config.max_fields_listed, f.config.volatile_noise_rate)


@dataclass(frozen=True)
class _StatusRule:
    """Fields with this status give one reason with this code and severity."""

    status: str
    code: str
    severity: Literal["fail", "inconclusive"]
    message: Callable[[list[FieldStat], CompareConfig], str]

    def __call__(self, f: _Facts) -> list[Reason]:
        hits = [s for s in f.fields if s.status == self.status]
        if not hits:
            return []
        return [
            Reason(
                code=self.code,
                severity=self.severity,
                message=self.message(hits, f.config),
                fields=[s.path for s in hits[: f.config.max_fields_listed]],
            )
        ]


#: The decision: each rule looks at the facts and gives zero or more reasons, in this order.
DECISION_RULES: tuple[Callable[[_Facts], list[Reason]], ...] = (
    _no_noise_baseline,
    _unkeyed_outputs,
    _too_few_aligned,
    _missing_outputs,
    _extra_outputs,
    _StatusRule("changed", "MUST_NOT_CHANGE", "fail", _changed_msg),
    _StatusRule("regression", "FIELD_REGRESSION", "fail", _regressed_msg),
    _StatusRule("not_significant", "NOT_SIGNIFICANT", "inconclusive", _unsure_msg),
    _StatusRule("too_noisy", "NOISE_TOO_HIGH", "inconclusive", _noisy_msg),
    _outputs_changed,
    _volatile_fields,
)


def _decide(facts: _Facts) -> list[Reason]:
    """The reasons of the output comparison: every rule of :data:`DECISION_RULES` in turn."""
    return [reason for rule in DECISION_RULES for reason in rule(facts)]


def _field_msg(f: FieldStat) -> str:
    if f.volatile_rate is not None:
        return (
            f"{f.path} (volatile: its values differ in {f.volatile_rate:.0%} of baseline pairs) is missing or of "
            f"another JSON type in {f.candidate_rate:.1%} of outputs vs noise {f.noise_rate or 0.0:.1%} "
            f"(+{f.delta:.1%}, lower bound {f.lower_bound if f.lower_bound is not None else float('nan'):+.1%})"
        ) + _kinds_msg(f)
    if f.noise_rate is None:
        rate = f"{f.path} differs in {f.candidate_rate:.1%} of outputs ({f.candidate_diffs}/{f.candidate_n})"
        return rate + _kinds_msg(f)
    return (
        f"{f.path} differs in {f.candidate_rate:.1%} of outputs vs noise {f.noise_rate:.1%} "
        f"(+{f.delta:.1%}, lower bound {f.lower_bound if f.lower_bound is not None else float('nan'):+.1%})"
    ) + _kinds_msg(f)


def _kinds_msg(f: FieldStat, top: int = 2) -> str:
    """The evidence of the field's most frequent kinds of difference: the change of JSON type and how often, the
    magnitude range and how far the candidate moved there against how far the A/A moves."""
    parts = []
    for k in [k for k in f.kinds if k.candidate_diffs > (k.noise_diffs or 0)][:top]:
        if k.kind.startswith("type "):
            text = f"{k.kind} in {k.candidate_diffs / max(f.candidate_n, 1):.1%} of outputs"
            text += f" ({k.candidate_diffs}/{f.candidate_n})"
            if k.noise_diffs is not None and f.noise_n:
                text += f" vs {k.noise_diffs / f.noise_n:.1%} between the baselines"
            if f.type_lower_bound is not None:
                text += f" (all changes of type: lower bound {f.type_lower_bound:+.1%})"
        else:
            text = f"{k.kind}: {k.candidate_diffs} outputs moved by {k.mean_move or 0.0:.0%} on average"
            if k.band_rel is not None and k.band_abs is not None:
                text += f" where the A/A moves by <= {k.band_rel:.1%} or <= {k.band_abs:.3g}"
            if k.noise_diffs is not None:
                text += f" (A/A beyond that: {k.noise_diffs})"
        parts.append(text)
    return "; " + "; ".join(parts) if parts else ""


#: Outputs larger than this (characters of text) get no deepdiff account (it may diff long texts line by line).
STRUCTURE_MAX_CHARS = 200_000


def _structure(deepdiff: Any, fa: dict[str, Any], fb: dict[str, Any]) -> str:
    """deepdiff's account of A vs B for the reader, bounded; never fails a comparison."""
    size = sum(len(v) for flat in (fa, fb) for v in flat.values() if isinstance(v, str))
    if size > STRUCTURE_MAX_CHARS:
        return "(outputs too large for a structural diff; see the fields above)"
    try:
        text = str(deepdiff(unflatten(fa), unflatten(fb), ignore_order=True).pretty())
    except Exception:  # deepdiff is only for the reader
        return ""
    return text if len(text) <= EXAMPLE_VALUE_CHARS else text[:EXAMPLE_VALUE_CHARS] + "…"


def _shown_fields(fields: list[FieldStat], heaps: dict[str, Any]) -> list[FieldStat]:
    """The fields that get side-by-side examples: the worst eight that differ."""
    return [f for f in fields if f.candidate_diffs and f.path in heaps][:8]


def _examples(
    fields: list[FieldStat],
    heaps: dict[str, list[tuple[tuple[int, float, int], str, int]]],
    run_a: Run,
    run_a2: Run | None,
    run_b: Run,
    diff: Differ,
    config: CompareConfig,
) -> list[Example]:
    from deepdiff import DeepDiff

    out: list[Example] = []
    for f in fields:
        for (only, badness, _), k, i in sorted(heaps[f.path], reverse=True):
            ea = run_a.by_key[k][i]
            eb = run_b.by_key[k][i]
            ea2 = None
            if run_a2 is not None:
                l2 = run_a2.by_key.get(k, [])
                ea2 = l2[i] if i < len(l2) else None
            cd = diff(ea[0], eb[0])
            kinds = diff.kinds  # of the candidate's differences (the next call replaces it)
            nd = diff(ea[0], ea2[0]) if ea2 is not None else {}
            paths = list(dict.fromkeys([*ea[0], *eb[0], *(ea2[0] if ea2 else {})]))
            if len(paths) > EXAMPLE_FIELDS:  # differing fields first
                paths = list(dict.fromkeys([*cd, *nd, *paths]))[:EXAMPLE_FIELDS]
            values = [
                ExampleValue(
                    path=p,
                    baseline=_json(ea[0].get(p, MISSING)),
                    baseline_2=_json(ea2[0].get(p, MISSING)) if ea2 is not None else None,
                    candidate=_json(eb[0].get(p, MISSING)),
                    candidate_differs=p in cd,
                    noise_differs=p in nd,
                    similarity=round(cd.get(p, nd.get(p, 1.0)), 3),
                    kind=kinds.get(p) if p in cd else None,
                )
                for p in paths
            ]
            structure = _structure(DeepDiff, ea[0], eb[0])
            lines = {"baseline": ea[1], "candidate": eb[1]}
            if ea2 is not None:
                lines["baseline_2"] = ea2[1]
            out.append(
                Example(
                    key=k,
                    index=i,
                    field=f.path,
                    similarity=round(1.0 - badness, 3),
                    candidate_only=bool(only) and run_a2 is not None,
                    values=values,
                    structure=structure,
                    lines=lines,
                )
            )
    return out

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
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_flink_replay.core.compare.alignment import Entry, Run, load_run
from airflow_flink_replay.core.compare.audit import compare_audits
from airflow_flink_replay.core.compare.comparators import ComparatorResolver
from airflow_flink_replay.core.compare.config import RESERVED_IGNORE, CompareConfig
from airflow_flink_replay.core.compare.loading import CompareInputError, Source, read_audit, source_name
from airflow_flink_replay.core.compare.paths import MISSING, Flattener, PathError, compile_key, unflatten
from airflow_flink_replay.core.compare.result import (
    ComparisonResult,
    Counts,
    Example,
    ExampleValue,
    FieldStat,
    Reason,
    ResourceStat,
    Unmatched,
)
from airflow_flink_replay.core.compare.stats import newcombe_lower, wilson_lower, z_one_sided

#: Order of reasons of equal severity in the report (the first one is the headline).
REASON_ORDER = (
    "MUST_NOT_CHANGE",
    "FIELD_REGRESSION",
    "NEW_RESOURCE_CALL",
    "SIDE_EFFECT_REGRESSION",
    "AUDIT_RULE",
    "MISSING_OUTPUTS",
    "EXTRA_OUTPUTS",
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

    @classmethod
    def coerce(cls, value: AuditSources | Mapping[str, Any] | None) -> AuditSources | None:
        """Accept an AuditSources, a mapping with the same keys, or None."""
        if value is None or isinstance(value, AuditSources):
            return value
        unknown = set(value) - {"baseline", "candidate", "baseline_2"}
        if unknown:
            raise ValueError(f"audits: unknown keys {sorted(unknown)}; use baseline, candidate, baseline_2")
        return cls(**value)

    def given(self) -> bool:
        return any(v is not None for v in (self.baseline, self.candidate, self.baseline_2))


class _Diff:
    """Per-pair field differ with cached comparator choice."""

    def __init__(self, resolver: ComparatorResolver) -> None:
        self.resolver = resolver
        self.comparator_of: dict[str, str] = {}

    def __call__(self, fa: dict[str, Any], fb: dict[str, Any]) -> dict[str, float]:
        if fa == fb:
            return {}
        out: dict[str, float] = {}
        compare = self.resolver.compare
        names = self.comparator_of
        for p, va in fa.items():
            vb = fb.get(p, MISSING)
            if va == vb and type(va) is type(vb):
                continue
            differs, score, name = compare(p, va, vb)
            names[p] = name
            if differs:
                out[p] = score
        for p, vb in fb.items():
            if p not in fa:
                differs, score, name = compare(p, MISSING, vb)
                names.setdefault(p, name)
                if differs:
                    out[p] = score
        return out


def _preview(flat: dict[str, Any], limit: int = 160) -> str:
    text = json.dumps(unflatten(flat), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json(v: Any) -> str:
    if v is MISSING:
        return "—"
    if isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)


def compare_runs(
    baseline: Source,
    candidate: Source,
    baseline_2: Source | None = None,
    key: str = "$.id",
    config: CompareConfig | None = None,
    audits: AuditSources | Mapping[str, Any] | None = None,
    ignore: list[str] | None = None,
) -> ComparisonResult:
    """Compare a candidate run B with a baseline run A, calibrated by a second baseline run A'.

    :param baseline: A's outputs (JSONL path or text stream), one output object per line.
    :param candidate: B's outputs.
    :param baseline_2: A' (the baseline run again) to measure noise; without it exact rules apply.
    :param key: JSONPath of the correlation key in each output, e.g. ``$.id``.
    :param config: thresholds and comparators (defaults: :class:`CompareConfig`).
    :param audits: optional side-effect audit files of the runs (:class:`AuditSources` or a mapping).
    :param ignore: extra JSONPaths to ignore (added to ``config.ignore``; ``$._replay`` always is).
    :raises CompareInputError: unreadable input, bad JSON (with its line number), bad key path.
    """
    started = time.monotonic()
    config = config or CompareConfig()
    ignore_all = list(dict.fromkeys([*RESERVED_IGNORE, *config.ignore, *(ignore or [])]))
    if ignore:
        config = config.model_copy(update={"ignore": list(dict.fromkeys([*config.ignore, *ignore]))})
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
    set_paths = [r.path for r in config.fields if r.comparator == "set"]
    flattener = Flattener(ignore_all, config.list_mode, set_paths=set_paths)

    # Loading builds millions of small objects and no cycles: the cyclic GC would only rescan them.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _compare(
            baseline, candidate, baseline_2, key, config, audit_sources, getter, flattener, ignore_all, started
        )
    finally:
        if gc_was_enabled:
            gc.enable()


def _compare(
    baseline: Source,
    candidate: Source,
    baseline_2: Source | None,
    key: str,
    config: CompareConfig,
    audit_sources: AuditSources | None,
    getter: Any,
    flattener: Flattener,
    ignore_all: list[str],
    started: float,
) -> ComparisonResult:
    run_a = load_run("baseline", baseline, getter, flattener)
    run_b = load_run("candidate", candidate, getter, flattener)
    run_a2 = load_run("baseline_2", baseline_2, getter, flattener) if baseline_2 is not None else None

    resolver = ComparatorResolver(config)
    diff = _Diff(resolver)
    noise_counts: Counter[str] = Counter()
    cand_counts: Counter[str] = Counter()
    cand_only: Counter[str] = Counter()
    aligned_noise = aligned_cand = 0
    missing: list[tuple[str, int, Entry]] = []
    extra: list[tuple[str, int, Entry]] = []
    missing_a2 = extra_a2 = 0
    max_ex = config.max_examples
    heaps: dict[str, list[tuple[tuple[int, float, int], str, int]]] = {}
    tie = itertools.count()
    empty: list[Entry] = []
    b_keys = run_b.by_key
    a2_keys = run_a2.by_key if run_a2 is not None else None

    for k, la in run_a.by_key.items():
        lb = b_keys.get(k, empty)
        la2 = a2_keys.get(k, empty) if a2_keys is not None else None
        for i, ea in enumerate(la):
            fa = ea[0]
            noise: dict[str, float] | None = None
            if la2 is not None:
                if i < len(la2):
                    aligned_noise += 1
                    noise = diff(fa, la2[i][0])
                    if noise:
                        noise_counts.update(noise.keys())
                else:
                    missing_a2 += 1
            if i >= len(lb):
                missing.append((k, i, ea))
                continue
            aligned_cand += 1
            cd = diff(fa, lb[i][0])
            if not cd:
                continue
            cand_counts.update(cd.keys())
            for p, score in cd.items():
                only = noise is None or p not in noise
                if only:
                    cand_only[p] += 1
                if max_ex:
                    item = ((1 if only else 0, 1.0 - score, -next(tie)), k, i)  # ties: earliest wins
                    h = heaps.setdefault(p, [])
                    if len(h) < max_ex:
                        heapq.heappush(h, item)
                    elif item[0] > h[0][0]:
                        heapq.heapreplace(h, item)
        if len(lb) > len(la):
            extra.extend((k, j, lb[j]) for j in range(len(la), len(lb)))
        if la2 is not None and len(la2) > len(la):
            extra_a2 += len(la2) - len(la)
    for k, lb in b_keys.items():
        if k not in run_a.by_key:
            extra.extend((k, j, e) for j, e in enumerate(lb))
    if a2_keys is not None:
        for k, la2 in a2_keys.items():
            if k not in run_a.by_key:
                extra_a2 += len(la2)

    has_noise = run_a2 is not None
    z = z_one_sided(config.alpha)
    all_paths = run_a.paths | run_b.paths | (run_a2.paths if run_a2 else set())
    fields: list[FieldStat] = []
    for p in sorted(all_paths):
        fields.append(
            _field_stat(
                p,
                diff.comparator_of.get(p) or resolver.describe(p, _sample(p, run_a, run_b)),
                noise_counts[p] if has_noise else None,
                aligned_noise if has_noise else None,
                cand_counts[p],
                aligned_cand,
                cand_only[p],
                resolver.must_not_change(p),
                config,
                z,
            )
        )
    rank = {"changed": 0, "regression": 0, "not_significant": 1, "too_noisy": 2, "ok": 3, "improved": 4}
    fields.sort(key=lambda f: (rank[f.status], -max(f.delta, 0.0), -f.candidate_rate, f.path))

    counts = Counts(
        baseline=run_a.count,
        baseline_2=run_a2.count if run_a2 else None,
        candidate=run_b.count,
        keys=len(run_a.by_key.keys() | b_keys.keys() | (a2_keys.keys() if a2_keys else set())),
        aligned_candidate=aligned_cand,
        aligned_noise=aligned_noise if has_noise else None,
        missing_in_candidate=len(missing),
        extra_in_candidate=len(extra),
        missing_in_baseline_2=missing_a2 if has_noise else None,
        extra_in_baseline_2=extra_a2 if has_noise else None,
        unkeyed={r.name: r.unkeyed for r in (run_a, run_a2, run_b) if r is not None and r.unkeyed},
    )
    reasons = _decide(fields, counts, run_a, run_b, run_a2, config, key)

    resources: list[ResourceStat] = []
    if audit_sources is not None and audit_sources.given():
        assert audit_sources.baseline is not None and audit_sources.candidate is not None
        aud_a = read_audit(audit_sources.baseline)
        aud_b = read_audit(audit_sources.candidate)
        aud_a2 = read_audit(audit_sources.baseline_2) if audit_sources.baseline_2 is not None else None
        counts.audit_records = {"baseline": len(aud_a), "candidate": len(aud_b)}
        if aud_a2 is not None:
            counts.audit_records["baseline_2"] = len(aud_a2)
        resources, audit_reasons = compare_audits(aud_a, aud_b, aud_a2, run_a.by_key.keys() | b_keys.keys(), config)
        reasons.extend(audit_reasons)

    examples = _examples(fields, heaps, run_a, run_a2, run_b, diff, config)
    verdict = "PASS"
    if any(r.severity == "fail" for r in reasons):
        verdict = "FAIL"
    elif any(r.severity == "inconclusive" for r in reasons):
        verdict = "INCONCLUSIVE"
    severity_rank = {"fail": 0, "inconclusive": 1, "info": 2}
    code_rank = {code: i for i, code in enumerate(REASON_ORDER)}
    reasons.sort(key=lambda r: (severity_rank[r.severity], code_rank.get(r.code, len(code_rank))))
    return ComparisonResult(
        verdict=verdict,  # type: ignore[arg-type]
        mode="noise_calibrated" if has_noise else "exact",
        method=describe_method(config, has_noise),
        reasons=reasons,
        fields=fields,
        resources=resources,
        counts=counts,
        key=key,
        ignore=ignore_all,
        inputs={
            "baseline": run_a.source,
            "baseline_2": run_a2.source if run_a2 else None,
            "candidate": run_b.source,
            **(
                {
                    "baseline_audit": _names(audit_sources.baseline),
                    "candidate_audit": _names(audit_sources.candidate),
                    "baseline_2_audit": _names(audit_sources.baseline_2),
                }
                if audit_sources is not None
                and audit_sources.given()
                and audit_sources.baseline is not None
                and audit_sources.candidate is not None
                else {}
            ),
        },
        examples=examples,
        missing=[_unmatched(k, i, e) for k, i, e in missing[: config.max_listed]],
        extra=[_unmatched(k, i, e) for k, i, e in extra[: config.max_listed]],
        config=config,
        duration_s=round(time.monotonic() - started, 3),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def _names(source: Source | list[Source] | None) -> str | None:
    if source is None:
        return None
    if isinstance(source, list):
        return ", ".join(source_name(s) for s in source)
    return source_name(source)


def _sample(path: str, *runs: Run) -> Any:
    """A value of ``path`` from the first outputs that have it (to name the comparator of equal fields)."""
    for run in runs:
        for entries in itertools.islice(run.by_key.values(), 200):
            for flat, _, _ in entries:
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
            "Wilson-score interval is above zero. Fields noisier than "
            f"{config.max_noise_rate:.0%} cannot decide (INCONCLUSIVE)."
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
) -> FieldStat:
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
        st.lower_bound = newcombe_lower(x1, n1, x0, n0, z) if n1 and n0 else None
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


def _decide(
    fields: list[FieldStat],
    counts: Counts,
    run_a: Run,
    run_b: Run,
    run_a2: Run | None,
    config: CompareConfig,
    key: str,
) -> list[Reason]:
    reasons: list[Reason] = []
    has_noise = run_a2 is not None
    if not has_noise:
        reasons.append(
            Reason(
                code="NO_NOISE_BASELINE",
                severity="info",
                message="no baseline-2: noise not measured, exact rules applied (every difference counts)",
            )
        )
    for name, n in counts.unkeyed.items():
        reasons.append(
            Reason(
                code="UNKEYED_OUTPUTS",
                severity="info",
                message=f"{n} {name} outputs have no value at {key} and were not aligned",
            )
        )
    low = counts.aligned_candidate < config.min_aligned or (
        has_noise and (counts.aligned_noise or 0) < config.min_aligned
    )
    if low:
        hint = ""
        if counts.unkeyed:
            hint = f"; {sum(counts.unkeyed.values())} outputs lack the key {key} — is the key path right?"
        reasons.append(
            Reason(
                code="TOO_FEW_ALIGNED",
                severity="inconclusive",
                message=(
                    f"only {counts.aligned_candidate} candidate"
                    + (f" and {counts.aligned_noise} noise" if has_noise else "")
                    + f" outputs aligned; at least {config.min_aligned} needed{hint}"
                ),
            )
        )
    base = max(run_a.count - run_a.unkeyed, 1)
    miss_noise = (counts.missing_in_baseline_2 or 0) / base
    miss_cand = counts.missing_in_candidate / base
    if counts.missing_in_candidate and miss_cand - miss_noise > config.missing_abs_threshold:
        reasons.append(
            Reason(
                code="MISSING_OUTPUTS",
                severity="fail",
                message=(
                    f"candidate is missing {counts.missing_in_candidate} of {base} baseline outputs "
                    f"({miss_cand:.1%}; noise {miss_noise:.1%})"
                ),
            )
        )
    extra_noise = (counts.extra_in_baseline_2 or 0) / base
    extra_cand = counts.extra_in_candidate / base
    if counts.extra_in_candidate and extra_cand - extra_noise > config.extra_abs_threshold:
        reasons.append(
            Reason(
                code="EXTRA_OUTPUTS",
                severity="fail",
                message=(
                    f"candidate has {counts.extra_in_candidate} outputs the baseline does not "
                    f"({extra_cand:.1%}; noise {extra_noise:.1%})"
                ),
            )
        )
    changed = [f for f in fields if f.status == "changed"]
    if changed:
        reasons.append(
            Reason(
                code="MUST_NOT_CHANGE",
                severity="fail",
                message="; ".join(
                    f"{f.path} changed for {f.candidate_only_diffs} outputs but must not change" for f in changed
                ),
                fields=[f.path for f in changed],
            )
        )
    regressed = [f for f in fields if f.status == "regression"]
    if regressed:
        reasons.append(
            Reason(
                code="FIELD_REGRESSION",
                severity="fail",
                message="; ".join(_field_msg(f) for f in regressed[:5])
                + (f"; and {len(regressed) - 5} more" if len(regressed) > 5 else ""),
                fields=[f.path for f in regressed],
            )
        )
    unsure = [f for f in fields if f.status == "not_significant"]
    if unsure:
        reasons.append(
            Reason(
                code="NOT_SIGNIFICANT",
                severity="inconclusive",
                message="; ".join(_field_msg(f) for f in unsure[:5])
                + " — above the thresholds but not significant with this many outputs; replay more records",
                fields=[f.path for f in unsure],
            )
        )
    noisy = [f for f in fields if f.status == "too_noisy"]
    if noisy:
        reasons.append(
            Reason(
                code="NOISE_TOO_HIGH",
                severity="inconclusive",
                message="; ".join(
                    f"{f.path} differs between the baseline runs in {f.noise_rate or 0:.0%}" for f in noisy[:5]
                )
                + f" (> {config.max_noise_rate:.0%}): a regression there cannot be seen; compare it as text "
                "(fields: comparator 'text') or ignore it",
                fields=[f.path for f in noisy],
            )
        )
    return reasons


def _field_msg(f: FieldStat) -> str:
    if f.noise_rate is None:
        return f"{f.path} differs in {f.candidate_rate:.1%} of outputs ({f.candidate_diffs}/{f.candidate_n})"
    return (
        f"{f.path} differs in {f.candidate_rate:.1%} of outputs vs noise {f.noise_rate:.1%} "
        f"(+{f.delta:.1%}, lower bound {f.lower_bound if f.lower_bound is not None else float('nan'):+.1%})"
    )


def _examples(
    fields: list[FieldStat],
    heaps: dict[str, list[tuple[tuple[int, float, int], str, int]]],
    run_a: Run,
    run_a2: Run | None,
    run_b: Run,
    diff: _Diff,
    config: CompareConfig,
) -> list[Example]:
    from deepdiff import DeepDiff

    out: list[Example] = []
    shown_fields = [f for f in fields if f.candidate_diffs and f.path in heaps][:8]
    for f in shown_fields:
        for (only, badness, _), k, i in sorted(heaps[f.path], reverse=True):
            ea = run_a.by_key[k][i]
            eb = run_b.by_key[k][i]
            ea2 = None
            if run_a2 is not None:
                l2 = run_a2.by_key.get(k, [])
                ea2 = l2[i] if i < len(l2) else None
            cd = diff(ea[0], eb[0])
            nd = diff(ea[0], ea2[0]) if ea2 is not None else {}
            paths = list(dict.fromkeys([*ea[0], *eb[0], *(ea2[0] if ea2 else {})]))
            values = [
                ExampleValue(
                    path=p,
                    baseline=_json(ea[0].get(p, MISSING)),
                    baseline_2=_json(ea2[0].get(p, MISSING)) if ea2 is not None else None,
                    candidate=_json(eb[0].get(p, MISSING)),
                    candidate_differs=p in cd,
                    noise_differs=p in nd,
                    similarity=round(cd.get(p, nd.get(p, 1.0)), 3),
                )
                for p in paths
            ]
            try:
                structure = DeepDiff(unflatten(ea[0]), unflatten(eb[0]), ignore_order=True).pretty()
            except Exception:  # deepdiff is only for the reader; never fail a comparison on it
                structure = ""
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

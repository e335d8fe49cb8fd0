"""Side-effect comparison: the replay audit records (resource calls by key) of A, A' and B.

Each (resource_type, resource_name, method) is a "signature". Per key we count its calls; a key differs
when the counts differ. The rates go through the same noise rule as output fields, and two findings need no
statistics: a signature the baseline never called (NEW_RESOURCE_CALL) and configured audit rules. For keys
called as often, the calls' arguments and decision/outcome are compared too
(:mod:`~airflow_flink_replay.core.compare.call_changes`). The resources the candidate changed (the agent check's
fingerprints; never served production's cassette) are listed with how its replay treated their calls
(``CHANGED_RESOURCES``, info).
"""

from __future__ import annotations

import fnmatch
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from airflow_flink_replay.core.audit import name_hashed_keys
from airflow_flink_replay.core.compare import call_changes
from airflow_flink_replay.core.compare.config import AuditRule, CompareConfig
from airflow_flink_replay.core.compare.loading import AuditRecord
from airflow_flink_replay.core.compare.result import Reason, ResourceStat
from airflow_flink_replay.core.compare.stats import newcombe_lower, z_one_sided

Signature = tuple[str, str, str]
#: signature -> key -> that key's calls of it.
ByKey = dict[Signature, dict[str, list[AuditRecord]]]


def _bound(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def _signature_text(sig: Signature) -> str:
    return f"{sig[0]}:{sig[1]}.{sig[2]}"


def _index(records: list[AuditRecord]) -> tuple[ByKey, Counter[Signature], Counter[Signature]]:
    per_sig: ByKey = defaultdict(lambda: defaultdict(list))
    errors: Counter[Signature] = Counter()
    blocked: Counter[Signature] = Counter()
    for r in records:
        sig = (r.resource_type, r.resource_name, r.method)
        per_sig[sig][r.key].append(r)
        if r.outcome == "error":
            errors[sig] += 1
        elif r.outcome == "blocked":
            blocked[sig] += 1
    return per_sig, errors, blocked


def _counts(calls: dict[str, list[AuditRecord]]) -> Counter[str]:
    return Counter({key: len(rows) for key, rows in calls.items()})


def _differing(a: Counter[str], b: Counter[str]) -> int:
    return sum(1 for k in a.keys() | b.keys() if a.get(k, 0) != b.get(k, 0))


def _new_keys(base: Counter[str], other: Counter[str]) -> list[str]:
    return sorted(k for k, c in other.items() if c > 0 and base.get(k, 0) == 0)


def _rule_matches(rule: AuditRule, sig: Signature) -> bool:
    if rule.resource_type is not None and rule.resource_type != sig[0]:
        return False
    if not fnmatch.fnmatchcase(sig[1], rule.resource_name):
        return False
    return rule.method is None or fnmatch.fnmatchcase(sig[2], rule.method)


@dataclass
class _Indexed:
    """The three audits indexed by signature, and the key universe the rates are counted over."""

    a: ByKey
    b: ByKey
    a2: ByKey | None
    b_errors: Counter[Signature]
    b_blocked: Counter[Signature]
    n: int
    #: the pipeline stage each signature's calls came from (a job of one agent: none)
    stages: dict[Signature, str] = field(default_factory=dict)


def _index_all(
    baseline: list[AuditRecord],
    candidate: list[AuditRecord],
    baseline_2: list[AuditRecord] | None,
    output_keys: Iterable[str],
) -> _Indexed:
    baseline, candidate, baseline_2 = _named_keys(baseline, candidate, baseline_2)
    a_sig, _, _ = _index(baseline)
    b_sig, b_err, b_blk = _index(candidate)
    a2_sig = _index(baseline_2)[0] if baseline_2 is not None else None
    audit_keys: set[str] = set()
    for rec_list in (baseline, candidate, baseline_2 or []):
        audit_keys.update(r.key for r in rec_list)
    # Keys without any call are invisible in the audit. When the audit's (agent) key is the output key,
    # the outputs supply them; when the agent is keyed differently (e.g. by customer), they cannot.
    outputs = set(output_keys)
    same_keys = bool(audit_keys) and len(audit_keys & outputs) >= 0.5 * len(audit_keys)
    universe = audit_keys | outputs if same_keys else audit_keys
    stages: dict[Signature, str] = {(str(r.resource_type), r.resource_name, r.method): r.stage
                                    for r in (*baseline, *candidate, *(baseline_2 or [])) if r.stage}  # fmt: skip
    return _Indexed(a_sig, b_sig, a2_sig, b_err, b_blk, max(len(universe), 1), stages)


def _named_keys(
    baseline: list[AuditRecord], candidate: list[AuditRecord], baseline_2: list[AuditRecord] | None
) -> tuple[list[AuditRecord], list[AuditRecord], list[AuditRecord] | None]:
    """The three audits with every key hash that names one key of theirs replaced by that key
    (:func:`~airflow_flink_replay.core.audit.name_hashed_keys`): a call of an action restored in flight is
    counted under its key in every variant, whichever saw the key's input first."""
    keys = {r.key for records in (baseline, candidate, baseline_2 or []) for r in records}
    named = name_hashed_keys(keys)
    if not named:
        return baseline, candidate, baseline_2

    def rename(records: list[AuditRecord]) -> list[AuditRecord]:
        return [r.model_copy(update={"key": named[r.key]}) if r.key in named else r for r in records]

    return rename(baseline), rename(candidate), rename(baseline_2) if baseline_2 is not None else None


@dataclass
class _SigFacts:
    """One signature's calls per key in A, B (and A'), and its statistics so far."""

    sig: Signature
    a: Counter[str]
    b: Counter[str]
    a2: Counter[str] | None
    st: ResourceStat
    new: list[str]
    dropped: list[str]
    x1: int
    noise_new: int
    label: str


def _sig_facts(sig: Signature, ix: _Indexed, z: float) -> _SigFacts:
    a, b = _counts(ix.a.get(sig, {})), _counts(ix.b.get(sig, {}))
    a2 = _counts(ix.a2.get(sig, {})) if ix.a2 is not None else None
    x1 = _differing(a, b)
    new = _new_keys(a, b)
    dropped = _new_keys(b, a)
    st = ResourceStat(
        signature=_signature_text(sig),
        resource_type=sig[0],
        resource_name=sig[1],
        method=sig[2],
        baseline_calls=sum(a.values()),
        candidate_calls=sum(b.values()),
        baseline_keys=len(a),
        candidate_keys=len(b),
        candidate_errors=ix.b_errors.get(sig, 0),
        candidate_blocked=ix.b_blocked.get(sig, 0),
        new_keys=len(new),
        dropped_keys=len(dropped),
        candidate_rate=x1 / ix.n,
        example_keys=new[:10] or dropped[:10],
        stage=ix.stages.get(sig),
    )
    noise_new = 0
    if a2 is not None:
        x0 = _differing(a, a2)
        noise_new = len(_new_keys(a, a2))
        st.baseline_2_calls = sum(a2.values())
        st.baseline_2_keys = len(a2)
        st.noise_rate = x0 / ix.n
        st.lower_bound = newcombe_lower(x1, ix.n, x0, ix.n, z)
    label = f"{sig[0]} {sig[1]}" + (f" ({sig[2]})" if sig[2] not in ("", "call", "__call__") else "")
    if sig in ix.stages:
        label += f" of stage {ix.stages[sig]}"
    return _SigFacts(sig, a, b, a2, st, new, dropped, x1, noise_new, label)


def _new_resource(f: _SigFacts, config: CompareConfig) -> list[Reason]:
    """A signature the baseline (both runs) never called."""
    f.st.status = "new"
    if not config.fail_on_new_resource:
        return []
    return [
        Reason(
            code="NEW_RESOURCE_CALL",
            severity="fail",
            message=f"candidate now calls {f.label} for {len(f.b)} keys; the baseline never did",
            fields=[f.st.signature],
        )
    ]


def _beyond_noise(f: _SigFacts, config: CompareConfig) -> list[Reason]:
    """Both margins of the noise rule are exceeded: a regression if significant, else inconclusive."""
    st, p0 = f.st, f.st.noise_rate or 0.0
    significant = st.lower_bound is None or st.lower_bound > 0
    if f.a2 is None and st.candidate_rate <= config.exact_max_rate:
        significant = False
    if not significant:
        st.status = "not_significant"
        message = (
            f"calls of {f.label} differ for {st.candidate_rate:.1%} of keys vs noise {p0:.1%} "
            f"(+{st.candidate_rate - p0:.1%}, lower bound {_bound(st.lower_bound)}) — above the thresholds "
            "but not significant with this many keys; replay more records"
        )
        return [Reason(code="NOT_SIGNIFICANT", severity="inconclusive", message=message, fields=[st.signature])]
    st.status = "regression"
    if f.new or f.dropped:
        verb = "now calls" if len(f.new) >= len(f.dropped) else "no longer calls"
        what = f"{verb} {f.label} for {len(f.new) if verb == 'now calls' else len(f.dropped)} keys"
    else:  # the same keys, other call counts (e.g. an extra chat round after a tool call)
        what = f"calls {f.label} a different number of times for {f.x1} keys"
    message = f"candidate {what} (calls differ for {st.candidate_rate:.1%} of keys vs noise {p0:.1%})"
    return [Reason(code="SIDE_EFFECT_REGRESSION", severity="fail", message=message, fields=[st.signature])]


def _call_changes(f: _SigFacts, ix: _Indexed, config: CompareConfig, z: float) -> list[Reason]:
    """Keys called as often in both runs whose calls changed arguments (for the types configured; free text
    apart when the audit tells it apart) or decision/outcome: counted on ``f.st``, one example each, judged against
    the baseline runs' own changes — per key, or per call when the comparison has fewer keys than
    ``call_units_below_keys`` (one key of six is 16.7%: a single flip would read as a change)."""
    a, b = ix.a.get(f.sig, {}), ix.b.get(f.sig, {})
    a2 = ix.a2.get(f.sig, {}) if ix.a2 is not None else None
    aspects: list[call_changes.Aspect] = ["outcome"]
    if f.sig[0] in config.compare_arguments_of:
        aspects[:0] = ["arguments", "free_text"] if call_changes.has_free_text(a, b, a2) else ["arguments"]
    by_calls = ix.n < config.call_units_below_keys
    f.st.change_unit = "calls" if by_calls else "keys"
    f.st.noise_calls = {} if a2 is not None else None
    reasons: list[Reason] = []
    for aspect in aspects:
        keys = call_changes.changed_calls(aspect, a, b, config.free_text_threshold)
        noise_keys = call_changes.changed_calls(aspect, a, a2, config.free_text_threshold) if a2 is not None else None
        first = next(iter(keys), None)
        shown = (call_changes.example(aspect, first, a[first], b[first], config.free_text_threshold)
                 if first is not None else None)
        setattr(f.st, f"{aspect}_changed_keys", len(keys))
        setattr(f.st, f"{aspect}_noise_keys", len(noise_keys) if noise_keys is not None else None)
        f.st.changed_calls[aspect] = sum(keys.values())
        if f.st.noise_calls is not None and noise_keys is not None:
            f.st.noise_calls[aspect] = sum(noise_keys.values())
        if shown is not None:
            f.st.changes.append(shown)
        if by_calls:
            changed, noise, n = f.st.changed_calls[aspect], (f.st.noise_calls or {}).get(aspect), f.st.baseline_calls
        else:
            changed, noise, n = len(keys), len(noise_keys) if noise_keys is not None else None, ix.n
        found = call_changes.judge(aspect, f.label, f.st.signature, changed, noise, max(n, 1), config, z, shown,
                                   unit=f.st.change_unit)
        if any(r.severity == "fail" for r in found):
            f.st.status = "regression"
        elif found and found[0].severity == "inconclusive" and f.st.status == "ok":
            f.st.status = "not_significant"
        reasons.extend(found)
    return reasons


def _within_noise(f: _SigFacts, config: CompareConfig, n: int) -> list[Reason]:
    """Not beyond the noise rule's margins: exact rules, too noisy, or no longer called."""
    st, p0 = f.st, f.st.noise_rate or 0.0
    if f.a2 is None and f.x1 > config.exact_max_rate * n:
        st.status = "regression"
        message = f"calls of {f.label} differ for {f.x1} keys (exact rules: no baseline-2)"
        return [Reason(code="SIDE_EFFECT_REGRESSION", severity="fail", message=message, fields=[st.signature])]
    if f.a2 is not None and p0 > config.max_noise_rate:
        st.status = "too_noisy"
        message = (
            f"calls of {f.label} differ between the baseline runs for {p0:.0%} of keys "
            f"(> {config.max_noise_rate:.0%}): a side-effect regression there cannot be seen"
        )
        return [Reason(code="NOISE_TOO_HIGH", severity="inconclusive", message=message, fields=[st.signature])]
    if f.a and not f.b:
        st.status = "gone"
        message = f"candidate no longer calls {f.label} (baseline: {len(f.a)} keys)"
        return [Reason(code="RESOURCE_NO_LONGER_CALLED", severity="info", message=message, fields=[st.signature])]
    return []


def _audit_rules(f: _SigFacts, config: CompareConfig) -> list[Reason]:
    """The configured audit rules that this signature breaks."""
    reasons = []
    for rule in config.audit_rules:
        if _rule_matches(rule, f.sig) and len(f.new) - f.noise_new > rule.max_new_keys:
            if f.st.status == "ok":
                f.st.status = "rule"
            reasons.append(
                Reason(
                    code="AUDIT_RULE",
                    severity="fail",
                    message=(
                        f"audit rule on {rule.resource_name}: candidate calls {f.label} for {len(f.new)} new keys "
                        f"(allowed {rule.max_new_keys} beyond noise {f.noise_new})"
                    ),
                    fields=[f.st.signature],
                )
            )
    return reasons


def _judge(f: _SigFacts, config: CompareConfig, n: int) -> list[Reason]:
    """The status of one signature and its reasons (sets ``f.st.status``)."""
    if f.b and not f.a and not (f.a2 or {}):
        reasons = _new_resource(f, config)
    else:
        p0 = f.st.noise_rate or 0.0
        delta = f.st.candidate_rate - p0
        beyond = delta > config.abs_threshold and (p0 == 0 or delta > config.rel_threshold * p0)
        reasons = _beyond_noise(f, config) if beyond else _within_noise(f, config, n)
    return reasons + _audit_rules(f, config)


#: How a changed resource's call was treated in the candidate's replay, by its outcome.
_TREATED = {
    "ok": "executed",
    "error": "executed, raised",
    "recorded": "recorded (not executed)",
    "blocked": "blocked",
    "replayed": "replayed",
}


def changed_resources_reasons(candidate: list[AuditRecord], changed: Mapping[str, str] | None) -> list[Reason]:
    """An info reason naming the resources the candidate changed (``changed``: the agent check's, by name; and
    every resource the candidate's audit marks ``changed``) and how the candidate's replay treated their calls —
    none was served production's recorded results. Empty when the candidate changed nothing."""
    calls: dict[str, Counter[str]] = defaultdict(Counter)
    kinds: dict[str, str] = {}
    for r in candidate:
        if r.changed:
            calls[r.resource_name][f"{_TREATED.get(r.outcome, r.outcome)}: {r.decision}"] += 1
            kinds[r.resource_name] = r.resource_type
    given = dict(changed or {})
    names = sorted(set(given) | set(calls))
    if not names:
        return []
    parts = []
    for name in names:
        status = given.get(name, "changed")
        if name in calls:
            how = ", ".join(f"{what}, {n} call{'s' if n > 1 else ''}" for what, n in sorted(calls[name].items()))
            parts.append(f"{kinds[name]} {name} ({status}; {how})")
        else:  # a prompt or a connection acts through the calls that use it; or a resource the window never called
            parts.append(f"{name} ({status}; no call of its own in the window)")
    message = (
        f"the candidate changed {len(names)} resource{'s' if len(names) > 1 else ''} (fingerprints differ from "
        f"production's), never served production's recorded results: {'; '.join(parts)}"
    )
    return [Reason(code="CHANGED_RESOURCES", severity="info", message=message, fields=names)]


def compare_audits(
    baseline: list[AuditRecord],
    candidate: list[AuditRecord],
    baseline_2: list[AuditRecord] | None,
    output_keys: Iterable[str],
    config: CompareConfig,
    *,
    changed: Mapping[str, str] | None = None,
) -> tuple[list[ResourceStat], list[Reason]]:
    """Compare the side effects of the runs; returns per-signature stats (worst first) and reasons (with
    :func:`changed_resources_reasons`: ``changed`` are the resources the agent check found the candidate changed)."""
    ix = _index_all(baseline, candidate, baseline_2, output_keys)
    z = z_one_sided(config.alpha)
    stats: list[ResourceStat] = []
    reasons: list[Reason] = []
    for sig in sorted(set(ix.a) | set(ix.b) | set(ix.a2 or {})):
        facts = _sig_facts(sig, ix, z)
        reasons.extend(_judge(facts, config, ix.n))
        if facts.st.status != "new":
            reasons.extend(_call_changes(facts, ix, config, z))
        stats.append(facts.st)
    reasons.extend(changed_resources_reasons(candidate, changed))
    rank = {"new": 0, "regression": 0, "rule": 0, "not_significant": 1, "too_noisy": 2, "gone": 3, "ok": 4}
    stats.sort(key=lambda s: (rank[s.status], -(s.candidate_rate - (s.noise_rate or 0.0)), s.signature))
    return stats, reasons

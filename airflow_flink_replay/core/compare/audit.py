"""Side-effect comparison: the replay audit records (resource calls by key) of A, A' and B.

Each (resource_type, resource_name, method) is a "signature". Per key we count its calls; a key differs
when the counts differ. The rates go through the same noise rule as output fields, and two findings need no
statistics: a signature the baseline never called (NEW_RESOURCE_CALL) and configured audit rules.
"""

from __future__ import annotations

import fnmatch
from collections import Counter, defaultdict
from collections.abc import Iterable

from airflow_flink_replay.core.compare.config import AuditRule, CompareConfig
from airflow_flink_replay.core.compare.loading import AuditRecord
from airflow_flink_replay.core.compare.result import Reason, ResourceStat
from airflow_flink_replay.core.compare.stats import newcombe_lower, z_one_sided

Signature = tuple[str, str, str]


def _bound(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def _signature_text(sig: Signature) -> str:
    return f"{sig[0]}:{sig[1]}.{sig[2]}"


def _index(records: list[AuditRecord]) -> tuple[dict[Signature, Counter[str]], Counter[Signature], Counter[Signature]]:
    per_sig: dict[Signature, Counter[str]] = defaultdict(Counter)
    errors: Counter[Signature] = Counter()
    blocked: Counter[Signature] = Counter()
    for r in records:
        sig = (r.resource_type, r.resource_name, r.method)
        per_sig[sig][r.key] += 1
        if r.outcome == "error":
            errors[sig] += 1
        elif r.outcome == "blocked":
            blocked[sig] += 1
    return per_sig, errors, blocked


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


def compare_audits(
    baseline: list[AuditRecord],
    candidate: list[AuditRecord],
    baseline_2: list[AuditRecord] | None,
    output_keys: Iterable[str],
    config: CompareConfig,
) -> tuple[list[ResourceStat], list[Reason]]:
    """Compare the side effects of the runs; returns per-signature stats (worst first) and reasons."""
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
    n = max(len(universe), 1)
    z = z_one_sided(config.alpha)
    stats: list[ResourceStat] = []
    reasons: list[Reason] = []
    empty: Counter[str] = Counter()
    all_sigs = set(a_sig) | set(b_sig) | set(a2_sig or {})
    for sig in sorted(all_sigs):
        a, b = a_sig.get(sig, empty), b_sig.get(sig, empty)
        a2 = a2_sig.get(sig, empty) if a2_sig is not None else None
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
            candidate_errors=b_err.get(sig, 0),
            candidate_blocked=b_blk.get(sig, 0),
            new_keys=len(new),
            dropped_keys=len(dropped),
            candidate_rate=x1 / n,
            example_keys=new[:10] or dropped[:10],
        )
        noise_new = 0
        if a2 is not None:
            x0 = _differing(a, a2)
            noise_new = len(_new_keys(a, a2))
            st.baseline_2_calls = sum(a2.values())
            st.baseline_2_keys = len(a2)
            st.noise_rate = x0 / n
            st.lower_bound = newcombe_lower(x1, n, x0, n, z)
        label = f"{sig[0]} {sig[1]}" + (f" ({sig[2]})" if sig[2] not in ("", "call", "__call__") else "")
        never_in_baseline = not a and not (a2 or {})
        if b and never_in_baseline:
            st.status = "new"
            if config.fail_on_new_resource:
                reasons.append(
                    Reason(
                        code="NEW_RESOURCE_CALL",
                        severity="fail",
                        message=f"candidate now calls {label} for {len(b)} keys; the baseline never did",
                        fields=[st.signature],
                    )
                )
        else:
            p0 = st.noise_rate or 0.0
            delta = st.candidate_rate - p0
            beyond = delta > config.abs_threshold and (p0 == 0 or delta > config.rel_threshold * p0)
            if beyond:
                significant = st.lower_bound is None or st.lower_bound > 0
                if a2 is None and st.candidate_rate <= config.exact_max_rate:
                    significant = False
                if significant:
                    st.status = "regression"
                    if new or dropped:
                        verb = "now calls" if len(new) >= len(dropped) else "no longer calls"
                        what = f"{verb} {label} for {len(new) if verb == 'now calls' else len(dropped)} keys"
                    else:  # the same keys, other call counts (e.g. an extra chat round after a tool call)
                        what = f"calls {label} a different number of times for {x1} keys"
                    reasons.append(
                        Reason(
                            code="SIDE_EFFECT_REGRESSION",
                            severity="fail",
                            message=(
                                f"candidate {what} (calls differ for {st.candidate_rate:.1%} of keys vs noise {p0:.1%})"
                            ),
                            fields=[st.signature],
                        )
                    )
                else:
                    st.status = "not_significant"
                    reasons.append(
                        Reason(
                            code="NOT_SIGNIFICANT",
                            severity="inconclusive",
                            message=(
                                f"calls of {label} differ for {st.candidate_rate:.1%} of keys vs noise {p0:.1%} "
                                f"(+{delta:.1%}, lower bound {_bound(st.lower_bound)}) — above the thresholds "
                                "but not significant with this many keys; replay more records"
                            ),
                            fields=[st.signature],
                        )
                    )
            elif a2 is None and x1 > config.exact_max_rate * n:
                st.status = "regression"
                reasons.append(
                    Reason(
                        code="SIDE_EFFECT_REGRESSION",
                        severity="fail",
                        message=f"calls of {label} differ for {x1} keys (exact rules: no baseline-2)",
                        fields=[st.signature],
                    )
                )
            elif a2 is not None and p0 > config.max_noise_rate:
                st.status = "too_noisy"
                reasons.append(
                    Reason(
                        code="NOISE_TOO_HIGH",
                        severity="inconclusive",
                        message=(
                            f"calls of {label} differ between the baseline runs for {p0:.0%} of keys "
                            f"(> {config.max_noise_rate:.0%}): a side-effect regression there cannot be seen"
                        ),
                        fields=[st.signature],
                    )
                )
            elif a and not b:
                st.status = "gone"
                reasons.append(
                    Reason(
                        code="RESOURCE_NO_LONGER_CALLED",
                        severity="info",
                        message=f"candidate no longer calls {label} (baseline: {len(a)} keys)",
                        fields=[st.signature],
                    )
                )
        for rule in config.audit_rules:
            if _rule_matches(rule, sig) and len(new) - noise_new > rule.max_new_keys:
                if st.status == "ok":
                    st.status = "rule"
                reasons.append(
                    Reason(
                        code="AUDIT_RULE",
                        severity="fail",
                        message=(
                            f"audit rule on {rule.resource_name}: candidate calls {label} for {len(new)} new keys "
                            f"(allowed {rule.max_new_keys} beyond noise {noise_new})"
                        ),
                        fields=[st.signature],
                    )
                )
        stats.append(st)
    rank = {"new": 0, "regression": 0, "rule": 0, "not_significant": 1, "too_noisy": 2, "gone": 3, "ok": 4}
    stats.sort(key=lambda s: (rank[s.status], -(s.candidate_rate - (s.noise_rate or 0.0)), s.signature))
    return stats, reasons

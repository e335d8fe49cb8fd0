"""Missing and extra outputs, judged against the baselines' own.

A replay loses or adds outputs for reasons the candidate has nothing to do with (a tool that times out, a
model call that fails and is not retried): the second baseline run shows how many. The candidate's count is
judged against it like a field's rate (Diffy's rule: beyond the margins *and* significant), with an exact
one-sided test on the window's size, so a handful of outputs in a small window is judged as what it is:

* missing outputs (at most one per baseline output): Fisher's exact test of ``x1/n`` against ``x0/n``;
* extra outputs (any number): the conditional binomial test of the two counts over the same baseline
  (``x1`` of ``x0 + x1`` at 1/2), exact for counts that are not bounded by a number of trials.

FAIL when the candidate's rate exceeds baseline-2's by more than ``missing_abs_threshold`` /
``extra_abs_threshold`` and by more than ``rel_threshold`` of baseline-2's rate, and ``p < alpha``.
Beyond those margins and the noise rule's absolute margin but not significant: INCONCLUSIVE
(``NOT_SIGNIFICANT``, replay more records). Otherwise an info reason gives the counts. Without baseline-2
the margin alone decides, as an exact rule.
"""

from __future__ import annotations

from typing import Literal

from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.compare.result import Reason
from airflow_flink_replay.core.compare.stats import binomial_greater, fisher_greater

UnmatchedKind = Literal["missing", "extra"]

_CODES = {"missing": ("MISSING_OUTPUTS", "MISSING_WITHIN_NOISE"), "extra": ("EXTRA_OUTPUTS", "EXTRA_WITHIN_NOISE")}
_TESTS = {"missing": "one-sided Fisher exact", "extra": "one-sided exact binomial test of the two counts"}


def _counted(kind: UnmatchedKind, x: int, base: int) -> str:
    if kind == "missing":
        return f"candidate is missing {x} of {base} baseline outputs ({x / base:.1%})"
    return f"candidate has {x} outputs the baseline does not ({x / base:.1%} of {base})"


def _noise(kind: UnmatchedKind, x: int, base: int) -> str:
    return f"baseline-2 {x} of {base} ({x / base:.1%})" if kind == "missing" else f"baseline-2 {x} ({x / base:.1%})"


def p_value(kind: UnmatchedKind, x1: int, x0: int, base: int) -> float:
    """The one-sided exact p-value that the candidate's ``x1`` exceeds baseline-2's ``x0`` (both of ``base``
    baseline outputs)."""
    if kind == "missing":
        return fisher_greater(x1, base, x0, base)
    return binomial_greater(x1, x0 + x1, 0.5)


def unmatched_reasons(kind: UnmatchedKind, x1: int, x0: int | None, base: int, config: CompareConfig) -> list[Reason]:
    """The reason about the candidate's ``x1`` missing (or extra) outputs of ``base`` baseline outputs,
    against baseline-2's ``x0`` (None without baseline-2)."""
    fail_code, info_code = _CODES[kind]
    threshold = config.missing_abs_threshold if kind == "missing" else config.extra_abs_threshold
    if not x1:
        return []
    p1 = x1 / base
    if x0 is None:  # exact rule: the margin alone
        if p1 <= threshold:
            return []
        message = f"{_counted(kind, x1, base)}; no baseline-2 to measure the baselines' own"
        return [Reason(code=fail_code, severity="fail", message=message)]
    p0 = x0 / base
    delta = p1 - p0
    p = p_value(kind, x1, x0, base)
    beyond = delta > threshold and (p0 == 0 or delta > config.rel_threshold * p0)
    said = f"{_counted(kind, x1, base)}, {_noise(kind, x0, base)}: {delta * 100:+.1f} pt"
    test = f"{_TESTS[kind]} p = {p:.2g}"
    if beyond and p < config.alpha:
        return [Reason(code=fail_code, severity="fail", message=f"{said}, {test} < alpha {config.alpha:g}")]
    if beyond and delta > config.abs_threshold:
        message = (
            f"{said}: more than the baselines' own, but not significant with this many outputs ({test} ≥ alpha "
            f"{config.alpha:g}); replay more records"
        )
        return [Reason(code="NOT_SIGNIFICANT", severity="inconclusive", message=message)]
    if beyond:
        why = f"not significant ({test} ≥ alpha {config.alpha:g})"
    else:
        need = f"more than {threshold * 100:.1f} pt and {config.rel_threshold:.0%} of {p0:.1%}"
        why = f"within the margins ({need} needed); {test}"
    return [Reason(code=info_code, severity="info", message=f"{said}: as the baselines' own, {why}")]

"""Fidelity: does the baseline replay reproduce what production itself output for the same input?

A replay can be fair (the three variants see the same state, input and policy) and still not faithful: a
tool that returns a placeholder, memory that was not forked right, an input the replay reads differently.
Production's own outputs for the window's records are the reference. :func:`measure_fidelity` aligns them
with the baseline's by the correlation key (the n-th output of a key with the n-th) and counts the baseline
outputs in which no field differs from production's — fields flattened and compared as the comparison does
(its comparators: text by similarity, numbers within their tolerance and within the band the two baselines
showed), with the same ignored paths (and the replay's own ``_replay`` block) left out.
:func:`with_fidelity` adds the figure to a :class:`ComparisonResult`; below ``CompareConfig.fidelity_floor``
the verdict becomes INCONCLUSIVE (``LOW_FIDELITY``): a gate built on a replay that does not reproduce
production cannot be trusted. An agent that samples (an LLM at a temperature) does not even reproduce
itself: with the second baseline the floor applies to the fidelity relative to how often the baseline equals
baseline-2, measured the same way.
"""

from __future__ import annotations

from collections import Counter

from airflow_flink_replay.core.compare.alignment import load_run
from airflow_flink_replay.core.compare.comparators import ComparatorResolver
from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.compare.differ import Differ, NumericBand
from airflow_flink_replay.core.compare.loading import Source, source_name
from airflow_flink_replay.core.compare.paths import Flattener, compile_key
from airflow_flink_replay.core.compare.result import ComparisonResult, FidelityStat, Reason

__all__ = ["FidelityReference", "measure_fidelity", "with_fidelity"]

#: Fields listed as differing most.
TOP_FIELDS = 5


def measure_fidelity(
    baseline: Source,
    production: Source,
    *,
    key: str,
    ignore: list[str],
    config: CompareConfig | None = None,
    baseline_2: Source | None = None,
) -> FidelityStat:
    """Compare the baseline's outputs with production's own outputs for the same keys.

    :param baseline: the baseline replay's outputs (JSONL).
    :param production: production's outputs for the window (JSONL), read from its output topic.
    :param key: the correlation key's JSONPath (the comparison's).
    :param ignore: the paths the comparison ignored (``ComparisonResult.ignore``).
    :param baseline_2: the second baseline's outputs: how often the baseline reproduces *itself*, measured the
        same way, is what production can be expected to match at best when the agent is noisy (an LLM that
        samples): the floor applies to the fidelity relative to it.
    """
    reference = FidelityReference(baseline, key=key, ignore=ignore, config=config, baseline_2=baseline_2)
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
    ) -> None:
        self.config = config or CompareConfig()
        self._getter, self._flattener = compile_key(key), Flattener(ignore, self.config.list_mode)
        # read, flattened, grouped as the comparison
        self._base = load_run("baseline", baseline, self._getter, self._flattener).by_key
        base_2 = (
            load_run("baseline_2", baseline_2, self._getter, self._flattener).by_key if baseline_2 is not None else None
        )
        band = None
        if base_2 is not None and self.config.numeric_noise_band:  # numbers within what baseline-2 showed: equal
            band = NumericBand(self.config.numeric_noise_quantile)
            band.finish(band.learn_runs(self._base, base_2))
        self._differ = Differ(ComparatorResolver(self.config), band)
        self.baseline_outputs = sum(len(v) for v in self._base.values())
        self.self_rate = None
        if base_2 is not None and self.baseline_outputs:
            self.self_rate = _agreement(self._base, base_2, self._differ)[1] / self.baseline_outputs

    def measure(self, production: Source) -> FidelityStat:
        """The baseline's outputs against ``production``'s (JSONL)."""
        prod = load_run("production", production, self._getter, self._flattener).by_key
        aligned, equal, differing, examples = _agreement(self._base, prod, self._differ)
        n = self.baseline_outputs
        return FidelityStat(
            production=source_name(production),
            baseline_outputs=n,
            production_outputs=sum(len(v) for v in prod.values()),
            aligned=aligned,
            equal=equal,
            rate=(equal / n) if n else None,
            self_rate=self.self_rate,
            fields={path: count for path, count in differing.most_common(TOP_FIELDS)},
            example_keys=examples,
            floor=self.config.fidelity_floor,
        )


def _agreement(base: dict, other: dict, differ: Differ) -> tuple[int, int, Counter[str], list[str]]:
    """(aligned, equal, differing paths, example keys) of ``base``'s outputs against ``other``'s, fields
    compared by ``differ``."""
    aligned = equal = 0
    differing: Counter[str] = Counter()
    examples: list[str] = []
    for k in sorted(base):
        for (b, _, _), (p, _, _) in zip(base[k], other.get(k, ()), strict=False):  # the n-th with the n-th
            aligned += 1
            paths = sorted(differ(b, p))
            if not paths:
                equal += 1
                continue
            differing.update(paths)
            if len(examples) < TOP_FIELDS:
                examples.append(k)
    return aligned, equal, differing, examples


def with_fidelity(result: ComparisonResult, stat: FidelityStat, *, not_enforced: str | None = None) -> ComparisonResult:
    """``result`` with the fidelity figure, a reason stating it, and the verdict INCONCLUSIVE when it is
    below the configured floor (a FAIL stays FAIL). ``not_enforced``: why the floor does not apply to this
    run (the figure is still reported), e.g. a savepoint taken while production kept running."""
    from airflow_flink_replay.core.compare.engine import decide_verdict

    reasons = [r for r in result.reasons if r.code not in ("FIDELITY", "LOW_FIDELITY")]
    figure = (
        f"{stat.equal} of {stat.baseline_outputs} baseline outputs equal production's own outputs for the same "
        f"input ({stat.rate:.1%})" if stat.rate is not None else "no baseline outputs to compare with production's"
    )
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
    low = stat.floor is not None and (relative is None or relative < stat.floor)
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

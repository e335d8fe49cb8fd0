"""The comparison result: what ``summary.json`` holds and what the operator pushes to XCom."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.compare.content_findings import ContentAuditStat
from airflow_flink_replay.core.compare.meaning_findings import MeaningStat
from airflow_flink_replay.core.compare.stats import wilson

Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
Mode = Literal["noise_calibrated", "exact"]
FieldStatus = Literal["ok", "regression", "changed", "too_noisy", "not_significant", "improved", "volatile"]
#: How the outputs of a key with several were aligned (``Counts.alignment``).
AlignmentKind = Literal["unique_key", "event_time", "input_offset", "file_order", "mixed"]
#: What ties a baseline output to production's in the fidelity figure (``FidelityStat.tie``).
FidelityTie = Literal["input_record", "content"]

#: Reason codes. FAIL codes decide FAIL, INCONCLUSIVE codes decide INCONCLUSIVE unless something FAILs.
FAIL_CODES = (
    "FIELD_REGRESSION",
    "OUTPUT_REGRESSION",
    "MUST_NOT_CHANGE",
    "MISSING_OUTPUTS",
    "EXTRA_OUTPUTS",
    "NEW_RESOURCE_CALL",
    "SIDE_EFFECT_REGRESSION",
    "SIDE_EFFECT_ARGUMENTS",
    "SIDE_EFFECT_OUTCOME",
    "AUDIT_RULE",
    "CONTENT_SENSITIVE_DATA",
    "CONTENT_WORD_LIST",
    "CONTENT_LANGUAGE",
    "CONTENT_TRUNCATED",
    "CONTENT_EMPTY",
    "TEXT_MEANING",
    "TEXT_JUDGE",
)
INCONCLUSIVE_CODES = (
    "LOW_FIDELITY",
    "TOO_FEW_ALIGNED",
    "NOISE_TOO_HIGH",
    "NOT_SIGNIFICANT",
    "UNKEYED_OUTPUTS",
)
#: Info codes shown as warnings in the summary: something the user asked for had no effect.
WARNING_CODES = ("RULE_MATCHES_NOTHING",)


class Reason(BaseModel):
    """One finding that decided (or informs) the verdict."""

    code: str
    severity: Literal["fail", "inconclusive", "info"]
    message: str
    fields: list[str] = Field(default_factory=list)


class DifferenceKind(BaseModel):
    """One kind of difference of a field and how often it occurred: the evidence a reviewer reads."""

    kind: str = Field(description="'type boolean -> number', or 'values 0.1-1' (a magnitude range)")
    candidate_diffs: int = Field(description="candidate outputs (A vs B) with a difference of this kind")
    noise_diffs: int | None = Field(default=None, description="the same between the baselines (A vs A')")
    mean_move: float | None = Field(
        default=None,
        description="numbers: the mean relative move |a - b| / max(|a|, |b|) of the candidate's differences of "
        "this range",
    )
    band_abs: float | None = Field(default=None, description="numbers: the range's absolute band (A/A)")
    band_rel: float | None = Field(default=None, description="numbers: the range's relative band (A/A)")


class FieldStat(BaseModel):
    """Difference rates of one leaf path: noise (A vs A') and candidate (A vs B)."""

    #: ``$.score``; a pipeline's intermediate stage's field carries the stage: ``analysis:$.score``
    path: str
    comparator: str
    noise_diffs: int | None = None
    noise_n: int | None = None
    noise_rate: float | None = None
    candidate_diffs: int
    candidate_n: int
    candidate_rate: float
    delta: float = Field(description="candidate_rate - noise_rate (noise 0 in exact mode)")
    relative: float | None = Field(default=None, description="delta / noise_rate; None when noise is 0")
    lower_bound: float | None = Field(
        default=None, description="one-sided lower confidence bound of delta (Newcombe); Wilson in exact mode"
    )
    candidate_only_diffs: int = Field(
        default=0, description="outputs where B differs from A while A and A' agree (needs A')"
    )
    must_not_change: bool = False
    status: FieldStatus = "ok"
    noise_band_abs: float | None = Field(
        default=None, description="numbers: how far the field moves between the baselines (absolute band)"
    )
    noise_band_rel: float | None = Field(default=None, description="numbers: the same as a relative band")
    volatile_rate: float | None = Field(
        default=None,
        description="a volatile field (a per-run value: request id, host, timestamp): the share of baseline pairs "
        "whose values differ (at least volatile_noise_rate). Its values are left out of the verdict; the diffs, "
        "rates and bound above then count only changes of shape (present on one side, or another JSON type)",
    )
    kinds: list[DifferenceKind] = Field(
        default_factory=list,
        description="the differences that have a kind, most frequent in the candidate first: changes of JSON type "
        "(type boolean -> number) and numbers moved beyond the bands of their magnitude range (values 0.1-1)",
    )
    type_lower_bound: float | None = Field(
        default=None,
        description="changes of JSON type judged on their own by the noise rule (any transition: candidate outputs "
        "vs A/A outputs with one): the lower bound of their delta; None when the candidate changed no type",
    )
    noise_pair_rates: list[float] | None = Field(
        default=None,
        description="with more than one A/A pair (aa_replays > 1): the field's noise rate in each pair, in the order "
        "of ComparisonResult.noise_pairs (noise_rate pools them); None with one pair",
    )

    @property
    def noise_spread(self) -> tuple[float, float] | None:
        """The lowest and highest noise rate of the A/A pairs (None with one pair)."""
        rates = self.noise_pair_rates
        return (min(rates), max(rates)) if rates else None


class CallChange(BaseModel):
    """One call of a key whose arguments or decision/outcome changed between the baseline and the candidate."""

    key: str
    aspect: Literal["arguments", "free_text", "outcome"]
    baseline: str = Field(description="the baseline's call: arguments (secrets masked) or decision → outcome")
    candidate: str = Field(description="the candidate's call, alike")
    changed: list[str] = Field(default_factory=list, description="'field: old → new' per changed argument field")


class ResourceStat(BaseModel):
    """Side-effect calls of one (resource_type, resource_name, method), per variant and per key."""

    signature: str
    resource_type: str
    resource_name: str
    method: str
    stage: str | None = Field(
        default=None, description="the pipeline stage whose agent made the calls (None: a job of one agent)"
    )
    baseline_calls: int = 0
    baseline_2_calls: int | None = None
    candidate_calls: int = 0
    baseline_keys: int = 0
    baseline_2_keys: int | None = None
    candidate_keys: int = 0
    candidate_errors: int = 0
    candidate_blocked: int = 0
    new_keys: int = Field(default=0, description="keys the candidate calls it for and the baseline does not")
    dropped_keys: int = Field(default=0, description="keys the baseline calls it for and the candidate does not")
    noise_rate: float | None = None
    candidate_rate: float = 0.0
    lower_bound: float | None = None
    example_keys: list[str] = Field(default_factory=list)
    arguments_changed_keys: int = Field(
        default=0, description="keys called as often as in the baseline, with other arguments"
    )
    arguments_noise_keys: int | None = Field(default=None, description="the same between the baseline runs")
    outcome_changed_keys: int = Field(
        default=0, description="keys called as often as in the baseline, with another decision or outcome"
    )
    outcome_noise_keys: int | None = Field(default=None, description="the same between the baseline runs")
    free_text_changed_keys: int = Field(
        default=0,
        description="keys called as often, with the same identifying arguments, whose free text (arguments a model "
        "wrote) changed; only for resources whose audit tells identifying arguments apart (identity_digest)",
    )
    free_text_noise_keys: int | None = Field(default=None, description="the same between the baseline runs")
    change_unit: Literal["keys", "calls"] = Field(
        default="keys",
        description="what the arguments / free text / outcome rates count: keys, or calls when the comparison has "
        "fewer keys than call_units_below_keys (one key is then too coarse a unit)",
    )
    changed_calls: dict[str, int] = Field(
        default_factory=dict, description="per aspect: calls of keys called as often that changed in the candidate"
    )
    noise_calls: dict[str, int] | None = Field(default=None, description="the same between the baseline runs")
    changes: list[CallChange] = Field(default_factory=list, description="an example per kind of change")
    status: Literal["ok", "new", "regression", "rule", "too_noisy", "not_significant", "gone"] = "ok"


class Counts(BaseModel):
    """How many outputs each run had and how they aligned."""

    baseline: int
    baseline_2: int | None = None
    candidate: int
    keys: int = Field(description="distinct correlation keys over all runs")
    aligned_candidate: int = Field(description="outputs aligned between baseline and candidate")
    aligned_noise: int | None = Field(
        default=None,
        description="pairs of baseline outputs aligned: baseline with baseline-2, and with more baselines "
        "(aa_replays > 1) every pair of baseline runs, pooled",
    )
    noise_pairs: int | None = Field(
        default=None, description="pairs of baseline runs the noise was measured on (None without baseline-2)"
    )
    missing_in_candidate: int = 0
    extra_in_candidate: int = 0
    missing_in_baseline_2: int | None = Field(
        default=None, description="outputs of one baseline run missing in the other, pooled over the noise pairs"
    )
    extra_in_baseline_2: int | None = Field(
        default=None, description="outputs one baseline run has beyond the other's, pooled over the noise pairs"
    )
    unkeyed: dict[str, int] = Field(default_factory=dict, description="outputs without the key, per run")
    audit_records: dict[str, int] = Field(default_factory=dict)
    alignment: AlignmentKind = Field(
        default="unique_key",
        description="how the baseline's keys with several outputs were aligned: unique_key (no key has several), "
        "event_time or input_offset (per input record), file_order (by order within the key), mixed (several of "
        "these; the ALIGNMENT reason counts them)",
    )


class ExampleValue(BaseModel):
    """One field of an example: values side by side (JSON text) and whether each side differs from A."""

    path: str
    baseline: str
    baseline_2: str | None = None
    candidate: str
    candidate_differs: bool
    noise_differs: bool = False
    similarity: float = 1.0
    kind: str | None = Field(
        default=None, description="the kind of the candidate's difference: 'type boolean -> number', 'values 0.1-1'"
    )


class Example(BaseModel):
    """A side-by-side example of a difference: one aligned output in A, A' and B."""

    key: str
    index: int
    field: str
    similarity: float
    candidate_only: bool
    values: list[ExampleValue]
    structure: str = Field(default="", description="deepdiff's account of A vs B")
    lines: dict[str, int] = Field(default_factory=dict, description="line numbers in each input file")


class Unmatched(BaseModel):
    """A missing or extra output."""

    key: str
    index: int
    line: int
    preview: str


class FidelityStat(BaseModel):
    """How many of the baseline's outputs equal production's own outputs for the same input."""

    production: str = Field(description="where production's outputs were read from")
    baseline_outputs: int
    production_outputs: int
    aligned: int = Field(
        description="baseline outputs paired with a production output of their unit: the same input record (key "
        "and event time), or the same key when tie is 'content'"
    )
    equal: int = Field(description="aligned outputs whose every compared field equals production's")
    tie: FidelityTie = Field(
        default="input_record",
        description="input_record: outputs matched within (key, event time); content: within the key, by content "
        "(the outputs could not be tied to their input record; tie_note says why)",
    )
    tie_note: str = Field(default="", description="why the outputs were tied as they were")
    production_outside: int = Field(
        default=0,
        description="production outputs of no baseline unit, not counted (e.g. the record before the window's)",
    )
    rate: float | None = Field(description="equal / baseline outputs (None without baseline outputs)")
    self_rate: float | None = Field(
        default=None,
        description="share of baseline outputs equal to baseline-2's, measured the same way (None: no baseline-2)",
    )
    fields: dict[str, int] = Field(default_factory=dict, description="fields differing most: path -> outputs")
    example_keys: list[str] = Field(default_factory=list)
    floor: float | None = Field(
        default=None, description="below this (the rate relative to self_rate, if any), the verdict is INCONCLUSIVE"
    )

    @property
    def relative(self) -> float | None:
        """The fidelity relative to the baseline's agreement with itself: ``rate / self_rate`` (capped at 1),
        ``rate`` without a second baseline or when the baselines agree completely."""
        if self.rate is None or self.self_rate is None:
            return self.rate
        if self.self_rate == 0:
            return 1.0 if self.rate > 0 else 0.0
        return min(1.0, self.rate / self.self_rate)

    def relative_upper(self, z: float) -> float | None:
        """The one-sided upper confidence bound of :attr:`relative` (``z``: the normal quantile, 1.645 for 95%):
        the Wilson upper bound of ``equal / baseline_outputs`` in place of the rate. A replay is judged unfaithful
        only when even this bound is below the floor: in a window of 100 outputs an agent that samples differs
        from production by ±8 points by chance alone."""
        if self.rate is None:
            return None
        upper = wilson(self.equal, self.baseline_outputs, z)[1]
        if self.self_rate is None:
            return upper
        if self.self_rate == 0:
            return 1.0 if upper > 0 else 0.0
        return min(1.0, upper / self.self_rate)


class NoisePair(BaseModel):
    """One pair of baseline runs (an A/A pair) and how much its two runs differ."""

    pair: str = Field(description='the two runs, e.g. "baseline ~ baseline_3"')
    aligned: int = Field(description="outputs aligned between the two runs")
    differing: int = Field(description="aligned outputs with a difference in any field")
    rate: float = Field(description="differing / aligned")
    missing: int = Field(default=0, description="outputs of the first run missing in the second")
    extra: int = Field(default=0, description="outputs of the second run beyond the first's")


class ComparisonResult(BaseModel):
    """Everything a comparison found. ``summary.json`` is its JSON form."""

    verdict: Verdict
    mode: Mode
    method: str = Field(description="the rule and statistic used, in words")
    reasons: list[Reason]
    fields: list[FieldStat] = Field(description="per-field rates, worst first")
    fields_omitted: dict[str, int] = Field(
        default_factory=dict, description="fields beyond max_fields_listed, not listed: their number by status"
    )
    outputs: FieldStat | None = Field(
        default=None, description="the output-level rate: outputs with a difference in any field ('$')"
    )
    resources: list[ResourceStat] = Field(default_factory=list, description="side-effect calls, worst first")
    content_audits: list[ContentAuditStat] = Field(
        default_factory=list, description="content audits of text fields with a finding in any run (masked examples)"
    )
    meaning: list[MeaningStat] = Field(
        default_factory=list,
        description="text fields: changes that carry meaning (negation, decision word, number, name; the judge's "
        "'different meaning') per field, in the candidate and between the baselines, failures first",
    )
    fidelity: FidelityStat | None = Field(
        default=None, description="the baseline against production's own outputs (when production's were given)"
    )
    noise_pairs: list[NoisePair] = Field(
        default_factory=list,
        description="the A/A pairs the noise was measured on (one per pair of baseline runs): their spread shows how "
        "much the noise itself varies from pair to pair",
    )
    counts: Counts
    key: str
    ignore: list[str]
    inputs: dict[str, str | None] = Field(default_factory=dict)
    examples: list[Example] = Field(default_factory=list)
    missing: list[Unmatched] = Field(default_factory=list)
    extra: list[Unmatched] = Field(default_factory=list)
    config: CompareConfig
    duration_s: float = 0.0
    generated_at: str = ""

    @property
    def worst_field(self) -> FieldStat | None:
        """The field that differs most beyond the noise (first in :attr:`fields`)."""
        return self.fields[0] if self.fields else None

    @property
    def warnings(self) -> list[str]:
        """Messages of the findings that say a setting had no effect (e.g. a rule matching no field)."""
        return [r.message for r in self.reasons if r.code in WARNING_CODES]

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def summary(self) -> dict[str, Any]:
        """A small dict for XCom and logs: verdict, reason codes, worst fields, counts."""
        return {
            "verdict": self.verdict,
            "mode": self.mode,
            "reasons": [r.model_dump() for r in self.reasons if r.severity != "info"],
            "warnings": self.warnings,
            "worst_fields": [
                {
                    "path": f.path,
                    "status": f.status,
                    "noise_rate": f.noise_rate,
                    "candidate_rate": f.candidate_rate,
                }
                for f in self.fields[:5]
            ],
            "counts": self.counts.model_dump(),
            "noise_pairs": self.counts.noise_pairs,
            "fidelity": self.fidelity.rate if self.fidelity is not None else None,
            "fidelity_self": self.fidelity.self_rate if self.fidelity is not None else None,
            "noise": self.noisiest(),
        }

    def noisiest(self, top: int = 5) -> dict[str, float]:
        """The fields in which the two baselines differed, noisiest first: path -> how often they differed."""
        noisy = sorted((f for f in self.fields if f.noise_rate), key=lambda f: (-(f.noise_rate or 0), f.path))
        return {f.path: round(f.noise_rate or 0.0, 4) for f in noisy[:top]}

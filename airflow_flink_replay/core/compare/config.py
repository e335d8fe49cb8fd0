"""Comparison settings: comparators per path, thresholds of the noise rule, gate rules.

Everything here is data (pydantic) so a DAG, the CLI and a YAML/JSON file can all say the same thing.
Defaults are chosen for agent outputs of a few hundred to a few hundred thousand records per run.
"""

from __future__ import annotations

import json
import re
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from airflow_flink_replay.core.compare.content_rules import ContentAudits
from airflow_flink_replay.exceptions import PathError

#: Comparator names. ``auto`` picks one by the value's type (see :func:`CompareConfig.default_comparator`).
ComparatorName = Literal["auto", "exact", "numeric", "text", "set", "multiset", "ignore"]
ListMode = Literal["auto", "index", "set", "multiset"]

#: Always ignored: the replay job's bookkeeping field on every output line.
RESERVED_IGNORE = ("$._replay",)


class FieldRule(BaseModel):
    """How one field (or a family of fields) is compared.

    ``path`` is a JSONPath as produced by flattening, e.g. ``$.label``, ``$.items[*].sku`` or ``$.meta.*``:
    ``[*]`` matches any list index, ``*`` any single name, ``..`` any depth; a rule on an object covers
    every field below it. Any quoting reads the same (``$['priorité']`` is ``$.priorité``); the path is kept
    in the canonical form (:func:`canonical_path`). The first matching rule wins.

    A pipeline's intermediate stages (outputs marked ``_replay.stage``) have fields of their own, flattened as
    ``<stage>:$.path`` (``analysis:$.score``): a rule ``$.score`` applies to the last stage's field only, a
    rule ``analysis:$.score`` to the stage ``analysis``'s, ``*:$.score`` to that field of every intermediate
    stage. The same holds for ``ignore`` and ``map_paths``.
    """

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="JSONPath of the field, e.g. '$.summary' or '$.items[*].price'.")
    comparator: ComparatorName = "auto"
    rel_tol: float | None = Field(default=None, ge=0, description="numeric: relative tolerance")
    abs_tol: float | None = Field(default=None, ge=0, description="numeric: absolute tolerance")
    text_threshold: float | None = Field(
        default=None, ge=0, le=1, description="text: minimum rapidfuzz similarity (0..1) counted as equal"
    )
    must_not_change: bool = Field(
        default=False,
        description="FAIL if the candidate changes this field for any key on which baseline and "
        "baseline-2 agree (without baseline-2: for any key).",
    )

    @field_validator("path")
    @classmethod
    def _path_is_jsonpath(cls, value: str) -> str:
        return canonical_path(value, "field rule path")

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """The compiled matcher for flattened paths."""
        return path_pattern(self.path)


ResourceTypeName = Literal["tool", "vector_store", "chat_model", "embedding_model", "unmediated"]
#: Resource types whose call arguments are compared by default.
ARGUMENTS_COMPARED: tuple[ResourceTypeName, ...] = ("tool", "vector_store", "unmediated")


class AuditRule(BaseModel):
    """A gate rule on side effects, e.g. 'tool issue_refund must never be called for more keys'."""

    model_config = ConfigDict(extra="forbid")

    resource_name: str = Field(description="resource name, or '*' for all (fnmatch pattern)")
    resource_type: str | None = Field(default=None, description="chat_model, tool, vector_store, ...")
    method: str | None = Field(default=None, description="method name (fnmatch pattern); None = any")
    max_new_keys: int = Field(
        default=0, ge=0, description="FAIL if the candidate calls it for more than this many keys the baseline did not"
    )


class CompareConfig(BaseModel):
    """Thresholds and comparators of one comparison. The defaults are documented in docs/comparison.md."""

    model_config = ConfigDict(extra="forbid")

    # --- alignment and flattening
    ignore: list[str] = Field(default_factory=list, description="JSONPaths to leave out ($._replay always is).")
    list_mode: ListMode = Field(
        default="auto",
        description="lists: 'index' compares element by element, 'set' as unordered sets, 'multiset' as "
        "unordered lists that keep duplicates (tool calls, citations), 'auto' = sets for lists of scalars, by "
        "index otherwise",
    )
    fields: list[FieldRule] = Field(default_factory=list, description="per-path comparators and rules")
    map_paths: list[str] = Field(
        default_factory=list,
        description="objects keyed by ids (e.g. '$.decision_by_sku'): their names collapse to '*' and a "
        "change under any of them counts once per output; found automatically too (map_min_keys)",
    )
    map_min_keys: int = Field(
        default=16,
        ge=0,
        description="an object with at least this many distinct names over all outputs, each output holding "
        "on average at most a quarter of them, is a map keyed by ids (0 = no automatic detection)",
    )

    # --- comparator defaults
    rel_tol: float = Field(default=1e-6, ge=0, description="numeric relative tolerance")
    abs_tol: float = Field(default=1e-9, ge=0, description="numeric absolute tolerance")
    text_threshold: float = Field(
        default=0.85, ge=0, le=1, description="text: rapidfuzz normalized similarity at or above which texts are equal"
    )
    text_max_length: int = Field(
        default=10_000,
        ge=1,
        description="text: above this many characters (either side) similarity is measured in linear time, as "
        "the overlap of the two texts' word multisets, instead of rapidfuzz's edit-based ratio (quadratic)",
    )
    text_min_length: int = Field(
        default=32,
        ge=0,
        description="auto comparator: strings with whitespace or at least this long are compared as text, "
        "shorter single tokens (labels, ids) exactly",
    )
    text_meaning: bool = Field(
        default=True,
        description="text: next to similarity, count the changes that carry meaning (negations, decision words, "
        "numbers, names) per field in A vs A' and A vs B, and FAIL (TEXT_MEANING) when the candidate makes one "
        "significantly more often than the baselines (one-sided Fisher exact test)",
    )
    text_meaning_abs_threshold: float = Field(
        default=0.005,
        ge=0,
        le=1,
        description="text meaning: the candidate's share of outputs with a change must exceed the A/A's by more "
        "than this (and by more than rel_threshold of the A/A's share) before the exact test decides",
    )
    text_meaning_words: list[str] = Field(
        default_factory=list,
        description="text meaning: more decision words (besides the built-in list and the values of the outputs' "
        "categorical fields), e.g. ['escalate', 'waive']",
    )
    text_judge: str | None = Field(
        default=None,
        description="text: dotted path ('package.module:ClassName') of a judge with same_meaning(a, b) -> bool | "
        "float (e.g. a chat or embedding model), asked about a sample of the differing texts of A vs A' and A vs B; "
        "its 'different meaning' rate on the A/A is the noise (TEXT_JUDGE). None = off",
    )
    text_judge_connection: str | None = Field(
        default=None,
        description="text judge: the name of the connection it reaches its model through (passed as connection=... "
        "to the judge's class)",
    )
    text_judge_sample: int = Field(
        default=200, ge=1, description="text judge: differing pairs asked about per field, for A vs A' and A vs B each"
    )
    text_judge_threshold: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="text judge: a score below this (when the judge answers with a number, 1 = same) is a different "
        "meaning",
    )

    # --- the noise rule (Diffy) and the significance test
    abs_threshold: float = Field(
        default=0.02, ge=0, le=1, description="candidate rate must exceed the noise rate by this many (absolute)"
    )
    rel_threshold: float = Field(
        default=0.25, ge=0, description="... and by this fraction of the noise rate (relative)"
    )
    alpha: float = Field(
        default=0.05, gt=0, lt=0.5, description="one-sided level of the Newcombe interval for (candidate - noise)"
    )
    max_noise_rate: float = Field(
        default=0.5, gt=0, le=1, description="a field noisier than this cannot decide anything -> INCONCLUSIVE"
    )
    volatile_noise_rate: float | None = Field(
        default=0.98,
        gt=0,
        le=1,
        description="a field differing between the baselines in at least this share of outputs (and at least "
        "min_aligned of them) is volatile — a per-run value such as a request id, trace id, host or timestamp: "
        "listed (VOLATILE_FIELDS) and left out of the verdict and of the outputs-level rate; only its presence "
        "and JSON type are still compared (None = never)",
    )
    distribution_shifts: bool = Field(
        default=True,
        description="with baseline-2: FAIL (DISTRIBUTION_SHIFT) when the candidate shifts where values go beyond "
        "the A/A's, even at the A/A's rate of change: a one-way transition of a categorical field (reject -> "
        "approve), a systematic shift of a number's mean or of a list's item count (beyond the noise rule's "
        "margins, and significant)",
    )
    distribution_shift_alpha: float | None = Field(
        default=None,
        gt=0,
        lt=0.5,
        description="level of the distribution-shift tests, Bonferroni-corrected over the shifts beyond the "
        "margins (None = alpha)",
    )
    min_aligned: int = Field(default=20, ge=1, description="fewer aligned outputs than this -> INCONCLUSIVE")
    exact_max_rate: float = Field(
        default=0.0, ge=0, le=1, description="without baseline-2: a field differing in more outputs than this FAILs"
    )
    numeric_noise_band: bool = Field(
        default=True,
        description="numbers: learn from baseline vs baseline-2 how far each field moves (absolute and relative "
        "band); a candidate difference within either band is noise and not counted",
    )
    numeric_noise_quantile: float = Field(
        default=0.99,
        gt=0,
        le=1,
        description="the band is this quantile of |baseline - baseline-2| over all aligned outputs (outputs "
        "where the number did not move count as 0)",
    )
    numeric_band_by_magnitude: bool = Field(
        default=True,
        description="numbers: learn the bands per magnitude range too (per decade of max(|a|, |a'|): 0.01-0.1, "
        "0.1-1, ...) and judge a difference by its range's bands, so a shift confined to small (or large) values "
        "is seen on a field spanning several orders of magnitude",
    )
    numeric_band_min_pairs: int = Field(
        default=100,
        ge=1,
        description="a magnitude range gets bands of its own when it has at least this many baseline / "
        "baseline-2 pairs; with fewer, its differences are judged by the field's bands",
    )

    # --- missing / extra outputs
    missing_abs_threshold: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="the candidate's missing-output rate must exceed baseline-2's by more than this to FAIL (and, "
        "with baseline-2, significantly: a one-sided Fisher exact test at alpha)",
    )
    extra_abs_threshold: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="the candidate's extra-output rate must exceed baseline-2's by more than this to FAIL (and, "
        "with baseline-2, significantly: a one-sided exact binomial test of the two counts at alpha)",
    )

    # --- side effects
    audit_rules: list[AuditRule] = Field(default_factory=list)
    fail_on_new_resource: bool = Field(
        default=True, description="FAIL if the candidate calls a resource/method the baseline never called"
    )
    fidelity_floor: float | None = Field(
        default=0.9,
        ge=0,
        le=1,
        description="when production's own outputs are compared with the baseline's: a share of equal outputs "
        "below this makes the verdict INCONCLUSIVE (the replay does not reproduce production); None = report only",
    )
    compare_arguments_of: list[ResourceTypeName] = Field(
        default_factory=lambda: list(ARGUMENTS_COMPARED),
        description="resource types whose call arguments are compared per key (a chat model's arguments are the "
        "prompt, which a candidate changes on purpose: its effect shows in the outputs)",
    )
    free_text_threshold: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="a tool's free-text argument (what a model wrote; its audit tells identifying arguments apart) "
        "counts as changed when less alike than this (rapidfuzz, 0..1) to the other run's call with the same "
        "identifying arguments: below the output text threshold, since the identifying arguments pin the call and a "
        "model's paraphrases differ more than its outputs' summaries",
    )
    call_units_below_keys: int = Field(
        default=30,
        ge=0,
        description="with fewer keys than this, calls whose arguments, free text or decision/outcome changed are "
        "rated per call (changed calls / baseline calls), not per key: with 6 keys one key is 16.7% (0 = never)",
    )

    # --- large inputs
    spill_above_mb: int | None = Field(
        default=512,
        ge=0,
        description="inputs larger than this together (MiB) are partitioned by key on disk and compared "
        "partition by partition, so memory stays bounded (0 = always, None = never)",
    )
    spill_part_mb: int = Field(default=64, ge=1, description="input MiB per partition when spilling")
    spill_dir: str | None = Field(default=None, description="folder for the partitions (default: the temp folder)")
    spill_workers: int | None = Field(
        default=None,
        ge=1,
        description="processes that share a spilled comparison, this one included (default: one per CPU; "
        "1 = all in this process); the partitions get smaller so that together they hold what one would",
    )

    # --- content audits of text fields (core/compare/content_audits.py)
    audits: ContentAudits = Field(
        default_factory=ContentAudits,
        description="content audits of text fields: sensitive data, listed words, language, truncation, empty "
        "text, each judged against the baselines' own (docs/comparison.md, 'Content audits')",
    )

    # --- report
    max_examples: int = Field(default=5, ge=0, description="side-by-side examples per field in the report")
    max_listed: int = Field(default=50, ge=0, description="missing/extra outputs listed by key in the report")
    max_fields_listed: int = Field(
        default=500,
        ge=1,
        description="fields listed in the reports (worst first) and in each reason; the rest are counted by status",
    )

    @field_validator("ignore", "map_paths")
    @classmethod
    def _paths_are_jsonpaths(cls, value: list[str]) -> list[str]:
        return [canonical_path(p, "path") for p in value]

    def rule_for(self, path: str) -> FieldRule | None:
        """The first field rule whose pattern matches the flattened ``path`` or an object above it."""
        for rule in self.fields:
            if is_under(rule.regex, path):
                return rule
        return None


#: One step of a path or rule: ("name", str), ("index", int), ("any_index", None), ("any_name", None) for
#: ``.*``, ("descend", None) for ``..``.
Step = tuple[str, Any]

_NAME = re.compile(r"[^.\[]+")
_INDEX = re.compile(r"\[(\d+)\]")
_SQUOTED = re.compile(r"\['((?:[^'\\]|\\.)*)'\]")
_DQUOTED = re.compile(r'\[("(?:[^"\\]|\\.)*")\]')
_SQ_ESCAPE = re.compile(r"\\(.)")

#: One segment of a flattened path, in the canonical form that :func:`segment` writes.
SEGMENT = r"(?:\.[^.\[]+|\[\d+\]|\['(?:[^'\\]|\\.)*'\])"


def segment(name: str) -> str:
    """One name in the canonical path form: ``.name`` for identifiers (any script: ``.priorité``), else
    ``['a b']`` with ``\\`` and ``\'`` escaped. Reports, rules and flattened paths all use this form."""
    if name.isidentifier():
        return "." + name
    return "['" + name.replace("\\", "\\\\").replace("'", "\\'") + "']"


#: A pipeline stage's name (``_replay.stage`` of its outputs).
STAGE_NAME = r"[a-z][a-z0-9_-]*"
_STAGE_PREFIX = re.compile(rf"(?:{STAGE_NAME}|\*):(?=\$)")


def stage_root(stage: str) -> str:
    """The root of an intermediate stage's flattened fields: ``analysis`` -> ``analysis:$`` (its field
    ``$.score`` is ``analysis:$.score``; the last stage's fields keep the root ``$``)."""
    return stage + ":$"


def split_stage(path: str) -> tuple[str, str]:
    """A path or rule's stage prefix and its JSONPath: ``analysis:$.score`` -> ``("analysis:", "$.score")``,
    ``*:$.score`` -> ``("*:", "$.score")`` (a rule on every intermediate stage), ``$.score`` -> ``("", "$.score")``
    (the last stage)."""
    m = _STAGE_PREFIX.match(path)
    if m is None:
        return "", path
    return m.group(), path[m.end() :]


def parse_path(path: str, what: str = "path") -> list[Step]:
    """The steps of a JSONPath rule or flattened path; any quoting (``$['a']``, ``$["caf\\u00e9"]``) reads
    as the same name. A stage prefix (``analysis:$.score``, see :func:`split_stage`) is passed over. Raises
    :class:`PathError` naming the path and the position."""
    i = len(split_stage(path)[0])
    if not path.startswith("$", i):
        raise PathError(f"{what} {path!r} is not a JSONPath: it must start with '$' (e.g. '$.label')")
    steps: list[Step] = []
    i += 1
    while i < len(path):
        if path.startswith("..", i):
            steps.append(("descend", None))
            i += 2 if path.startswith("..[", i) else 1
            continue
        if path.startswith(".*", i) and (i + 2 == len(path) or path[i + 2] in ".["):
            steps.append(("any_name", None))
            i += 2
        elif path[i] == ".":
            m = _NAME.match(path, i + 1)
            if m is None:
                raise PathError(f"{what} {path!r}: a name is missing after '.' at position {i}")
            steps.append(("name", m.group()))
            i = m.end()
        elif path.startswith("[*]", i):
            steps.append(("any_index", None))
            i += 3
        elif (m := _INDEX.match(path, i)) is not None:
            steps.append(("index", int(m.group(1))))
            i = m.end()
        elif (m := _SQUOTED.match(path, i)) is not None:
            steps.append(("name", _SQ_ESCAPE.sub(r"\1", m.group(1))))
            i = m.end()
        elif (m := _DQUOTED.match(path, i)) is not None:
            steps.append(("name", json.loads(m.group(1))))
            i = m.end()
        else:
            raise PathError(f"{what} {path!r}: cannot read {path[i : i + 12]!r} at position {i}")
    return steps


def canonical_path(path: str, what: str = "path") -> str:
    """The one written form of a path or rule (see :func:`segment`), its stage prefix kept; raises
    :class:`PathError`."""
    out = [split_stage(path)[0] + "$"]
    for kind, value in parse_path(path, what):
        if kind == "name":
            seg = segment(value)
            out.append(seg[1:] if out[-1] == ".." and seg.startswith(".") else seg)
        elif kind == "index":
            out.append(f"[{value}]")
        else:
            out.append({"any_index": "[*]", "any_name": ".*", "descend": ".."}[kind])
    return "".join(out)


def path_pattern(path: str) -> re.Pattern[str]:
    """Compile a JSONPath pattern (``$.a.b``, ``$.a[*].b``, ``$.a.*``, ``$..b``, ``$['x y']``) to a regex
    over flattened paths. A pattern also matches everything below it when used with :func:`is_under`.

    A pattern without a stage prefix matches the last stage's paths only; ``analysis:$.score`` matches the
    field ``$.score`` of the intermediate stage ``analysis``, ``*:$.score`` that field of every intermediate
    stage (see :func:`split_stage`)."""
    prefix = split_stage(path)[0]
    out = [STAGE_NAME + ":" if prefix == "*:" else re.escape(prefix), re.escape("$")]
    for kind, value in parse_path(path):
        if kind == "name":
            out.append(re.escape(segment(value)))
        elif kind == "index":
            out.append(re.escape(f"[{value}]"))
        elif kind == "any_index":
            out.append(r"\[\d+\]")
        elif kind == "any_name":
            out.append(SEGMENT)
        else:  # descend: any number of segments, then the next step
            out.append(SEGMENT + "*")
    return re.compile("".join(out))


def is_under(pattern: re.Pattern[str], path: str) -> bool:
    """True if ``path`` is the pattern's path or lies below it (``$.a`` covers ``$.a.b`` and ``$.a[0]``)."""
    m = pattern.match(path)
    return m is not None and (m.end() == len(path) or path[m.end()] in ".[")

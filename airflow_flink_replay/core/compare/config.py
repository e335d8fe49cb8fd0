"""Comparison settings: comparators per path, thresholds of the noise rule, gate rules.

Everything here is data (pydantic) so a DAG, the CLI and a YAML/JSON file can all say the same thing.
Defaults are chosen for agent outputs of a few hundred to a few hundred thousand records per run.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Comparator names. ``auto`` picks one by the value's type (see :func:`CompareConfig.default_comparator`).
ComparatorName = Literal["auto", "exact", "numeric", "text", "set", "ignore"]
ListMode = Literal["auto", "index", "set"]

#: Always ignored: the replay job's bookkeeping field on every output line.
RESERVED_IGNORE = ("$._replay",)


class FieldRule(BaseModel):
    """How one field (or a family of fields) is compared.

    ``path`` is a JSONPath as produced by flattening, e.g. ``$.label``, ``$.items[*].sku`` or ``$.meta.*``:
    ``[*]`` matches any list index, ``*`` any single name, ``..`` any depth. The first matching rule wins.
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
        if not value.startswith("$"):
            raise ValueError(f"field rule path {value!r} must be a JSONPath starting with '$' (e.g. '$.label')")
        return value

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """The compiled matcher for flattened paths."""
        return path_pattern(self.path)


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
        description="lists: 'index' compares element by element, 'set' as unordered sets, "
        "'auto' = sets for lists of scalars, by index otherwise",
    )
    fields: list[FieldRule] = Field(default_factory=list, description="per-path comparators and rules")

    # --- comparator defaults
    rel_tol: float = Field(default=1e-6, ge=0, description="numeric relative tolerance")
    abs_tol: float = Field(default=1e-9, ge=0, description="numeric absolute tolerance")
    text_threshold: float = Field(
        default=0.85, ge=0, le=1, description="text: rapidfuzz normalized similarity at or above which texts are equal"
    )
    text_min_length: int = Field(
        default=32,
        ge=0,
        description="auto comparator: strings with whitespace or at least this long are compared as text, "
        "shorter single tokens (labels, ids) exactly",
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
    min_aligned: int = Field(default=20, ge=1, description="fewer aligned outputs than this -> INCONCLUSIVE")
    exact_max_rate: float = Field(
        default=0.0, ge=0, le=1, description="without baseline-2: a field differing in more outputs than this FAILs"
    )

    # --- missing / extra outputs
    missing_abs_threshold: float = Field(
        default=0.0, ge=0, le=1, description="FAIL if the candidate's missing-output rate exceeds the noise's by more"
    )
    extra_abs_threshold: float = Field(
        default=0.0, ge=0, le=1, description="FAIL if the candidate's extra-output rate exceeds the noise's by more"
    )

    # --- side effects
    audit_rules: list[AuditRule] = Field(default_factory=list)
    fail_on_new_resource: bool = Field(
        default=True, description="FAIL if the candidate calls a resource/method the baseline never called"
    )

    # --- report
    max_examples: int = Field(default=5, ge=0, description="side-by-side examples per field in the report")
    max_listed: int = Field(default=50, ge=0, description="missing/extra outputs listed by key in the report")

    def rule_for(self, path: str) -> FieldRule | None:
        """The first field rule whose pattern matches the flattened ``path``."""
        for rule in self.fields:
            if rule.regex.fullmatch(path):
                return rule
        return None


def path_pattern(path: str) -> re.Pattern[str]:
    """Compile a JSONPath pattern (``$.a.b``, ``$.a[*].b``, ``$.a.*``, ``$..b``, ``$['x y']``) to a regex
    over flattened paths. A pattern also matches everything below it when used with :func:`is_under`."""
    out = []
    i = 0
    while i < len(path):
        if path.startswith("..", i):
            out.append(r"(?:\.[^.\[]+|\[[^\]]+\])*\.")
            i += 2
        elif path.startswith("[*]", i):
            out.append(r"\[\d+\]")
            i += 3
        elif path.startswith(".*", i):
            out.append(r"(?:\.[^.\[]+|\[[^\]]+\])")
            i += 2
        else:
            out.append(re.escape(path[i]))
            i += 1
    return re.compile("".join(out))


def is_under(pattern: re.Pattern[str], path: str) -> bool:
    """True if ``path`` is the pattern's path or lies below it (``$.a`` covers ``$.a.b`` and ``$.a[0]``)."""
    m = pattern.match(path)
    return m is not None and (m.end() == len(path) or path[m.end()] in ".[")

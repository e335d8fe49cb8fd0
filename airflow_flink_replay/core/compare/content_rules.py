"""Settings of the content audits (``compare.audits`` in the spec): which audits run on which text fields.

Data only (pydantic), imported with :mod:`.config` by every process that reads a spec; the audits themselves are
in :mod:`.content_audits`. Paths are JSONPaths in the comparison's canonical form (see :func:`.config.canonical_path`).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: The kinds of sensitive data the sensitive-data audit looks for.
SensitiveKind = Literal["email", "phone", "iban", "card"]
SENSITIVE_KINDS: tuple[SensitiveKind, ...] = ("email", "phone", "iban", "card")


def _canonical(path: str, what: str) -> str:
    from airflow_flink_replay.core.compare.config import canonical_path  # config imports this module

    return canonical_path(path, what)


class ContentAuditRule(BaseModel):
    """The audits of one field (or a family of fields): overrides of the global switches, and more words.

    A rule's path is audited whenever its value is a string, whatever its length or comparator (a short ``$.to``
    field that must not hold another customer's e-mail address, say). The first matching rule wins.
    """

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="JSONPath of the field, e.g. '$.reply' or '$.messages[*].text'.")
    sensitive_data: bool | None = Field(default=None, description="the sensitive-data audit here (None: global)")
    words: list[str] = Field(default_factory=list, description="words looked for here besides the global list")
    word_list: bool | None = Field(default=None, description="the word-list audit here (None: global)")
    language: bool | None = Field(default=None, description="the language audit here (None: global)")
    truncated: bool | None = Field(default=None, description="the truncation audit here (None: global)")
    empty: bool | None = Field(default=None, description="the empty-text audit here (None: global)")

    @field_validator("path")
    @classmethod
    def _path_is_jsonpath(cls, value: str) -> str:
        return _canonical(value, "audits field path")

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """The compiled matcher for flattened paths."""
        from airflow_flink_replay.core.compare.config import path_pattern

        return path_pattern(self.path)


class ContentAudits(BaseModel):
    """Content audits of text fields: findings a reviewer flags even when rare (docs/comparison.md, "Content
    audits"). Each audit counts the outputs whose text shows something the baseline's text for the same input
    does not, per field, in the candidate (A vs B) and between the baselines (A vs A'), and FAILs when the
    candidate's count is significantly higher (one-sided Fisher exact test at ``alpha``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="run the content audits at all")
    sensitive_data: bool = Field(
        default=True,
        description="e-mail addresses, phone numbers, IBANs (mod-97) and card numbers (Luhn) that the baseline's "
        "output for the same input does not hold",
    )
    sensitive_kinds: list[SensitiveKind] = Field(
        default_factory=lambda: list(SENSITIVE_KINDS), description="which kinds of sensitive data are looked for"
    )
    phone_region: str | None = Field(
        default=None,
        description="ISO 3166 region (e.g. 'DE', 'US') of phone numbers written without a country code; None = "
        "only numbers in international form (+49 ...) are recognised",
    )
    words: list[str] = Field(
        default_factory=list,
        description="words or phrases that must not newly appear (profanity, competitor or internal code names), "
        "matched case-insensitively as whole words",
    )
    word_list: bool = Field(default=True, description="the word-list audit (needs words)")
    language: bool = Field(default=True, description="the text's language against the baseline's for the same input")
    language_min_letters: int = Field(
        default=40, ge=1, description="texts with fewer letters than this are too short to identify their language"
    )
    truncated: bool = Field(
        default=True, description="a text ending mid-sentence where the baseline's for the same input ends properly"
    )
    empty: bool = Field(
        default=True, description="an empty or whitespace-only text where the baseline's for the same input is not"
    )
    ignore: list[str] = Field(default_factory=list, description="JSONPaths never audited")
    fields: list[ContentAuditRule] = Field(
        default_factory=list, description="per-field overrides (the first matching rule wins)"
    )

    @field_validator("ignore")
    @classmethod
    def _paths_are_jsonpaths(cls, value: list[str]) -> list[str]:
        return [_canonical(p, "audits ignore path") for p in value]

    @field_validator("phone_region")
    @classmethod
    def _region_is_iso(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z]{2}", value):
            raise ValueError(f"phone_region {value!r}: give a two-letter ISO 3166 region such as 'DE' or 'US'")
        return value.upper() if value is not None else None

    @field_validator("words")
    @classmethod
    def _words_not_blank(cls, value: list[str]) -> list[str]:
        return [w.strip() for w in value if w.strip()]

    @cached_property
    def ignore_patterns(self) -> list[re.Pattern[str]]:
        """The compiled matchers of :attr:`ignore`."""
        from airflow_flink_replay.core.compare.config import path_pattern

        return [path_pattern(p) for p in self.ignore]

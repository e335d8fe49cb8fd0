"""What the content audits found (:mod:`.content_audits`): per audit and field, the counts and masked examples.

Part of the comparison result (``ComparisonResult.content_audits`` in ``summary.json``). Sensitive values are
never stored in clear: every example is masked before it leaves the audit (``j***@m***.com``, ``+49 ** *** **67``,
``DE** **** **** **** **49 31``, ``**** **** **** 1234``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

#: The audits, in the order the report lists them.
AuditName = Literal["sensitive_data", "word_list", "language", "truncated", "empty"]


class ContentExample(BaseModel):
    """One candidate output with a finding: the text around it, the finding itself to highlight, all masked."""

    key: str
    index: int = Field(default=0, description="the output's position among its key's outputs")
    field: str
    what: str = Field(description="the finding in words, e.g. 'phone number +49 ** *** **67 not in the baseline's'")
    before: str = Field(default="", description="the text before the finding (an excerpt, masked)")
    finding: str = Field(default="", description="the finding (masked), highlighted in the report")
    after: str = Field(default="", description="the text after the finding (an excerpt, masked)")
    baseline: str = Field(default="", description="the baseline's text for the same input (an excerpt, masked)")


class ContentAuditStat(BaseModel):
    """One audit on one field: outputs with a finding in the candidate (A vs B) and between the baselines."""

    audit: AuditName
    field: str
    candidate_findings: int = Field(description="aligned candidate outputs with a finding in this field")
    candidate_n: int = Field(description="aligned candidate outputs (the window)")
    noise_findings: int | None = Field(default=None, description="the same for baseline-2 (A vs A')")
    noise_n: int | None = None
    kinds: dict[str, int] = Field(
        default_factory=dict,
        description="candidate outputs per kind of finding: 'email', 'phone', 'iban', 'card'; the word; 'en -> es'",
    )
    noise_kinds: dict[str, int] = Field(default_factory=dict, description="the same between the baselines")
    p_value: float | None = Field(
        default=None, description="one-sided Fisher exact test that the candidate's rate exceeds the A/A's"
    )
    alpha: float | None = Field(default=None, description="the level it was tested at (Bonferroni-corrected)")
    status: Literal["fail", "within_noise", "ok"] = "ok"
    examples: list[ContentExample] = Field(default_factory=list)

"""What the meaning rule and the text judge found (:mod:`.meaning`): per field and change, counts and examples.

Part of the comparison result (``ComparisonResult.meaning`` in ``summary.json``) and of the report, where the
substituted words are highlighted in each example.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

#: The kinds of change the meaning rule looks for, and the judge's own.
MeaningKind = Literal["negation", "decision", "number", "entity", "judge"]


class MeaningExample(BaseModel):
    """One aligned output whose text changed that way: excerpts of both texts around the change."""

    key: str
    index: int = Field(default=0, description="the output's position among its key's outputs")
    baseline: str = Field(description="the baseline's text (an excerpt around the change)")
    other: str = Field(description="the candidate's text, or baseline-2's for an example of the A/A")
    change: str = Field(default="", description="the words that changed, e.g. \"'approved' -> 'declined'\"")


class MeaningStat(BaseModel):
    """One kind of change of one text field: outputs with it between the baselines and in the candidate."""

    field: str
    kind: MeaningKind
    change: str = Field(
        description="what changes, in words: 'insert a negation', \"substitute 'approved' -> 'declined'\", "
        "'change a number', 'change a name', 'different meaning (judge)'"
    )
    signature: str = Field(description="the change as counted: 'negation+', 'decision approv -> declin', 'number'")
    candidate_outputs: int = Field(description="aligned candidate outputs (A vs B) whose text changed that way")
    candidate_n: int = Field(description="aligned candidate outputs (the window)")
    noise_outputs: int | None = Field(default=None, description="the same between the baselines (A vs A')")
    noise_n: int | None = None
    words: dict[str, int] = Field(
        default_factory=dict, description="the candidate's changed words, most frequent first (up to 20 distinct)"
    )
    noise_words: dict[str, int] = Field(default_factory=dict, description="the same between the baselines")
    p_value: float | None = Field(
        default=None,
        description="one-sided exact test that the candidate's rate exceeds the A/A's: Fisher's on the window's "
        "size; for the judge, the binomial test of the sampled counts",
    )
    alpha: float | None = Field(default=None, description="the level it was tested at (Bonferroni-corrected)")
    status: Literal["fail", "within_noise", "uncalibrated", "ok"] = Field(
        default="ok",
        description="fail: significantly more often than between the baselines; within_noise: not; uncalibrated: "
        "no baseline-2 to tell a paraphrase from a change (decides nothing); ok: the candidate never does it",
    )
    asked: int | None = Field(
        default=None, description="judge only: candidate pairs it was asked about (noise_asked: the A/A's)"
    )
    noise_asked: int | None = None
    examples: list[MeaningExample] = Field(default_factory=list, description="the candidate's first examples")
    noise_examples: list[MeaningExample] = Field(default_factory=list, description="the A/A's first examples")

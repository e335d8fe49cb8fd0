"""What the stand-in chat model decides for one review (pure: no Flink Agents import, so it is unit-tested
on the Airflow side; :mod:`examples.review_agent.common.chat_model` wraps it as a chat model connection)."""

from __future__ import annotations

import random
import re
from typing import Any

_RULE = re.compile(r"Reviews mentioning '([^']+)' are (negative|neutral|positive)\.", re.IGNORECASE)

#: At temperature 1: chance that a borderline review gets another label, the score's standard deviation,
#: chance that the summary is paraphrased.
FLIP_CHANCE = 0.2
SCORE_SIGMA = 0.04
PARAPHRASE_CHANCE = 0.6

_SUMMARIES = (
    "{label} ({rating}/5): {words}",
    "{label}, {rating}/5: {words}",
    "{label} ({rating} of 5): {words}",
    "{label} ({rating}/5) - {words}",
)


def classify(
    review: dict[str, Any], system_prompt: str, *, temperature: float = 0.0, rng: random.Random | None = None
) -> dict[str, Any]:
    """The model's decision for one review under ``system_prompt`` (pure; used by the connection).

    ``temperature`` > 0 samples with ``rng`` (see :func:`sample`); 0 is the deterministic decision."""
    rating = int(review.get("rating", 3))
    text = str(review.get("text", ""))
    prior = int(review.get("prior_complaints", 0))
    label = "negative" if rating <= 2 else "neutral" if rating == 3 else "positive"
    rule_hit = None
    for phrase, rule_label in _RULE.findall(system_prompt):
        if phrase.lower() in text.lower():
            label, rule_hit = rule_label.lower(), phrase
            break
    score = (rating - 1) / 4 - 0.1 * min(prior, 3)
    n_words, template = 8, _SUMMARIES[0]
    if temperature > 0:
        label, score, n_words, template = sample(
            label, score, borderline=rating == 3 and rule_hit is None, temperature=temperature, rng=rng
        )
    score = round(min(1.0, max(0.0, score)), 2)
    severity = "high" if label == "negative" and prior >= 2 else "normal"
    summary = template.format(label=label, rating=rating, words=" ".join(text.split()[:n_words]))
    if rule_hit:
        summary += f" [rule: {rule_hit}]"
    return {"label": label, "score": score, "severity": severity, "summary": summary}


def sample(
    label: str, score: float, *, borderline: bool, temperature: float, rng: random.Random | None
) -> tuple[str, float, int, str]:
    """One LLM-like draw around the deterministic decision: ``(label, score, summary words, summary template)``.

    A ``borderline`` review is read generously as ``positive`` with chance ``FLIP_CHANCE x temperature``
    (never as a complaint: the flips do not cascade through the customer's complaint history); the score
    moves by a normal draw of deviation ``SCORE_SIGMA x temperature``; with chance ``PARAPHRASE_CHANCE x
    temperature`` the summary takes another wording and 6 to 10 words of the review."""
    rng = rng or random.Random()
    t = min(max(temperature, 0.0), 1.0)
    if borderline and rng.random() < FLIP_CHANCE * t:
        label = "positive"
    score += rng.gauss(0.0, SCORE_SIGMA * t)
    if rng.random() < PARAPHRASE_CHANCE * t:
        return label, score, rng.randint(6, 10), rng.choice(_SUMMARIES[1:])
    return label, score, 8, _SUMMARIES[0]

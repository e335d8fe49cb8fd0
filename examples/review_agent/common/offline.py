"""The review agent's outputs without Flink: its steps on a list of reviews, for simulations of many runs.

Per review, as :mod:`examples.review_agent.common.triage` does it: the customer's earlier complaints (the
reviews it labelled negative, what the agent recalls from memory), the stand-in chat model's decision
(:func:`~examples.review_agent.common.decision.classify`, seeded by ``seed``, ``session`` and the review as
the connection seeds it), the output, the ``notify_support`` call for a negative label. No Mem0, no Flink:
what it answers is how the comparison judges many runs of a noisy agent (``benchmarks/noisy_gate.py
--simulate``, ``tests/unit/examples/test_noisy_gate_offline.py``).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from examples.review_agent.common.decision import classify


def run_offline(
    reviews: list[dict[str, Any]], prompt: str, session: str, *, temperature: float, seed: int
) -> list[dict[str, Any]]:
    """One run's outputs for ``reviews`` under ``prompt`` (a version's system prompt)."""
    complaints: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    rows = []
    for review in reviews:
        customer = str(review["customer"])
        prior, seen[customer] = complaints[customer], seen[customer] + 1
        verdict = classify(dict(review, prior_complaints=prior), prompt, temperature=temperature,
                           rng=random.Random(f"{seed}|{session}|{review['id']}"))
        complaints[customer] += verdict["label"] == "negative"
        rows.append({"id": review["id"], "customer": customer, **verdict, "count": seen[customer],
                     "prior_complaints": prior,
                     "tools": ["notify_support"] if verdict["label"] == "negative" else []})
    return rows

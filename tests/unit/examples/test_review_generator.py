"""The example's review generator and the documented v2 subset."""

from __future__ import annotations

import itertools

from examples.review_agent.common.generator import generate_reviews, to_kafka_records, v2_changes_label


def test_deterministic_and_keyed() -> None:
    a = generate_reviews(20, seed=3)
    assert a == generate_reviews(20, seed=3)
    assert [e["id"] for e in a] == [f"r-{i}" for i in range(20)]
    assert all(e["ts"] < f["ts"] for e, f in itertools.pairwise(a))
    key, value, ts = next(to_kafka_records(a))
    assert key == a[0]["customer"] and ts == a[0]["ts"] and '"id": "r-0"' in value


def test_v2_subset_is_exactly_rating_3_late_delivery() -> None:
    events = generate_reviews(200, seed=1)
    subset = [e for e in events if v2_changes_label(e)]
    assert subset and len(subset) < len(events)
    for e in subset:
        assert e["rating"] == 3 and "late delivery" in e["text"].lower()
    assert not v2_changes_label({"rating": 2, "text": "late delivery"})
    assert not v2_changes_label({"rating": 3, "text": "late delivery, arrived broken"})

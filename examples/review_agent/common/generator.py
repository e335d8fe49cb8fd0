"""Realistic keyed review events for the review agent (deterministic for a given seed).

An event is ``{"id", "customer", "product", "rating", "text", "ts"}`` (``ts`` = event time, epoch ms). The
Kafka key is the customer, the Kafka record timestamp is ``ts``. A few customers are repeat complainers, so
Mem0 memory (earlier complaints) changes scores and severities. Every fifth review or so is a rating-3
"late delivery" review: the subset whose label v2 changes (:func:`v2_changes_label`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from typing import Any

PRODUCTS = ["headphones", "kettle", "desk lamp", "backpack", "coffee grinder", "running shoes", "router"]

_TEXTS: dict[str, list[str]] = {
    "positive": [
        "Great {p}, works exactly as described and arrived quickly.",
        "Really happy with this {p}, solid build and good value.",
        "The {p} exceeded my expectations, would buy again.",
    ],
    "neutral": [
        "The {p} is okay, nothing special but does the job.",
        "Average {p}; the manual could be clearer.",
    ],
    "late": [
        "The {p} itself is fine but late delivery, it came a week after the promised date.",
        "Late delivery again, the {p} works but I waited ten days.",
    ],
    "negative": [
        "The {p} arrived broken and the box was crushed.",
        "Stopped working after two days, I want a refund for this {p}.",
        "Terrible {p}, cheap plastic and it broke on first use.",
    ],
}


def v2_changes_label(review: dict[str, Any]) -> bool:
    """True for the reviews v2 labels ``negative`` where v1 says ``neutral``.

    Exactly: ``rating == 3`` and ``"late delivery"`` in the text (case-insensitive), and none of v1's
    negative phrases (``broken``, ``refund``) in it. v2 also calls ``notify_support`` for these reviews.
    """
    text = str(review.get("text", "")).lower()
    return (
        int(review.get("rating", 0)) == 3
        and "late delivery" in text
        and "broken" not in text
        and "refund" not in text
    )


def generate_reviews(
    n: int,
    *,
    seed: int = 7,
    customers: int = 6,
    id_prefix: str = "r",
    customer_prefix: str = "c",
    start_ts_ms: int = 1_767_225_600_000,
    step_ms: int = 1_000,
    first_index: int = 0,
) -> list[dict[str, Any]]:
    """``n`` review events; ids ``{id_prefix}-{i}`` from ``first_index``, customers ``{customer_prefix}-{j}``.

    Customers 0 and 1 complain often (repeat complainers); event times increase by ``step_ms``.
    """
    rng = random.Random(seed * 1_000_003 + first_index)
    events = []
    for i in range(first_index, first_index + n):
        cust = rng.randrange(customers)
        product = rng.choice(PRODUCTS)
        roll = rng.random()
        if cust in (0, 1):
            kind = "negative" if roll < 0.5 else "late" if roll < 0.75 else "neutral"
        else:
            kind = "positive" if roll < 0.5 else "late" if roll < 0.7 else "neutral" if roll < 0.85 else "negative"
        rating = {"positive": rng.choice([4, 5]), "neutral": 3, "late": 3, "negative": rng.choice([1, 2])}[kind]
        text = rng.choice(_TEXTS[kind]).format(p=product)
        events.append(
            {
                "id": f"{id_prefix}-{i}",
                "customer": f"{customer_prefix}-{cust}",
                "product": product,
                "rating": rating,
                "text": text,
                "ts": start_ts_ms + i * step_ms,
            }
        )
    return events


def to_kafka_records(events: Iterable[dict[str, Any]], key_field: str = "customer") -> Iterator[tuple[str, str, int]]:
    """``(key, json value, timestamp ms)`` per event."""
    for e in events:
        yield str(e[key_field]), json.dumps(e, sort_keys=True), int(e["ts"])


def produce_reviews(bootstrap: str, topic: str, events: Iterable[dict[str, Any]]) -> int:
    """Produce events to ``topic`` keyed by customer with event-time timestamps; returns the count.

    Flushes per record (``linger.ms=0``): tansu reports wrong end offsets for multi-record batches.
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False})
    n = 0
    for key, value, ts in to_kafka_records(events):
        producer.produce(topic, key=key.encode(), value=value.encode(), timestamp=ts)
        producer.flush(10)
        n += 1
    return n

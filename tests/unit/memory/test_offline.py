"""The offline hashing embedder (memory/offline.py): deterministic, normalised, and meaningful enough."""

from __future__ import annotations

import math

import pytest

from airflow_flink_replay.memory.offline import hashing_embed


def test_hashing_embedder_is_deterministic_normalised_and_meaningful() -> None:
    a, b = hashing_embed("customer likes green tea"), hashing_embed("customer likes green tea")
    assert a == b and len(a) == 64 and math.isclose(sum(v * v for v in a), 1.0)
    tea, tea2, bike = hashing_embed("green tea"), hashing_embed("likes green tea a lot"), hashing_embed("red bicycle")

    def cos(x: list[float], y: list[float]) -> float:
        return sum(p * q for p, q in zip(x, y, strict=True))

    assert cos(tea, tea2) > cos(tea, bike) + 0.2
    assert hashing_embed("", 8) == [1.0] + [0.0] * 7
    with pytest.raises(ValueError):
        hashing_embed("x", 1)

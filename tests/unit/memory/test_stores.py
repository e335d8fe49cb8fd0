"""Store adapters (``memory/stores.py``): Qdrant's canonical vector for fingerprints."""

from __future__ import annotations

import numpy as np

from airflow_flink_replay.memory.stores import QdrantAdapter


def _renormalise(vec: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(vec, axis=-1)[:, np.newaxis]
    return (vec / np.where(norm != 0.0, norm, np.float32(1e-12))).astype(np.float32, copy=False)


def test_qdrant_canonical_vector_is_phase_independent_on_renormalisation_cycles() -> None:
    """float32 re-normalisation does not always converge: the canonical vector must not depend on the phase
    the stored vector is in (qdrant-client's local mode re-normalises stored vectors when it searches)."""
    adapter = object.__new__(QdrantAdapter)
    adapter._is_cosine = True
    rng = np.random.default_rng(7)
    cycling = 0
    for _ in range(400):
        vec = _renormalise(rng.standard_normal((1, 64)).astype(np.float32))
        nxt = _renormalise(vec)
        if np.array_equal(nxt, vec):
            continue
        cycling += 1
        phases = [vec, nxt, _renormalise(nxt), _renormalise(_renormalise(nxt))]
        canon = {tuple(adapter.canonical_vector([float(v) for v in p[0]])) for p in phases}
        assert len(canon) == 1
    assert cycling > 0  # the sample holds vectors that do not converge in one step
    other = adapter.canonical_vector([0.6, 0.8] + [0.0] * 62)
    assert adapter.canonical_vector([0.8, 0.6] + [0.0] * 62) != other  # a real change still shows

"""Hosted Mem0 backend (``memory/hosted.py``): record → payload mapping, the ``add`` request of a fork
copy, and the fork state read back from the copies' metadata.

The Mem0 platform itself cannot be reached here (``MemoryClient`` pings the API when it is built), so no
test talks to it or fakes it: these tests cover what the hosted backend computes from the records it
would exchange with the platform.
"""

from __future__ import annotations

import hashlib

import pytest

from airflow_flink_replay.core.memory_fork import (
    FORK_ID_FIELD,
    FORK_SOURCE_ID_FIELD,
    FORK_SOURCE_NAMESPACE_FIELD,
    FORKED_AT_FIELD,
    Mem0Namespace,
)
from airflow_flink_replay.memory.hosted import (
    FORK_COUNT_FIELD,
    SOURCE_DIGEST_FIELD,
    SOURCE_FINGERPRINT_FIELD,
    SOURCE_HASH_FIELD,
    SOURCE_UPDATED_AT_FIELD,
    hosted_add_request,
    hosted_digest,
    hosted_filters,
    hosted_fork_states,
    hosted_payload,
)

PROD = Mem0Namespace(user_id="prod-job")
REPLAY = Mem0Namespace(user_id="replay-1")
RECORD = {
    "id": "m-1",
    "memory": "customer 7 prefers green tea",
    "user_id": "prod-job",
    "agent_id": "key-7",
    "run_id": "ltm",
    "metadata": {"source": "chat", "score": 3},
    "created_at": "2026-11-01T10:00:00+00:00",
    "updated_at": "2026-11-02T11:00:00+00:00",
}


def test_hosted_payload_and_filters() -> None:
    payload = hosted_payload(RECORD)
    assert payload == {
        "source": "chat",
        "score": 3,
        "data": "customer 7 prefers green tea",
        "hash": hashlib.md5(b"customer 7 prefers green tea").hexdigest(),  # mem0's hash when the platform has none
        "created_at": "2026-11-01T10:00:00+00:00",
        "updated_at": "2026-11-02T11:00:00+00:00",
        "user_id": "prod-job",
        "agent_id": "key-7",
        "run_id": "ltm",
    }
    assert hosted_payload({**RECORD, "hash": "h0"})["hash"] == "h0"
    assert hosted_filters({"user_id": "a", "agent_id": "k"}) == {"AND": [{"user_id": "a"}, {"agent_id": "k"}]}
    with pytest.raises(ValueError, match="at least one of user_id"):
        hosted_filters({})


def test_hosted_add_request_rewrites_scope_keeps_content_adds_provenance() -> None:
    payload = hosted_payload(RECORD)
    digest = hosted_digest("m-1", payload)
    req = hosted_add_request(
        "m-1",
        payload,
        source=PROD,
        target=REPLAY,
        fork_id="run-9",
        forked_at="2026-11-29T00:00:00+00:00",
        source_digest=digest,
        source_fingerprint="f" * 64,
        count=12,
    )
    assert req["messages"] == [{"role": "user", "content": "customer 7 prefers green tea"}]
    assert req["infer"] is False  # verbatim text, no LLM
    assert req["filters"] == {"user_id": "replay-1", "agent_id": "key-7", "run_id": "ltm"}  # only user_id rewritten
    assert req["timestamp"] == 1793527200  # the original created_at
    meta = req["metadata"]
    assert (meta["source"], meta["score"]) == ("chat", 3)
    assert meta[FORK_ID_FIELD] == "run-9" and meta[FORK_SOURCE_ID_FIELD] == "m-1"
    assert meta[FORK_SOURCE_NAMESPACE_FIELD] == PROD.key() and meta[FORKED_AT_FIELD] == "2026-11-29T00:00:00+00:00"
    assert meta[SOURCE_DIGEST_FIELD] == digest[:8].hex() and meta[SOURCE_FINGERPRINT_FIELD] == "f" * 64
    assert meta[SOURCE_HASH_FIELD] == payload["hash"] and meta[SOURCE_UPDATED_AT_FIELD] == payload["updated_at"]
    assert meta[FORK_COUNT_FIELD] == 12
    assert not {"data", "hash", "created_at", "updated_at", "user_id", "agent_id", "run_id"} & set(meta)
    assert "timestamp" not in hosted_add_request(
        "m-1",
        {**payload, "created_at": None},
        source=PROD,
        target=REPLAY,
        fork_id="r",
        forked_at="t",
        source_digest=digest,
        source_fingerprint="f",
        count=1,
    )


def _copies(n: int, *, fork_id: str = "run-9", count: int | None = None) -> dict[str, dict[str, object]]:
    """Target payloads as the platform would return them after re-adding ``n`` of a fork's memories."""
    out = {}
    for i in range(n):
        payload = hosted_payload({**RECORD, "id": f"m-{i}", "memory": f"text {i}"})
        req = hosted_add_request(
            f"m-{i}",
            payload,
            source=PROD,
            target=REPLAY,
            fork_id=fork_id,
            forked_at="t0",
            source_digest=hosted_digest(f"m-{i}", payload),
            source_fingerprint="fp",
            count=count if count is not None else n,
        )
        out[f"new-{fork_id}-{i}"] = hosted_payload(
            {"id": f"new-{i}", "memory": f"text {i}", **req["filters"], "metadata": req["metadata"]}
        )
    return out


def test_hosted_fork_state_from_the_copies_metadata() -> None:
    states = hosted_fork_states({**_copies(3), "own": hosted_payload({**RECORD, "user_id": "replay-1"})})
    assert list(states) == ["run-9"]  # the replay's own memory (no provenance) is not part of the fork
    state = states["run-9"]
    assert state.complete and (state.count, state.present, state.source) == (3, 3, PROD)
    assert (state.forked_at, state.source_fingerprint) == ("t0", "fp")
    assert sorted(state.snapshot) == ["m-0", "m-1", "m-2"] and all(len(d) == 16 for d in state.snapshot.values())
    partial = hosted_fork_states(_copies(2, count=3))["run-9"]  # one copy not (yet) visible
    assert not partial.complete and partial.present == 2
    assert set(hosted_fork_states({**_copies(1), **_copies(1, fork_id="other")})) == {"run-9", "other"}


def test_precopy_on_the_platform_is_a_noop_and_contacts_nothing() -> None:
    """The platform re-embeds and assigns its own ids and hashes: no content digest a delta could trust, so
    the pre-copy does nothing (the fork at the cut copies in full) — and needs no client for it."""
    from airflow_flink_replay.core.memory_fork import Mem0Namespace
    from airflow_flink_replay.memory.hosted import HostedMem0Backend

    backend = HostedMem0Backend(host="https://mem0.example")
    result = backend.precopy(Mem0Namespace(user_id="prod"), Mem0Namespace(user_id="replay-1"), fork_id="run-1")
    assert (result.kind, result.noop, result.count, result.delta) == ("precopy", True, 0, False)
    assert backend._client is None

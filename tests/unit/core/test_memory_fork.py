"""Pure model of the Mem0 fork (core/memory_fork.py): namespaces, fork pairs, ids, fingerprints, snapshots,
provenance."""

from __future__ import annotations

import pytest

from airflow_flink_replay.core.memory_fork import (
    FORK_ID_FIELD,
    FORK_SOURCE_ID_FIELD,
    Mem0Namespace,
    check_fork_pair,
    combine_digests,
    decode_snapshot,
    diff_snapshots,
    encode_snapshot,
    fork_memory_id,
    has_provenance,
    marker_id,
    memory_digest,
    rewrite_payload,
    split_chunks,
    strip_provenance,
)


def test_namespace_coercion_and_errors() -> None:
    assert Mem0Namespace.coerce("job-1").fields() == {"user_id": "job-1"}
    assert Mem0Namespace.coerce('{"agent_id": "k", "run_id": "ltm"}').fields() == {"agent_id": "k", "run_id": "ltm"}
    assert Mem0Namespace.coerce({"user_id": "a"}).key() == '{"user_id":"a"}'
    with pytest.raises(ValueError, match="at least one of user_id"):
        Mem0Namespace.coerce({}, what="source")
    with pytest.raises(ValueError, match=r"source: unknown field\(s\) \['userid'\]"):
        Mem0Namespace.coerce({"userid": "x"}, what="source")
    with pytest.raises(ValueError, match="blank"):
        Mem0Namespace(user_id="  ")
    with pytest.raises(ValueError, match="not valid JSON"):
        Mem0Namespace.coerce("{bad", what="target")


def test_fork_pair_rules() -> None:
    src = Mem0Namespace(user_id="prod")
    check_fork_pair(src, Mem0Namespace(user_id="replay-1"))
    with pytest.raises(ValueError, match="same fields"):
        check_fork_pair(src, Mem0Namespace(user_id="r", run_id="x"))
    with pytest.raises(ValueError, match="equals the source"):
        check_fork_pair(src, Mem0Namespace(user_id="prod"))


def test_ids_are_stable_and_distinct() -> None:
    t = Mem0Namespace(user_id="replay-1")
    assert fork_memory_id("run", t, "m1") == fork_memory_id("run", t.key(), "m1")
    assert fork_memory_id("run", t, "m1") != fork_memory_id("run2", t, "m1")
    assert fork_memory_id("run", t, "m1") != "m1"
    assert marker_id(t) != marker_id(t, 0) != marker_id(Mem0Namespace(user_id="replay-2"))


def test_fingerprint_order_independent_and_sensitive() -> None:
    recs = [(f"id{i}", {"hash": f"h{i}", "updated_at": "t"}, [0.1 * i, 0.2]) for i in range(5)]
    digests = [memory_digest(*r) for r in recs]
    assert combine_digests(digests) == combine_digests(reversed(digests))
    changed = memory_digest("id1", {"hash": "h1", "updated_at": "t"}, [0.1, 0.2000001])
    assert combine_digests([*digests[:1], changed, *digests[2:]]) != combine_digests(digests)
    assert combine_digests(digests[:4]) != combine_digests(digests)
    # float64 read-back of a float32 value digests like the float32 value
    assert memory_digest("a", {}, [0.1]) == memory_digest("a", {}, [float.fromhex("0x1.99999ap-4")])


def test_snapshot_roundtrip_and_diff() -> None:
    before = {f"id{i}": memory_digest(f"id{i}", {"hash": str(i)}, [float(i)]) for i in range(50)}
    text = encode_snapshot(before)
    assert "".join(split_chunks(text, 100)) == text and len(split_chunks(text, 100)) > 1
    snap = decode_snapshot(text)
    now = dict(before)
    del now["id3"]
    now["id7"] = memory_digest("id7", {"hash": "other"}, [7.0])
    now["new"] = memory_digest("new", {}, [1.0])
    assert diff_snapshots(snap, now) == (["new"], ["id3"], ["id7"])
    assert diff_snapshots(snap, before) == ([], [], [])


def test_rewrite_payload_keeps_content_and_adds_provenance() -> None:
    payload = {"data": "likes tea", "hash": "h", "user_id": "prod", "agent_id": "k1", "run_id": "ltm", "x": 1}
    out = rewrite_payload(
        payload,
        source_id="m1",
        source=Mem0Namespace(user_id="prod"),
        target=Mem0Namespace(user_id="replay-1"),
        fork_id="run",
        forked_at="2026-11-29T00:00:00+00:00",
    )
    assert out["user_id"] == "replay-1" and out["agent_id"] == "k1" and out["run_id"] == "ltm"
    assert out[FORK_ID_FIELD] == "run" and out[FORK_SOURCE_ID_FIELD] == "m1" and has_provenance(out)
    assert strip_provenance(out) == {**payload, "user_id": "replay-1"}
    assert payload["user_id"] == "prod" and not has_provenance(payload)


def test_content_digest_changes_with_every_byte_a_fork_copies() -> None:
    """The pre-copy's delta trusts equal content digests: any change to what a copy carries must change it."""
    from types import SimpleNamespace

    from airflow_flink_replay.core.memory_fork import content_digest, precopy_marker_id

    payload = {"data": "likes tea", "hash": "h1", "updated_at": "2026-12-01T10:00:00", "user_id": "p", "n": 1}
    vector = [0.5, -0.25, 0.125]
    base = content_digest("m1", payload, vector)
    assert content_digest("m1", dict(reversed(list(payload.items()))), list(vector)) == base  # key order: no
    changed = [
        content_digest("m2", payload, vector),
        content_digest("m1", {**payload, "data": "likes coffee"}, vector),  # text, same updated_at and hash
        content_digest("m1", {**payload, "n": 2}, vector),  # any other metadata key
        content_digest("m1", {**payload, "extra": None}, vector),
        content_digest("m1", payload, [0.5, -0.25, 0.12500001]),  # one float32 ulp-level change
        content_digest("m1", payload, None),
        content_digest("m1", payload, vector, document="doc"),
        content_digest("m1", payload, {"": vector, "bm25": SimpleNamespace(indices=[3], values=[1.0])}),
        content_digest("m1", payload, {"": vector, "bm25": SimpleNamespace(indices=[4], values=[1.0])}),
    ]
    assert len({base, *changed}) == len(changed) + 1
    target = Mem0Namespace(user_id="t")
    assert precopy_marker_id(target) != marker_id(target) and precopy_marker_id(target, 0) != marker_id(target, 0)

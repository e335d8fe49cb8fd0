"""AuditRecord: digest, preview, JSONL reading."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from airflow_flink_replay.core.audit import (
    PREVIEW_CHARS,
    REPLAY_NAMESPACE,
    AuditRecord,
    args_digest,
    args_preview,
    key_hashes,
    key_text_of,
    name_hashed_keys,
    read_audit,
    typed_key_hashes,
)


def test_digest_is_stable_and_order_independent_for_kwargs() -> None:
    assert args_digest((), {"a": 1, "b": 2}) == args_digest((), {"b": 2, "a": 1})
    assert args_digest((1,), {}) != args_digest((2,), {})
    assert len(args_digest()) == 64


def test_preview_is_truncated() -> None:
    text = args_preview((), {"reason": "x" * 1000})
    assert len(text) == PREVIEW_CHARS and text.endswith("…")
    assert args_preview((), {"a": 1}) == '{"args": [], "kwargs": {"a": 1}}'


def test_for_call_and_read_back(tmp_path: Path) -> None:
    rec = AuditRecord.for_call(variant="candidate", key="c-1", resource_type="tool", resource_name="notify_support",
                               method="call", args=(), kwargs={"review_id": "r-1"}, decision="record",
                               outcome="recorded")
    (tmp_path / "audit-candidate-1.jsonl").write_text(rec.model_dump_json() + "\n")
    [back] = list(read_audit(tmp_path))
    assert back == rec and back.error is None and back.args_digest == args_digest((), {"review_id": "r-1"})


def test_invalid_decision_is_rejected() -> None:
    with pytest.raises(ValidationError, match="decision"):
        AuditRecord(variant="v", key="", resource_type="tool", resource_name="t", method="call", args_digest="0",
                    args_preview="", decision="maybe", outcome="ok")


def test_preview_masks_secrets_at_any_depth_and_keeps_other_fields() -> None:
    text = args_preview((), {"config": {"api_key": "sk-planted", "Password": "p", "max_tokens": 5}, "token": "t"})
    assert "sk-planted" not in text and '"p"' not in text and '"t"' not in text
    assert '"max_tokens": 5' in text and text.count("***") == 3


def test_replay_namespace_reads_the_same_in_every_variant() -> None:
    a = args_digest((), {"user_id": "afr-run1-baseline", "text": "x"}, {"afr-run1-baseline": REPLAY_NAMESPACE})
    b = args_digest((), {"user_id": "afr-run1-candidate", "text": "x"}, {"afr-run1-candidate": REPLAY_NAMESPACE})
    assert a == b
    other = {"user_id": "afr-run1-candidate", "text": "y"}
    assert a != args_digest((), other, {"afr-run1-candidate": REPLAY_NAMESPACE})
    preview = args_preview((), {"user_id": "afr-run1-baseline"}, replace={"afr-run1-baseline": REPLAY_NAMESPACE})
    assert preview == '{"args": [], "kwargs": {"user_id": "<replay-namespace>"}}'


#: What Flink 2.2's ``Row.of(value).hashCode()`` gives — the int the Flink Agents 0.2.0 runtime passes to the
#: per-action context switch for a key PyFlink's ``key_by`` made ``Row(value)`` — read from a JVM (py4j) for:
#: the key "item-1" pickled (cloudpickle, as PyFlink pickles a key of the default key type) and as a Java
#: String (key_type "string"), 123456789012 as a Long ("long") and -7 as an Integer ("int").
JVM_ROW_HASHES = {"pickled item-1": -2044701426, "String item-1": -1178662859, "Long": -1097262522, "Integer": 55}


def test_the_runtime_s_key_hash_of_every_key_type_maps_back_to_the_key() -> None:
    text_hashes = typed_key_hashes("item-1")
    assert JVM_ROW_HASHES["pickled item-1"] in text_hashes and JVM_ROW_HASHES["String item-1"] in text_hashes
    assert set(key_hashes("item-1")) == set(text_hashes)  # the comparison names a text key's hash after the fact
    assert JVM_ROW_HASHES["Long"] in typed_key_hashes(123456789012)
    assert JVM_ROW_HASHES["Integer"] in typed_key_hashes(-7)


def test_a_key_reads_as_its_text_everywhere() -> None:
    assert [key_text_of(k) for k in ("B014IBJKNO", 42, 1.5, b"k-\xff", ("a", 1))] == [
        "B014IBJKNO", "42", "1.5", "k-\\xff", '["a", 1]'
    ]


def test_a_pickled_text_key_s_hash_is_named_after_the_fact() -> None:
    """An action restored in flight runs before its task learnt the key: its pickled key's hash names the key."""
    hashed = str(JVM_ROW_HASHES["pickled item-1"])
    assert name_hashed_keys({"item-1", "item-2", hashed}) == {hashed: "item-1"}
    assert name_hashed_keys({"7", "69"}) == {}  # integer keys never name each other (7 + 62 = 69)

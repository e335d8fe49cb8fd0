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
    read_audit,
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

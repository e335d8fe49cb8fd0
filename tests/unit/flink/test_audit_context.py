"""The audit key hook's name table is per task thread: one job's audit never depends on other jobs' inputs."""

from __future__ import annotations

import threading
import uuid

from airflow_flink_replay.flink import audit_context


def _on_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", fn()))
    t.start()
    t.join()
    return out["v"]


def test_hashes_map_back_to_the_key_learnt_on_this_thread() -> None:
    key = f"cust-{uuid.uuid4().hex[:6]}"
    h = audit_context.java_string_hash(key)
    assert h == _java_hash(key)

    def learn_and_resolve():
        audit_context.learn_key(key)
        return [audit_context.key_text(x) for x in (h, h + 31, h + 62)]

    assert _on_thread(learn_and_resolve) == [key] * 3


def test_another_threads_names_are_not_used() -> None:
    """A key learnt by one task (another job) stays unknown to the next: its hash, as text, every time."""
    key = f"cust-{uuid.uuid4().hex[:6]}"
    _on_thread(lambda: audit_context.learn_key(key))
    h = audit_context.java_string_hash(key) + 62
    assert _on_thread(lambda: audit_context.key_text(h)) == str(h)
    assert audit_context.key_text("text") == "text" and audit_context.key_text(None) == ""


def test_current_key_is_per_thread() -> None:
    audit_context.set_current_key("main-key")
    assert _on_thread(audit_context.current_key) == ""
    assert audit_context.current_key() == "main-key"


def _java_hash(text: str) -> int:
    h = 0
    for ch in text:  # ASCII keys: UTF-16 units = code points
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h

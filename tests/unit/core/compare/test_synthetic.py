"""Synthetic replay outputs with a known truth (``core/compare/synthetic.py``): deterministic records, each knob
changing one thing in a chosen share of keys (the same keys in every run), audit records that match the
outputs, and the JSONL files the comparison reads."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_flink_replay.core.compare.synthetic import (
    LABELS,
    base_record,
    iter_run,
    make_audit,
    make_run,
    write_jsonl,
    write_runs,
)

N = 2000


def test_a_record_is_deterministic_and_looks_like_the_demo_agents_output() -> None:
    rec = base_record(42, "candidate", 1)
    assert rec == base_record(42, "candidate", 1)
    assert set(rec) == {"id", "customer", "label", "score", "summary", "tools", "count", "priority", "_replay"}
    assert rec["id"] == "r-42" and rec["customer"] == "c-42" and rec["label"] in LABELS
    assert 0 <= rec["score"] < 1 and 1 <= rec["count"] <= 8 and "c-42" in rec["summary"]
    assert rec["_replay"] == {"variant": "candidate", "partition": 2, "offset": 85}
    assert base_record(42)["_replay"]["variant"] == "baseline"


def test_a_negative_label_goes_with_the_support_tool_and_high_priority() -> None:
    records = [base_record(i) for i in range(300)]
    assert {r["label"] for r in records} == set(LABELS)
    for r in records:
        negative = r["label"] == "negative"
        assert (r["tools"] == ["notify_support"]) is negative and (r["priority"] == "high") is negative


def test_without_knobs_every_run_holds_the_base_records_in_order() -> None:
    run = make_run(50, "baseline_2", seed=9)
    assert run == [base_record(i, "baseline_2") for i in range(50)]
    assert list(iter_run(50, "baseline_2", seed=9)) == run


def test_several_outputs_per_key_are_numbered_by_count_and_offset() -> None:
    run = make_run(3, outputs_per_key=2)
    assert [(r["id"], r["count"], r["_replay"]["offset"]) for r in run] == [
        ("r-0", 0, 0),
        ("r-0", 1, 1),
        ("r-1", 0, 2),
        ("r-1", 1, 3),
        ("r-2", 0, 4),
        ("r-2", 1, 5),
    ]


def changed(run: list[dict], field: str) -> set[str]:
    return {r["id"] for r, b in zip(run, make_run(len(run)), strict=True) if r[field] != b[field]}


def test_a_label_change_flips_the_same_share_of_keys_in_every_run() -> None:
    b = make_run(N, "candidate", seed=1, label_change=0.1)
    again = make_run(N, "other", seed=2, label_change=0.1)
    flipped = changed(b, "label")
    assert 150 < len(flipped) < 250 and changed(again, "label") == flipped  # the truth a test knows
    base = {r["id"]: r["label"] for r in make_run(N)}
    assert all(LABELS.index(r["label"]) == (LABELS.index(base[r["id"]]) + 1) % 3 for r in b if r["id"] in flipped)
    assert changed(b, "summary") == changed(b, "score") == set()


def test_a_paraphrase_rewords_only_the_summary_keeping_its_customer() -> None:
    b = make_run(N, "candidate", seed=3, paraphrase=0.2)
    reworded = changed(b, "summary")
    assert 300 < len(reworded) < 500
    assert changed(b, "label") == changed(b, "tools") == set()
    by_id = {r["id"]: r for r in b}
    assert all(by_id[k]["customer"] in by_id[k]["summary"] for k in reworded)
    assert changed(make_run(N, "other", seed=4, paraphrase=0.2), "summary") != reworded  # noise: other keys


def test_a_tool_change_adds_the_refund_tool_to_a_share_of_keys() -> None:
    b = make_run(N, "candidate", tool_change=0.05)
    added = {r["id"] for r in b if "issue_refund" in r["tools"]}
    assert 60 < len(added) < 140 and changed(b, "tools") == added
    assert all(r["tools"][-1] == "issue_refund" for r in b if r["id"] in added)


def test_jitter_moves_only_the_score_and_within_its_bound() -> None:
    b = make_run(N, "candidate", jitter=0.01)
    base = make_run(N)
    moves = [abs(x["score"] - y["score"]) for x, y in zip(b, base, strict=True)]
    assert max(moves) <= 0.01 + 1e-9 and sum(m > 0 for m in moves) > N * 0.9
    assert changed(b, "label") == set()


def test_drop_leaves_out_a_share_of_outputs() -> None:
    b = make_run(N, "candidate", seed=5, drop=0.1)
    assert 1700 < len(b) < 1900
    assert [r["id"] for r in b] == sorted({r["id"] for r in b}, key=lambda k: int(k[2:]))  # order kept


def test_the_audit_has_one_chat_call_per_output_and_one_call_per_listed_tool() -> None:
    outputs = make_run(200)
    audit = make_audit(outputs, "baseline")
    chats = [a for a in audit if a["resource_type"] == "chat_model"]
    tools = [a for a in audit if a["resource_type"] == "tool"]
    assert [a["key"] for a in chats] == [o["id"] for o in outputs]
    assert sorted(a["key"] for a in tools) == sorted(o["id"] for o in outputs for _ in o["tools"])
    assert {(a["decision"], a["outcome"]) for a in chats} == {("allow", "ok")}
    assert {(a["decision"], a["outcome"], a["resource_name"]) for a in tools} == {
        ("record", "recorded", "notify_support")
    }
    assert {a["variant"] for a in audit} == {"baseline"} and all(a["error"] is None for a in audit)


def test_extra_tool_keys_call_the_support_tool_where_the_output_does_not() -> None:
    outputs = make_run(N)
    plain = make_audit(outputs, "candidate")
    extra = make_audit(outputs, "candidate", extra_tool_keys=0.1)

    def calls(audit: list[dict]) -> set[str]:
        return {a["key"] for a in audit if a["resource_name"] == "notify_support"}

    added = calls(extra) - calls(plain)
    assert 100 < len(added) < 300
    assert not added & {o["id"] for o in outputs if "notify_support" in o["tools"]}
    assert len(extra) - len(plain) == len(added)  # one more call per such key, never a second one


def test_write_jsonl_writes_one_compact_object_a_line_into_a_new_folder(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "new" / "a.jsonl", iter([{"id": "r-1", "x": [1, 2]}, {"id": "r-2", "é": "✓"}]))
    assert path == tmp_path / "new" / "a.jsonl"
    assert path.read_text(encoding="utf-8").splitlines() == [
        '{"id":"r-1","x":[1,2]}',
        '{"id":"r-2","\\u00e9":"\\u2713"}',
    ]
    assert [json.loads(line) for line in path.read_text().splitlines()][1] == {"id": "r-2", "é": "✓"}


def test_write_runs_writes_a_a_prime_and_b(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, make_run(3), make_run(3, "baseline_2"), [])
    assert (a.name, a2.name, b.name) == ("a.jsonl", "a2.jsonl", "b.jsonl")
    assert len(a.read_text().splitlines()) == 3 and b.read_text() == ""
    assert json.loads(a2.read_text().splitlines()[0])["_replay"]["variant"] == "baseline_2"

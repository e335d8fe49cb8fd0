"""Aligning outputs by key: several outputs of one key pair per input record, whatever the file order."""

from __future__ import annotations

import json
import random
from pathlib import Path

from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.alignment import KeyShape, order_within_keys, replay_order

KEYS = 5
RECORDS = 40


def outputs(variant: str, seed: int, *, timed: bool = True, change: int | None = None) -> list[dict]:
    """Two outputs per input record, 5 keys, 8 records per key, lines shuffled as result topics return them;
    ``change``: the record whose triage output says something else."""
    rows = []
    for i in range(RECORDS):
        key = f"k-{i % KEYS}"
        meta = {"variant": variant, "partition": None, "offset": None, "watermark_ms": 0}
        if timed:
            meta["event_time_ms"] = 10_000 + 10 * i
        label = "neutral" if i == change else ("negative" if i % 3 else "positive")
        rows.append({"id": key, "kind": "triage", "label": label, "seen": i // KEYS, "_replay": meta})
        rows.append({"id": key, "kind": "reply", "text": f"thanks for review {i // KEYS}", "_replay": meta})
    random.Random(seed).shuffle(rows)
    return rows


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def runs(tmp_path: Path, **kwargs) -> tuple[Path, Path, Path]:
    candidate_change = kwargs.pop("change", None)
    return (write(tmp_path / "a.jsonl", outputs("baseline", 1, **kwargs)),
            write(tmp_path / "b.jsonl", outputs("candidate", 2, change=candidate_change, **kwargs)),
            write(tmp_path / "a2.jsonl", outputs("baseline_2", 3, **kwargs)))


def test_shuffled_equal_runs_with_a_key_that_is_not_unique_do_not_differ(tmp_path: Path) -> None:
    a, b, a2 = runs(tmp_path)
    for config in (CompareConfig(), CompareConfig(spill_above_mb=0, spill_part_mb=1, spill_workers=1)):
        result = compare_runs(a, b, a2, key="$.id", config=config)
        assert result.verdict == "PASS", result.reasons
        assert [f.path for f in result.fields if f.candidate_diffs or f.noise_diffs] == []
        assert result.counts.aligned_candidate == 80 and result.counts.alignment == "event_time"
        [reason] = [r for r in result.reasons if r.code == "ALIGNMENT"]
        assert reason.severity == "info"
        assert reason.message == ("compare key $.id is not unique per output (5 keys, 80 outputs, up to 16 per "
                                  "key): outputs aligned per input record (key + event time)")


def test_a_changed_output_is_found_in_its_input_record(tmp_path: Path) -> None:
    a, b, a2 = runs(tmp_path, change=17)
    result = compare_runs(a, b, a2, key="$.id")
    assert {f.path: f.candidate_diffs for f in result.fields if f.candidate_diffs} == {"$.label": 1}


def test_without_event_times_the_order_within_the_key_is_said(tmp_path: Path) -> None:
    a, b, a2 = runs(tmp_path, timed=False)
    result = compare_runs(a, b, a2, key="$.id")
    assert result.counts.alignment == "file_order"
    [reason] = [r for r in result.reasons if r.code == "ALIGNMENT"]
    assert reason.message.endswith("outputs aligned by their order within the key (the outputs carry no event time)")


def test_a_unique_key_says_nothing(tmp_path: Path) -> None:
    rows = [{"id": f"r-{i}", "label": "x", "_replay": {"variant": "a", "event_time_ms": i}} for i in range(30)]
    a = write(tmp_path / "a.jsonl", rows)
    result = compare_runs(a, a, a, key="$.id")
    assert result.counts.alignment == "unique_key" and "ALIGNMENT" not in {r.code for r in result.reasons}


def test_replay_order_prefers_the_input_offset_then_the_event_time() -> None:
    assert replay_order({"_replay": {"partition": 1, "offset": 7, "event_time_ms": 5}}) == (1, 7)
    assert replay_order({"_replay": {"partition": None, "offset": None, "event_time_ms": 5}}) == (5,)
    assert replay_order({"_replay": {"event_time_ms": True}}) is None
    assert replay_order({"_replay": {"event_time_ms": None}}) is None and replay_order({"id": 1}) is None


def test_outputs_of_one_record_are_ordered_by_content_and_mixed_orders_keep_the_file_order() -> None:
    by_key = {"k": [({"v": "b"}, 1, (5,)), ({"v": "a"}, 2, (5,)), ({"v": "c"}, 3, (4,))],
              "mixed": [({"v": "b"}, 1, (5,)), ({"v": "a"}, 2, (0, 9)), ({"v": "c"}, 3, None)]}
    order_within_keys(by_key)
    assert [e[0]["v"] for e in by_key["k"]] == ["c", "a", "b"]
    assert [e[0]["v"] for e in by_key["mixed"]] == ["b", "a", "c"]


def test_key_shape_of_raw_outputs() -> None:
    rows = [{"id": "a", "_replay": {"event_time_ms": 1}}, {"id": "a", "_replay": {"event_time_ms": 2}},
            {"id": "b"}, {"id": "c"}, {"id": "c"}, {"id": "c"}, {"no": "key"}]
    shape = KeyShape.of(rows, "$.id")
    assert (shape.keys, shape.outputs, shape.several, shape.most) == (3, 6, 2, 3)
    assert shape.not_unique("$.id") == ("compare key $.id is not unique per output (3 keys, 6 outputs, 2 of the "
                                        "keys with several, up to 3 per key)")
    assert shape.alignment() == ("outputs aligned per input record (key + event time) for 1 key, by their order "
                                 "within the key (the outputs carry no event time) for 1 key")

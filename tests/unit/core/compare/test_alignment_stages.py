"""A pipeline's intermediate stages in the alignment (``core/compare/alignment.py``): an output marked
``_replay.stage`` is keyed and flattened as its stage's, so it aligns with the same stage's outputs only and its
fields form a group of their own; the last stage's outputs (no stage) are loaded as they always were."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare.alignment import (
    KeyShape,
    Run,
    fill_run,
    keyed_output,
    stage_key,
    stage_of,
)
from airflow_flink_replay.core.compare.config import RESERVED_IGNORE
from airflow_flink_replay.core.compare.paths import Flattener, compile_key
from airflow_flink_replay.core.compare.spill import partition_run


def output(i: int, stage: Any = None, **fields: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"variant": "baseline", "event_time_ms": 1000 + i, "partition": None, "offset": None}
    if stage is not None:
        meta["stage"] = stage
    return {"id": f"k-{i}", "score": 0.5, **fields, "_replay": meta}


@pytest.mark.parametrize(
    ("obj", "stage"),
    [
        ({"_replay": {"stage": "analysis"}}, "analysis"),
        ({"_replay": {"stage": "risk-2"}}, "risk-2"),
        ({"_replay": {"stage": None}}, None),
        ({"_replay": {"stage": ""}}, None),
        ({"_replay": {"stage": 3}}, None),
        ({"_replay": {"stage": ["analysis"]}}, None),
        ({"_replay": {"variant": "baseline"}}, None),
        ({"_replay": "analysis"}, None),
        ({"stage": "analysis"}, None),  # a field of the output, not the replay's mark
        ({}, None),
    ],
)
def test_stage_of_reads_a_non_empty_string_from_the_replay_block_only(obj: dict[str, Any], stage: str | None) -> None:
    assert stage_of(obj) == stage


def test_a_stage_output_is_keyed_and_flattened_as_its_stage_s() -> None:
    flattener = Flattener(list(RESERVED_IGNORE))
    key, flat = keyed_output(output(1, "analysis"), "k-1", flattener, "a.jsonl", 7)
    assert (key, flat) == (stage_key("analysis", "k-1"), {"analysis:$.id": "k-1", "analysis:$.score": 0.5})
    assert key == "analysis:k-1"
    assert keyed_output(output(1), "k-1", flattener, "a.jsonl", 8) == ("k-1", {"$.id": "k-1", "$.score": 0.5})
    assert keyed_output(output(1, 0), 1, flattener, "a.jsonl", 8) == ("1", {"$.id": "k-1", "$.score": 0.5})


def load(rows: list[dict[str, Any]]) -> Run:
    flattener = Flattener(list(RESERVED_IGNORE))
    return fill_run(Run(name="baseline", source="a.jsonl"), enumerate(rows, 1), compile_key("$.id"), flattener)


def test_outputs_of_one_key_in_two_stages_are_grouped_apart() -> None:
    rows = [output(1), output(1, "analysis", note="x"), output(2, "analysis"), output(2, "triage"), output(3, "")]
    run = load(rows)
    assert run.count == 5 and run.unkeyed == 0
    assert sorted(run.by_key) == ["analysis:k-1", "analysis:k-2", "k-1", "k-3", "triage:k-2"]
    assert run.by_key["analysis:k-1"] == [
        ({"analysis:$.id": "k-1", "analysis:$.score": 0.5, "analysis:$.note": "x"}, 2, (1001,))
    ]
    assert run.by_key["k-1"] == [({"$.id": "k-1", "$.score": 0.5}, 1, (1001,))]
    assert run.paths == {
        "$.id",
        "$.score",
        "analysis:$.id",
        "analysis:$.score",
        "analysis:$.note",
        "triage:$.id",
        "triage:$.score",
    }


def test_a_stage_marked_with_something_else_than_a_name_is_the_last_stage() -> None:
    run = load([output(1, 7), output(2, True), output(3, {"name": "analysis"})])
    assert sorted(run.by_key) == ["k-1", "k-2", "k-3"]
    assert run.paths == {"$.id", "$.score"}


def test_a_spilled_run_keys_and_flattens_stage_outputs_as_a_loaded_one(tmp_path: Path) -> None:
    rows = [output(i % 3, stage) for i in range(9) for stage in (None, "analysis")]
    source = tmp_path / "a.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spilled = partition_run("baseline", source, compile_key("$.id"), Flattener(list(RESERVED_IGNORE)), tmp_path, 2)
    loaded = load(rows)
    parts = [spilled.load(i) for i in range(2)]
    assert {k: v for p in parts for k, v in p.by_key.items()} == loaded.by_key
    assert spilled.run.paths == loaded.paths and spilled.run.count == 18


def test_the_key_shape_counts_a_stage_s_outputs_under_its_own_keys() -> None:
    shape = KeyShape.of([output(1), output(1, "analysis"), output(2)], "$.id")
    assert (shape.keys, shape.outputs, shape.several) == (3, 3, 0)

"""Fidelity of a pipeline's replay (``core/compare/fidelity.py``): production's sink holds the last stage's outputs
only, so the outputs of intermediate stages (``_replay.stage``) are left out of the measurement on every side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow_flink_replay.core.compare import compare_runs
from airflow_flink_replay.core.compare.fidelity import FidelityReference, measure_fidelity, with_fidelity

N = 40


def write(path: Path, data: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in data))
    return path


def last_stage(variant: str | None) -> list[dict[str, Any]]:
    out = []
    for i in range(N):
        row: dict[str, Any] = {"id": f"r-{i}", "label": "positive", "score": 0.5}
        if variant is not None:
            row["_replay"] = {"variant": variant, "event_time_ms": 1000 + i}
        out.append(row)
    return out


def stage(variant: str, name: str = "analysis") -> list[dict[str, Any]]:
    """One output of the stage per record, with the last stage's keys and event times and other fields."""
    return [
        {"id": f"r-{i}", "topic": "kettle", "_replay": {"variant": variant, "event_time_ms": 1000 + i, "stage": name}}
        for i in range(N)
    ]


def test_a_baseline_s_stage_outputs_are_not_measured_against_production(tmp_path: Path) -> None:
    base = write(tmp_path / "a.jsonl", last_stage("baseline") + stage("baseline") + stage("baseline", "triage"))
    production = write(tmp_path / "p.jsonl", last_stage(None))
    result = compare_runs(base, base, base, key="$.id")
    stat = measure_fidelity(base, production, key="$.id", ignore=result.ignore)
    assert (stat.baseline_outputs, stat.aligned, stat.equal, stat.rate, stat.fields) == (N, N, N, 1.0, {})
    assert with_fidelity(result, stat).verdict == "PASS"


def test_stage_outputs_are_left_out_of_baseline_2_and_production_too(tmp_path: Path) -> None:
    base = write(tmp_path / "a.jsonl", last_stage("baseline"))
    base_2 = write(tmp_path / "a2.jsonl", stage("baseline_2") + last_stage("baseline_2"))
    production = write(tmp_path / "p.jsonl", last_stage(None) + stage("production"))
    reference = FidelityReference(base, key="$.id", ignore=[], baseline_2=base_2)
    assert (reference.baseline_outputs, reference.self_rate) == (N, 1.0)
    stat = reference.measure(production)
    assert (stat.production_outputs, stat.equal, stat.rate) == (N, N, 1.0)

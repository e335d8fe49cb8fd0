"""A pipeline's intermediate stages in the comparison (``core/compare/engine.py``): a stage's outputs (marked
``_replay.stage``) align with the same stage's outputs only, their fields are named after the stage
(``analysis:$.score``) in every report, a change in them alone FAILs naming the stage, and rules target them
with the stage's prefix."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare import (
    CompareConfig,
    FieldRule,
    compare_runs,
    render_html,
    render_junit,
    write_reports,
)
from airflow_flink_replay.core.compare.reports import headline

N = 40
SPILLED = CompareConfig(spill_above_mb=0, spill_part_mb=1, spill_workers=1)


def rows(variant: str, *, stage_score: float = 0.2, stage: str | None = "analysis") -> list[dict[str, Any]]:
    """Per key one output of the last stage and one of the stage ``analysis`` (same ``$.id``, both a
    ``$.score``); the last stage's come first in the file, the stage's after them in reverse order."""
    last, staged = [], []
    for i in range(N):
        meta = {"variant": variant, "event_time_ms": 1000 + i, "partition": None, "offset": None, "watermark_ms": 0}
        last.append({"id": f"k-{i}", "label": "approve", "score": 0.9, "_replay": meta})
        if stage is not None:
            staged.append(
                {"id": f"k-{i}", "score": stage_score, "summary": "fine", "_replay": {**meta, "stage": stage}}
            )
    return last + staged[::-1]


def write(path: Path, data: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in data))
    return path


def runs(tmp_path: Path, *, candidate_score: float = 0.2) -> tuple[Path, Path, Path]:
    return (
        write(tmp_path / "a.jsonl", rows("baseline")),
        write(tmp_path / "b.jsonl", rows("candidate", stage_score=candidate_score)),
        write(tmp_path / "a2.jsonl", rows("baseline_2")),
    )


@pytest.mark.parametrize("config", [CompareConfig(), SPILLED], ids=["in_memory", "spilled"])
def test_equal_stage_outputs_pass_and_count_as_outputs(tmp_path: Path, config: CompareConfig) -> None:
    a, b, a2 = runs(tmp_path)
    result = compare_runs(a, b, a2, key="$.id", config=config)
    assert result.verdict == "PASS", result.reasons
    assert (result.counts.baseline, result.counts.aligned_candidate, result.counts.keys) == (2 * N, 2 * N, 2 * N)
    assert result.counts.alignment == "unique_key"  # a key's two outputs are of two stages: one each
    paths = {f.path for f in result.fields}
    assert {"$.score", "$.label", "analysis:$.score", "analysis:$.summary"} <= paths
    assert not [p for p in paths if "_replay" in p]


@pytest.mark.parametrize("config", [CompareConfig(), SPILLED], ids=["in_memory", "spilled"])
def test_a_change_only_in_a_stage_s_field_fails_naming_the_stage(tmp_path: Path, config: CompareConfig) -> None:
    a, b, a2 = runs(tmp_path, candidate_score=0.7)
    result = compare_runs(a, b, a2, key="$.id", config=config)
    assert result.verdict == "FAIL"
    changed = {f.path: f.candidate_diffs for f in result.fields if f.candidate_diffs}
    assert changed == {"analysis:$.score": N}  # the last stage's $.score is unchanged
    [reason] = [r for r in result.reasons if r.code == "FIELD_REGRESSION"]
    assert reason.fields == ["analysis:$.score"] and reason.message.startswith("analysis:$.score differs")
    assert "analysis" in headline(result)
    assert {e.key for e in result.examples} <= {f"analysis:k-{i}" for i in range(N)}


def test_a_change_in_a_stage_fails_by_exact_rules_without_baseline_2(tmp_path: Path) -> None:
    a, b, _ = runs(tmp_path, candidate_score=0.7)
    result = compare_runs(a, b, key="$.id")
    assert result.verdict == "FAIL"
    assert any("analysis:$.score" in r.message for r in result.reasons if r.severity == "fail")


def test_a_stage_s_output_never_aligns_with_a_last_stage_output_of_the_same_key(tmp_path: Path) -> None:
    # the same outputs, the candidate's marked as the stage 'analysis': without the stage they would all align equal
    a = write(tmp_path / "a.jsonl", rows("baseline", stage=None))
    b = write(
        tmp_path / "b.jsonl", [{**r, "_replay": {**r["_replay"], "stage": "analysis"}} for r in rows("x", stage=None)]
    )
    result = compare_runs(a, b, a, key="$.id")
    assert result.counts.aligned_candidate == 0
    assert (result.counts.missing_in_candidate, result.counts.extra_in_candidate) == (N, N)
    assert result.verdict == "FAIL"
    assert {"MISSING_OUTPUTS", "EXTRA_OUTPUTS"} <= {r.code for r in result.reasons}


def test_two_stages_of_one_key_align_each_with_its_own(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", rows("baseline") + rows("baseline", stage="triage")[N:])
    b = write(tmp_path / "b.jsonl", rows("candidate", stage_score=0.7) + rows("candidate", stage="triage")[N:][::-1])
    result = compare_runs(a, b, a, key="$.id")
    assert result.counts.aligned_candidate == 3 * N
    assert {f.path: f.candidate_diffs for f in result.fields if f.candidate_diffs} == {"analysis:$.score": N}


@pytest.mark.parametrize(
    ("config", "verdict"),
    [
        (CompareConfig(fields=[FieldRule(path="$.score", comparator="numeric", abs_tol=1.0)]), "FAIL"),
        (CompareConfig(ignore=["$.score"]), "FAIL"),
        (CompareConfig(fields=[FieldRule(path="analysis:$.score", comparator="numeric", abs_tol=1.0)]), "PASS"),
        (CompareConfig(fields=[FieldRule(path="*:$.score", comparator="numeric", abs_tol=1.0)]), "PASS"),
        (CompareConfig(fields=[FieldRule(path="analysis:$['score']", comparator="ignore")]), "PASS"),
        (CompareConfig(ignore=["analysis:$.score"]), "PASS"),
        (CompareConfig(ignore=["*:$"]), "PASS"),
    ],
    ids=[
        "last_rule",
        "last_ignore",
        "stage_rule",
        "any_stage_rule",
        "stage_comparator_ignore",
        "stage_ignore",
        "all_stages",
    ],
)
def test_a_rule_targets_a_stage_s_field_by_its_prefix_only(tmp_path: Path, config: CompareConfig, verdict: str) -> None:
    a, b, a2 = runs(tmp_path, candidate_score=0.7)
    result = compare_runs(a, b, a2, key="$.id", config=config)
    assert result.verdict == verdict, result.reasons
    assert not [r for r in result.reasons if r.code == "RULE_MATCHES_NOTHING"]


def test_a_rule_for_a_stage_that_is_not_there_matches_nothing(tmp_path: Path) -> None:
    a, b, a2 = runs(tmp_path)
    config = CompareConfig(ignore=["triage:$.score"], fields=[FieldRule(path="triage:$.summary", comparator="text")])
    result = compare_runs(a, b, a2, key="$.id", config=config)
    assert {r.fields[0] for r in result.reasons if r.code == "RULE_MATCHES_NOTHING"} == {
        "triage:$.score",
        "triage:$.summary",
    }


def test_every_report_names_the_stage_s_field(tmp_path: Path) -> None:
    a, b, a2 = runs(tmp_path, candidate_score=0.7)
    result = compare_runs(a, b, a2, key="$.id")
    summary = result.summary()
    assert summary["worst_fields"][0]["path"] == "analysis:$.score"
    assert summary["reasons"][0]["fields"] == ["analysis:$.score"]
    html = render_html(result)
    assert '<code id="worst-field">analysis:$.score</code>' in html
    suite = ET.fromstring(render_junit(result).split("\n", 1)[1])
    failures = [f.get("message") or "" for f in suite.iter("failure")]
    assert any("analysis:$.score" in m for m in failures)
    assert "analysis:$.score" in {c.get("name") for c in suite.iter("testcase")}
    written = write_reports(result, tmp_path / "out")
    assert "analysis:$.score" in Path(written["summary"]).read_text()

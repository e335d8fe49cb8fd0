"""JSON types are part of the value (issue 41, item 1).

In Python ``1 == True`` and ``0 == False``: two outputs that differ only by a boolean that became a number
compared equal before any comparator ran, and the candidate PASSed. A change of JSON type (boolean, number,
string, null, object, array) is its own kind of difference, judged against the A/A like any other; ``1`` and
``1.0`` stay the same number. Each test failed before the change it covers (the ones marked "kept" guard
against over-correcting).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.audit import AuditRecord
from airflow_flink_replay.core.compare import CompareConfig, FieldRule, compare_runs
from airflow_flink_replay.core.compare.reports import render_html, render_junit
from airflow_flink_replay.core.compare.result import ComparisonResult, FieldStat
from airflow_flink_replay.core.compare.synthetic import write_jsonl, write_runs

N = 300


def field(result: ComparisonResult, path: str) -> FieldStat:
    return next(f for f in result.fields if f.path == path)


def fail_fields(result: ComparisonResult) -> set[str]:
    return {f for r in result.reasons if r.severity == "fail" for f in r.fields}


def decisions(n: int, value: Any = None) -> list[dict[str, Any]]:
    """``approved`` is a boolean (alternating), or ``value(i)`` when given."""
    return [{"id": f"r-{i}", "label": "ok", "approved": value(i) if value else bool(i % 2)} for i in range(n)]


def test_boolean_that_becomes_a_number_in_every_output_fails(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, decisions(N), decisions(N), decisions(N, lambda i: i % 2))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL", result.reasons
    stat = field(result, "$.approved")
    assert stat.status == "regression" and stat.candidate_diffs == N
    assert "$.approved" in fail_fields(result)
    kind = next(k for k in stat.kinds if k.kind == "type boolean -> number")
    assert kind.candidate_diffs == N and kind.noise_diffs == 0
    message = next(r.message for r in result.reasons if r.code == "FIELD_REGRESSION")
    assert "type boolean -> number in 100.0% of outputs" in message, message


def test_the_type_change_is_shown_in_the_example(tmp_path: Path) -> None:
    a, a2, b = write_runs(tmp_path, decisions(N), decisions(N), decisions(N, lambda i: i % 2))
    result = compare_runs(a, b, a2, key="$.id")
    example = next(e for e in result.examples if e.field == "$.approved")
    value = next(v for v in example.values if v.path == "$.approved")
    assert value.candidate_differs and value.kind == "type boolean -> number"
    assert (value.baseline, value.candidate) in (("true", "1"), ("false", "0"))
    assert "type boolean -&gt; number: 300 vs A/A 0" in render_html(result)  # in the fields table
    assert "type boolean -&gt; number: 300 vs A/A 0" in render_junit(result)


@pytest.mark.parametrize(
    ("before", "after", "transition"),
    [
        (False, 0, "type boolean -> number"),
        (0, False, "type number -> boolean"),
        ("", None, "type string -> null"),
        ([], {}, "type array -> object"),
        ("yes", True, "type string -> boolean"),
    ],
)
def test_each_change_of_json_type_counts_and_is_named(tmp_path: Path, before: Any, after: Any, transition: str) -> None:
    a, a2, b = write_runs(
        tmp_path, decisions(N, lambda i: before), decisions(N, lambda i: before), decisions(N, lambda i: after)
    )
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL", result.reasons
    stat = field(result, "$.approved")
    assert stat.candidate_diffs == N
    assert [k.kind for k in stat.kinds] == [transition]


def test_int_and_float_of_the_same_value_are_the_same_number(tmp_path: Path) -> None:
    """Kept: ``1`` and ``1.0`` are one JSON number, also under an exact rule and inside a list compared as a set."""

    def outs(as_float: bool) -> list[dict[str, Any]]:
        return [
            {
                "id": f"r-{i}",
                "count": float(i % 5) if as_float else i % 5,
                "ids": [float(i), 2.0] if as_float else [i, 2],
            }
            for i in range(N)
        ]

    a, a2, b = write_runs(tmp_path, outs(False), outs(False), outs(True))
    for config in (CompareConfig(), CompareConfig(fields=[FieldRule(path="$.count", comparator="exact")])):
        result = compare_runs(a, b, a2, key="$.id", config=config)
        assert result.verdict == "PASS", result.reasons
        assert field(result, "$.count").candidate_diffs == 0
        assert field(result, "$.ids").candidate_diffs == 0


def test_a_boolean_that_becomes_a_number_inside_a_list_or_a_map_counts(tmp_path: Path) -> None:
    """``[true]`` vs ``[1]`` (a list kept whole) and a map keyed by ids whose members turn into numbers."""

    def outs(number: bool) -> list[dict[str, Any]]:
        flag = (lambda v: int(v)) if number else (lambda v: v)
        return [
            {
                "id": f"r-{i}",
                "flags": [flag(True), "x"],
                "ok_by_sku": {f"SKU{i * 2 + j:05d}": flag(bool(j)) for j in range(2)},
            }
            for i in range(N)
        ]

    a, a2, b = write_runs(tmp_path, outs(False), outs(False), outs(True))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL", result.reasons
    assert field(result, "$.flags").candidate_diffs == N
    group = field(result, "$.ok_by_sku.*")
    assert group.candidate_diffs == N
    assert [k.kind for k in group.kinds] == ["type boolean -> number"]


def summaries(n: int, seed: int, paraphrase: float, null: float = 0.0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    words = (
        "The customer asks for a refund of the last order.",
        "A refund of the last order is what the customer wants.",
    )
    out = []
    for i in range(n):
        summary: str | None = words[1] if rng.random() < paraphrase else words[0]
        if null and rng.random() < null:
            summary = None
        out.append({"id": f"r-{i}", "summary": summary})
    return out


def test_string_that_becomes_null_is_judged_on_its_own_even_in_a_noisy_field(tmp_path: Path) -> None:
    """The A/A rewords the summary in about 60 % of outputs (too noisy to decide); the candidate also empties it
    (null) in a fifth of them, which the A/A never does. The field's rate hides it in the paraphrases; the change
    of type, judged against the A/A's changes of type (none), FAILs."""
    a, a2, b = write_runs(tmp_path, summaries(1000, 1, 0.5), summaries(1000, 2, 0.5), summaries(1000, 3, 0.5, null=0.2))
    result = compare_runs(a, b, a2, key="$.id", config=CompareConfig(text_threshold=0.99))
    stat = field(result, "$.summary")
    kind = next(k for k in stat.kinds if k.kind == "type string -> null")
    assert kind.noise_diffs == 0 and 150 < kind.candidate_diffs < 250
    assert stat.status == "regression", stat
    assert result.verdict == "FAIL", result.reasons
    message = next(r.message for r in result.reasons if r.code == "FIELD_REGRESSION")
    assert "type string -> null" in message, message


def test_type_changes_as_frequent_as_in_the_a_a_pass(tmp_path: Path) -> None:
    """Kept: an agent that sometimes answers null does so in the A/A as often as in the candidate."""
    a, a2, b = write_runs(
        tmp_path, summaries(1000, 1, 0.0, 0.1), summaries(1000, 2, 0.0, 0.1), summaries(1000, 3, 0.0, 0.1)
    )
    result = compare_runs(a, b, a2, key="$.id")
    stat = field(result, "$.summary")
    assert stat.noise_diffs and stat.candidate_diffs
    assert {k.kind for k in stat.kinds} >= {"type string -> null", "type null -> string"}
    assert stat.status == "ok" and result.verdict == "PASS", result.reasons


def test_type_changes_are_seen_when_the_runs_are_partitioned_on_disk(tmp_path: Path) -> None:
    """The baselines hold numbers and the candidate booleans: the candidate and baseline-2 are partitioned in a
    worker process, whose flattener alone saw the booleans (merged back before aligning)."""
    numbers = decisions(N, lambda i: i % 2)
    a, a2, b = write_runs(tmp_path, numbers, numbers, decisions(N))
    result = compare_runs(a, b, a2, key="$.id", config=CompareConfig(spill_above_mb=0, spill_workers=2))
    assert result.verdict == "FAIL", result.reasons
    stat = field(result, "$.approved")
    assert [(k.kind, k.candidate_diffs) for k in stat.kinds] == [("type number -> boolean", N)]


def test_a_tool_argument_that_changes_type_is_named_in_the_side_effect_example(tmp_path: Path) -> None:
    """A tool called with ``urgent: 1`` where the baselines pass ``urgent: true``: the arguments changed (their
    digests differ) and the example names the field, which ``==`` hid (no changed field was listed)."""

    def audit(variant: str, urgent: Any) -> Path:
        records = [
            AuditRecord.for_call(
                variant=variant,
                key=f"r-{i}",
                resource_type="tool",
                resource_name="escalate",
                method="call",
                args=(),
                kwargs={"ticket": f"t-{i}", "urgent": urgent},
                decision="allow",
                outcome="ok",
            ).model_dump(mode="json")
            for i in range(N)
        ]
        return write_jsonl(tmp_path / f"audit-{variant}.jsonl", records)

    a, a2, b = write_runs(tmp_path, decisions(N), decisions(N), decisions(N))
    audits = {
        "baseline": audit("baseline", True),
        "baseline_2": audit("baseline_2", True),
        "candidate": audit("candidate", 1),
    }
    result = compare_runs(a, b, a2, key="$.id", audits=audits)
    assert result.verdict == "FAIL", result.reasons
    [change] = next(s for s in result.resources if s.resource_name == "escalate").changes
    assert change.changed == ["kwargs.urgent: true → 1"], change

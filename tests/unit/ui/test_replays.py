"""The Replays pages' view models: a row per run record, runs grouped by production with charts, two comparisons'
fields side by side."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_flink_replay.core.run_record import RunRecord, VariantRecord
from airflow_flink_replay.ui.replays import (
    field_rows,
    first_line,
    noisiest_fields,
    production_charts,
    productions,
    run_row,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def record(run_id: str, days: int = 0, spec: str = "reviews", **values: Any) -> RunRecord:
    values.setdefault("variants", [
        VariantRecord(variant="baseline", agent_factory="a.v1:job", duration_s=30.0),
        VariantRecord(variant="baseline_2", agent_factory="a.v1:job", duration_s=31.5),
        VariantRecord(variant="candidate", agent_factory="a.v2:job", duration_s=29.0),
    ])  # fmt: skip
    return RunRecord(spec_name=spec, dag_id="gate", run_id=run_id, created_at=T0 + timedelta(days=days), **values)


def test_a_row_holds_what_the_record_says() -> None:
    reasons = [{"code": "FIELD_REGRESSION", "severity": "fail", "message": "$.label differs\nmore detail"}]
    row = run_row(record("r1", verdict="FAIL", reasons=reasons, downtime_s=5.1, fidelity=0.93, noise={"$.x": 0.04}),
                  "failed")  # fmt: skip
    assert (row.verdict, row.state, row.candidate, row.downtime_s, row.fidelity) == ("FAIL", "failed", "a.v2:job", 5.1,
                                                                                      0.93)  # fmt: skip
    assert row.replay_s == 31.5  # the longest variant: they run side by side
    assert [(r.code, r.severity, r.text) for r in row.reasons] == [("FIELD_REGRESSION", "fail", "$.label differs")]
    assert row.key == "gate/r1" and row.noise == {"$.x": 0.04}


def test_a_run_without_candidate_or_durations_and_a_refused_one() -> None:
    row = run_row(record("r", variants=[VariantRecord(variant="baseline", agent_factory="a:j")],
                         refusal="agent check refused: stage x dropped\n(details)"))  # fmt: skip
    assert row.candidate is None and row.replay_s is None and row.refusal == "agent check refused: stage x dropped"


def test_first_line_is_cut() -> None:
    assert first_line("a" * 300).endswith("…") and len(first_line("a" * 300)) == 240
    assert first_line("") == "" and first_line("  x\ny") == "x"


def test_runs_are_grouped_by_production_newest_first_with_charts() -> None:
    rows = [
        run_row(record("old", 0, downtime_s=4.0, fidelity=0.9, noise={"$.label": 0.04})),
        run_row(record("new", 2, downtime_s=6.0, fidelity=0.95, fidelity_self=0.9, noise={"$.summary": 0.09})),
        run_row(record("other", 1, spec="routing", verdict="FAIL")),
    ]
    found = productions(rows)
    assert [p.name for p in found] == ["reviews", "routing"]
    reviews = found[0]
    assert [r.run_id for r in reviews.runs] == ["new", "old"]
    assert reviews.verdicts == {"none": 2}
    titles = [c.title for c in reviews.charts]
    assert titles == ["Production downtime", "Replay duration", "Fidelity", "A/A noise per field"]
    noise = reviews.charts[-1]
    assert [line.name for line in noise.lines] == ["$.summary", "$.label"]  # noisiest first
    fidelity = reviews.charts[2]
    assert [len(line.points) for line in fidelity.lines] == [2, 1]
    routing = found[1]
    assert routing.verdicts == {"FAIL": 1}
    assert [c.title for c in routing.charts] == ["Replay duration"]  # no downtime, fidelity or noise recorded


def test_noisiest_fields_keep_each_fields_peak() -> None:
    rows = [run_row(record(str(i), noise={f"$.f{j}": (i + j) / 100 for j in range(4)})) for i in range(3)]
    assert noisiest_fields(rows, limit=2) == ["$.f3", "$.f2"]
    assert production_charts([]) == ()


def test_two_comparisons_fields_side_by_side() -> None:
    a = {"fields": [{"path": "$.x", "noise_rate": 0.1, "candidate_rate": 0.3, "status": "regression"},
                    {"path": "$.y", "noise_rate": 0.0, "candidate_rate": 0.0, "status": "ok"}]}  # fmt: skip
    b = {"fields": [{"path": "$.z", "noise_rate": None, "candidate_rate": 0.2, "status": "changed"},
                    {"path": "$.x", "noise_rate": 0.1, "candidate_rate": 0.1, "status": "ok"},
                    "not a field"]}  # fmt: skip
    rows = field_rows(a, b)
    assert [r.path for r in rows] == ["$.x", "$.y", "$.z"]
    assert rows[0].a is not None and rows[0].a.status == "regression"
    assert rows[0].b is not None and rows[0].b.candidate_rate == 0.1
    assert rows[1].b is None and rows[2].a is None
    assert field_rows(None, None) == []

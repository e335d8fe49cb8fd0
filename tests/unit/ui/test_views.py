"""The pages' data: runs from the metadata DB of the DAGs the user may read, their records under the runs locations
(a record of another run is not taken for this one), the newest ``limit`` runs; two runs for the compare view."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import HTTPException

from airflow_flink_replay.ui import views
from tests.unit.ui.airflow_ui import UiEnv, run_folder, write_record, write_reports
from tests.unit.ui.airflow_ui import ui_env as ui_env  # a fixture

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def runs(ui_env: UiEnv) -> dict[str, Any]:
    """Two runs with records, newest last, and one whose folder holds the first run's record."""
    a = ui_env.dags["team_a"].dag_id
    found: dict[str, Any] = {}
    for name, days in (("older", 3), ("newer", 1)):
        folder = run_folder(ui_env.runs, a)
        found[name] = ui_env.run("team_a", {"run_dir": folder, "comparison": write_reports(folder, "PASS")})
        write_record(folder, found[name], days_ago=days, downtime_s=days)
    copied = run_folder(ui_env.runs, a)
    found["copied"] = ui_env.run("team_a", {"run_dir": copied})
    write_record(copied, found["older"])  # the record names the older run
    return found


def test_the_newest_runs_of_readable_dags(ui_env: UiEnv, runs: dict[str, Any]) -> None:
    mine = [dag.dag_id for dag in ui_env.dags.values()]  # other modules' DAGs may be in the DB too
    view = views.replays_view(ui_env.user("alice"), limit=10, dag_ids=mine)
    assert [r.run_id for p in view.productions for r in p.runs] == [runs["newer"].run_id, runs["older"].run_id]
    assert view.skipped.unreadable == 1 and view.skipped.total == 1 and not view.truncated
    assert view.locations == [str(ui_env.runs), "memory://afr-ui-runs"]
    newest = views.replays_view(ui_env.user("alice"), limit=1, dag_ids=mine)
    assert newest.truncated and newest.runs == 0 and newest.skipped.unreadable == 1  # the newest run is the copy
    assert views.replays_view(ui_env.user("bob"), limit=10, dag_ids=mine).productions == []
    assert views.replays_view(ui_env.user("alice"), limit=10, dag_ids=["no_such_dag"]).productions == []


def test_two_runs_side_by_side(ui_env: UiEnv, runs: dict[str, Any]) -> None:
    older, newer, copied = runs["older"], runs["newer"], runs["copied"]
    view = views.compare_view(ui_env.user("alice"), f"{older.dag_id}/{older.run_id}", f"{newer.dag_id}/{newer.run_id}")
    assert view.a.row is not None and view.a.row.run_id == older.run_id and view.b.summary is not None
    assert view.fields == []  # the reports' summaries list no fields
    odd = views.compare_view(ui_env.user("alice"), f"{copied.dag_id}/{copied.run_id}", f"{older.dag_id}/no-such-run")
    assert odd.a.row is None and odd.a.problem == views.PROBLEMS["unreadable"]
    assert odd.b.problem == views.PROBLEMS["unknown"]
    with pytest.raises(HTTPException) as refused:
        views.compare_view(ui_env.user("bob"), f"{older.dag_id}/{older.run_id}", f"{older.dag_id}/{older.run_id}")
    assert refused.value.status_code == 403


def test_run_keys() -> None:
    assert views.parse_run_key("dag/manual__2026-01-01T00:00:00+00:00") == ("dag", "manual__2026-01-01T00:00:00+00:00")
    assert views.parse_run_key("dag/a/b") == ("dag", "a/b")
    for bad in ("", "dag", "/run", "dag/"):
        with pytest.raises(ValueError, match="not <dag_id>/<run_id>"):
            views.parse_run_key(bad)

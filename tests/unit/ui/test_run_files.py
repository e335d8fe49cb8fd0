"""A run's files found from its XComs in the metadata DB (the comparison's report URIs, the run folder), read in
pieces or as bounded JSON once allowed; the replay runs listed newest first."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.exceptions import RunFileRefusedError
from airflow_flink_replay.ui import run_files
from airflow_flink_replay.ui.locations import parse_locations
from tests.unit.ui.airflow_ui import UiEnv, run_folder, write_reports
from tests.unit.ui.airflow_ui import ui_env as ui_env  # a fixture

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def two_runs(ui_env: UiEnv) -> dict[str, Any]:
    """A run with a run folder and a comparison, and a later one with neither."""
    a = ui_env.dags["team_a"].dag_id
    folder = run_folder(ui_env.runs, a)
    first = ui_env.run("team_a", {"run_dir": folder, "comparison": write_reports(folder)})
    second = ui_env.run("team_a", {})
    return {"folder": folder, "first": first, "second": second}


def test_file_uris_come_from_the_runs_xcoms(ui_env: UiEnv, two_runs: dict[str, Any]) -> None:
    from airflow.utils.session import create_session

    first, folder = two_runs["first"], two_runs["folder"]
    with create_session() as session:
        uris = {n: run_files.file_uri(session, first.dag_id, first.run_id, n) for n in
                ("report.html", "summary.json", "junit.xml", "run_record.json", "manifest.json")}  # fmt: skip
        assert run_files.run_dir(session, first.dag_id, first.run_id) == folder
        assert run_files.comparison(session, first.dag_id, first.run_id)["verdict"] == "PASS"  # type: ignore[index]
        second = two_runs["second"]
        assert run_files.file_uri(session, second.dag_id, second.run_id, "report.html") is None
        assert run_files.file_uri(session, second.dag_id, second.run_id, "run_record.json") is None
    assert uris == {
        "report.html": f"file://{folder}/compare-x/report.html",
        "summary.json": f"file://{folder}/compare-x/summary.json",
        "junit.xml": f"file://{folder}/compare-x/junit.xml",
        "run_record.json": f"{folder}/run_record.json",
        "manifest.json": None,
    }


def test_replay_runs_newest_first_of_the_given_dags(ui_env: UiEnv, two_runs: dict[str, Any]) -> None:
    from airflow.utils.session import create_session

    a, b = ui_env.dags["team_a"].dag_id, ui_env.dags["team_b"].dag_id
    with create_session() as session:
        assert a in run_files.replay_dag_ids(session) and b not in run_files.replay_dag_ids(session)
        refs = run_files.replay_runs(session, {a}, limit=10)
        assert run_files.replay_runs(session, {b}, limit=10) == [] and run_files.replay_runs(session, set(), 5) == []
    assert [r.run_id for r in refs] == [two_runs["first"].run_id]  # the second run pushed no run folder
    assert refs[0].run_dir == two_runs["folder"] and refs[0].state == "success" and refs[0].started is not None


def test_files_are_read_in_pieces_or_as_bounded_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = parse_locations(str(tmp_path))
    (tmp_path / "a.json").write_text(json.dumps({"x": 1}))
    assert run_files.read_json(str(tmp_path / "a.json"), allowed) == {"x": 1}
    with pytest.raises(ValueError, match="larger than 3 bytes"):
        run_files.read_json(str(tmp_path / "a.json"), allowed, limit=3)
    with pytest.raises(RunFileRefusedError):
        run_files.read_json("/etc/hostname", allowed)
    with pytest.raises(FileNotFoundError):
        run_files.open_run_file(str(tmp_path / "missing.html"), allowed)
    monkeypatch.setattr(run_files, "CHUNK_BYTES", 4)
    stream = io.BytesIO(b"0123456789")
    assert list(run_files.chunks(stream)) == [b"0123", b"4567", b"89"] and stream.closed

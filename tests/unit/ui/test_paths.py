"""The plugin's URL scheme: run-file URLs quoted, under ``[api] base_url``'s path, only for the served names."""

from __future__ import annotations

import pytest

from airflow_flink_replay.ui import paths


def test_run_file_url_quotes_the_ids_and_keeps_the_root() -> None:
    url = paths.run_file_url("nightly", "scheduled__2026-01-01T00:00:00+00:00", root="/airflow")
    assert url == "/airflow/flink-replay/runs/nightly/scheduled__2026-01-01T00%3A00%3A00%2B00%3A00/report.html"
    assert paths.run_file_url("d", "a/b", "junit.xml", root="") == "/flink-replay/runs/d/a%2Fb/junit.xml"


def test_only_the_served_names_have_a_url() -> None:
    for name in paths.RUN_FILES:
        assert paths.run_file_url("d", "r", name, root="").endswith(f"/{name}")
    with pytest.raises(ValueError, match="not a run file"):
        paths.run_file_url("d", "r", "manifest.json", root="")


@pytest.mark.parametrize(
    ("base_url", "root"),
    [("", ""), ("http://airflow.example:8080", ""), ("https://h/airflow/", "/airflow"), ("/sub/path", "/sub/path")],
)
def test_api_root_path_is_the_path_of_base_url(base_url: str, root: str) -> None:
    assert paths.api_root_path(base_url) == root


def test_api_root_path_reads_airflows_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example/team-x")
    assert paths.api_root_path() == "/team-x"
    assert paths.run_file_url("d", "r").startswith("/team-x/flink-replay/runs/")
    assert paths.replays_url() == "/team-x/flink-replay/replays"


def test_the_airflow_ui_page_of_a_dag_run() -> None:
    assert paths.dag_run_url("d", "manual__x+1", root="/a") == "/a/dags/d/runs/manual__x%2B1"

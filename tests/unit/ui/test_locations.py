"""Containment: a run file is read only under an allowed runs location; ``..``, another scheme, bucket or
connection, a symlink leading outside, a relative path are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_flink_replay.exceptions import RunFileRefusedError
from airflow_flink_replay.ui.locations import configured_locations, contained, parse_locations, shown


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    folder = tmp_path / "runs" / "dag" / "run"
    folder.mkdir(parents=True)
    (folder / "report.html").write_text("ok")
    return tmp_path / "runs"


def test_a_local_file_under_a_location_is_allowed_as_its_real_path(runs: Path) -> None:
    allowed = parse_locations(f"{runs}")
    target = runs / "dag" / "run" / "report.html"
    assert contained(str(target), allowed) == str(target)
    assert contained(target.as_uri(), allowed) == str(target)
    assert contained(f"file://localhost{target}", allowed) == str(target)


def test_a_percent_encoded_file_uri_is_decoded_before_the_check(tmp_path: Path) -> None:
    folder = tmp_path / "my runs"
    (folder / "x").mkdir(parents=True)
    (folder / "x" / "report.html").write_text("ok")
    allowed = parse_locations(folder.as_uri())
    assert contained((folder / "x" / "report.html").as_uri(), allowed) == str(folder / "x" / "report.html")
    with pytest.raises(RunFileRefusedError, match=r"'\.\.'"):
        contained(f"{folder.as_uri()}/x/%2e%2e/%2e%2e/etc/passwd", allowed)


@pytest.mark.parametrize("tail", ["dag/../../etc/passwd", "dag/./run/report.html", "../runs/dag/run/report.html"])
def test_dot_segments_are_refused(runs: Path, tail: str) -> None:
    with pytest.raises(RunFileRefusedError, match=r"'\.\.' or '\.' segment"):
        contained(f"{runs}/{tail}", parse_locations(str(runs)))


def test_a_symlink_that_leads_outside_is_refused(runs: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the browser")
    link = runs / "dag" / "run" / "summary.json"
    os.symlink(secret, link)
    (runs / "dag" / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    allowed = parse_locations(str(runs))
    with pytest.raises(RunFileRefusedError, match="symlinks are resolved"):
        contained(str(link), allowed)
    with pytest.raises(RunFileRefusedError, match="symlinks are resolved"):
        contained(f"file://{runs}/dag/elsewhere/secret.txt", allowed)


def test_a_symlink_inside_and_a_symlinked_location_are_allowed(runs: Path, tmp_path: Path) -> None:
    inner = runs / "dag" / "run" / "latest.html"
    inner.symlink_to(runs / "dag" / "run" / "report.html")
    assert contained(str(inner), parse_locations(str(runs))) == str(runs / "dag" / "run" / "report.html")
    alias = tmp_path / "alias"
    alias.symlink_to(runs, target_is_directory=True)
    assert contained(str(runs / "dag" / "run" / "report.html"), parse_locations(str(alias)))


def test_a_prefix_is_whole_segments(tmp_path: Path) -> None:
    (tmp_path / "runs-other").mkdir()
    (tmp_path / "runs-other" / "r.html").write_text("x")
    with pytest.raises(RunFileRefusedError):
        contained(str(tmp_path / "runs-other" / "r.html"), parse_locations(str(tmp_path / "runs")))
    with pytest.raises(RunFileRefusedError):
        contained("s3://bucket/runs-other/r.html", parse_locations("s3://bucket/runs"))


@pytest.mark.parametrize(
    "uri",
    [
        "s3://other-bucket/runs/dag/run/report.html",  # another bucket
        "gs://bucket/runs/dag/run/report.html",  # another scheme
        "s3://other_conn@bucket/runs/dag/run/report.html",  # another connection
        "file:///etc/passwd",  # local, but no local location allowed
        "https://bucket/runs/dag/run/report.html",
    ],
)
def test_another_scheme_bucket_or_connection_is_refused(uri: str) -> None:
    with pytest.raises(RunFileRefusedError, match="not under an allowed runs location"):
        contained(uri, parse_locations("s3://bucket/runs, memory://afr"))


def test_an_object_store_uri_under_a_location_is_kept_as_given() -> None:
    allowed = parse_locations("s3://aws_replay@bucket/runs/, memory://afr")
    uri = "s3://aws_replay@bucket/runs/dag/run/report.html"
    assert contained(uri, allowed) == uri
    assert contained("memory://afr/dag/run/run_record.json", allowed) == "memory://afr/dag/run/run_record.json"
    assert contained("s3://b/x", parse_locations("s3://b")) == "s3://b/x"  # a whole bucket


@pytest.mark.parametrize("uri", ["runs/dag/report.html", "file://other-host/runs/x", "/runs/x\x00.html"])
def test_relative_other_host_and_nul_are_refused(uri: str) -> None:
    with pytest.raises(RunFileRefusedError):
        contained(uri, parse_locations("/runs"))


def test_no_location_refuses_everything(runs: Path) -> None:
    with pytest.raises(RunFileRefusedError, match="no runs location is allowed"):
        contained(str(runs / "dag" / "run" / "report.html"), [])


def test_entries_that_allow_nothing_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    found = parse_locations(" , relative/runs, /data/../etc, s3://u:secret@bucket/runs ,/data/runs/")
    assert [str(loc) for loc in found] == ["s3://bucket/runs", "/data/runs"]
    assert "relative/runs" in caplog.text and "secret" not in caplog.text


def test_shown_drops_user_info() -> None:
    assert shown("s3://key:secret@bucket/runs/x") == "s3://bucket/runs/x"
    assert shown("/plain/path") == "/plain/path"


def test_configured_locations_read_airflows_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__FLINK_REPLAY__RUNS_LOCATIONS", raising=False)
    assert configured_locations() == []
    monkeypatch.setenv("AIRFLOW__FLINK_REPLAY__RUNS_LOCATIONS", "/data/runs,memory://afr")
    assert [str(loc) for loc in configured_locations()] == ["/data/runs", "memory://afr"]

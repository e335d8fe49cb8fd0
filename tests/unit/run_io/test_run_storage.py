"""The run folder on any storage: local paths and file:// as paths, other schemes through object storage."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from airflow_flink_replay.run_io import run_storage

pytestmark = pytest.mark.unit


def test_join_and_parent_keep_the_scheme() -> None:
    assert run_storage.join("memory://b/runs/", "gate", "/t1/") == "memory://b/runs/gate/t1"
    assert run_storage.join("s3://bucket", "a", "b.json") == "s3://bucket/a/b.json"
    assert run_storage.parent("memory://b/runs/gate/t1/baseline/output-parts") == "memory://b/runs/gate/t1/baseline"
    assert run_storage.parent("/runs/gate/t1/x.json") == "/runs/gate/t1"


def test_local_paths_and_file_uris_are_paths(tmp_path: Path) -> None:
    assert run_storage.location(str(tmp_path)) == tmp_path
    assert run_storage.location(f"file://{tmp_path}/x") == tmp_path / "x"
    assert not run_storage.is_uri(str(tmp_path)) and run_storage.is_uri("file:///x")


@pytest.mark.parametrize("base", ["local", "file", "memory"])
def test_write_read_digest_on_each_kind(tmp_path: Path, base: str) -> None:
    root = {"local": str(tmp_path), "file": f"file://{tmp_path}",
            "memory": f"memory://afr-test-{uuid.uuid4().hex[:8]}"}[base]
    target = run_storage.join(root, "gate", "t1", "baseline", "baseline.outputs.jsonl")
    assert not run_storage.exists(target) and run_storage.digest(target) is None
    run_storage.write_text(target, '{"id": 1}\n')  # the folders are created
    with run_storage.open_text(target) as fh:
        assert fh.read() == '{"id": 1}\n'
    assert run_storage.exists(target)
    assert run_storage.digest(target) == hashlib.sha256(b'{"id": 1}\n').hexdigest()
    if base != "memory":
        assert (tmp_path / "gate" / "t1" / "baseline" / "baseline.outputs.jsonl").is_file()


def test_a_local_folder_digest_covers_its_files(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("x")
    first = run_storage.digest(str(tmp_path))
    (tmp_path / "b.jsonl").write_text("y")
    assert first and run_storage.digest(str(tmp_path)) not in (None, first)


def test_writing_a_local_run_file_replaces_a_planted_symlink(tmp_path: Path) -> None:
    """The run record and collected outputs go through ``write_text`` / ``open_text``: a symlink planted at the
    name is replaced, its target left as it was."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    record, outputs = tmp_path / "run-record.json", tmp_path / "baseline.outputs.jsonl"
    record.symlink_to(victim)
    outputs.symlink_to(victim)
    run_storage.write_text(str(record), '{"run": 1}\n')
    with run_storage.open_text(str(outputs), "w") as fh:
        fh.write('{"id": 1}\n')
    assert victim.read_text() == "keep me"
    assert not record.is_symlink() and record.read_text() == '{"run": 1}\n'
    assert not outputs.is_symlink() and outputs.read_text() == '{"id": 1}\n'

"""The run record: a stable digest, and the files it chains digested (folders included)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from airflow_flink_replay.core.run_record import RunRecord, file_digest


def test_run_record_digest_is_stable_and_files_are_digested(tmp_path: Path) -> None:
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"id": 1}\n')
    (folder / "b.jsonl").write_text('{"id": 2}\n')
    digest = file_digest(folder)
    assert digest == file_digest(f"file://{folder}") and len(digest or "") == 64
    (folder / "b.jsonl").write_text('{"id": 3}\n')
    assert file_digest(folder) != digest
    assert file_digest(tmp_path / "absent") is None

    when = datetime(2026, 11, 29, tzinfo=UTC)
    one = RunRecord(spec_name="s", dag_id="d", run_id="r", created_at=when, verdict="PASS")
    two = RunRecord.model_validate_json(one.model_dump_json())
    assert one.digest() == two.digest()
    assert one.digest() != one.model_copy(update={"verdict": "FAIL"}).digest()

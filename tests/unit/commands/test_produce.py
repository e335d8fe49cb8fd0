"""`flink-replay produce`: the file and the topic are checked before the stack is; errors name them."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_flink_replay.cli import main


@pytest.fixture(autouse=True)
def _no_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLINK_REPLAY_STACK_DIR", str(tmp_path / "no-stack"))


def test_a_bad_line_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text('{"id": 1}\nnot json\n')
    assert main(["produce", "--file", str(f), "--topic", "t"]) == 2
    assert "in.jsonl line 2: not JSON" in capsys.readouterr().err


def test_the_topic_comes_from_the_spec_which_must_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text('{"id": 1}\n')
    assert main(["produce", "--file", str(f), "--spec", str(tmp_path / "spec.yaml")]) == 2
    assert "--spec" in (err := capsys.readouterr().err) and "spec.yaml: no such file" in err


def test_a_good_file_needs_the_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text('{"id": 1}\n')
    assert main(["produce", "--file", str(f), "--topic", "t", "--key-field", "id"]) == 2
    assert "the local stack is not up" in capsys.readouterr().err

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


def test_records_for_a_production_that_does_not_run_are_not_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The spec names production: when its newest job failed, nothing is sent and the cause is said."""
    from types import SimpleNamespace

    from airflow_flink_replay.local import own_job

    f = tmp_path / "in.jsonl"
    f.write_text('{"id": 1}\n')
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: mine\nproduction:\n  job_name: mine\n  job_identifier: mine\n"
                    "  agent_factory: pkg.agent:build\n  program: {module: pkg.prod}\n  input_topic: mine-input\n"
                    "  capture_topic: mine-capture\n"
                    "  action_state_topic: mine-state\nkafka_bootstrap: k:9092\nruns_uri: file:///tmp/runs\n")
    sent: list[object] = []
    monkeypatch.setattr(own_job, "running_stack", lambda: SimpleNamespace(kafka_bootstrap="k:9092"))
    monkeypatch.setattr(own_job, "produce_jsonl", lambda *a, **kw: sent.append(a) or 1)
    monkeypatch.setattr(own_job, "production_state", lambda stack, name: ("FAILED", "Exception: It's launching"))
    assert main(["produce", "--file", str(f), "--spec", str(spec)]) == 1
    assert capsys.readouterr().err == (
        "produce: production 'mine' does not run on the stack (its newest job is FAILED: Exception: It's launching); "
        "nothing was sent.\nFix: deploy it (`flink-replay deploy ...`, which reports why a job fails), or give "
        "--topic to send anyway\n"
    )
    assert sent == []
    monkeypatch.setattr(own_job, "production_state", lambda stack, name: ("RUNNING", ""))
    assert main(["produce", "--file", str(f), "--spec", str(spec)]) == 0 and len(sent) == 1

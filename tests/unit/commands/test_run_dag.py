"""`flink-replay run-dag`: the spec, the conf and the gate's candidate are checked before Airflow starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_flink_replay.cli import main
from airflow_flink_replay.commands.run_dag import _conf
from airflow_flink_replay.local.own_job import OwnJobError


@pytest.fixture(autouse=True)
def _no_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLINK_REPLAY_STACK_DIR", str(tmp_path / "no-stack"))


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    from airflow_flink_replay.local.demo import DemoTopics, write_spec
    from tests.unit.local.test_airflow_runner import _stack

    return write_spec(_stack(tmp_path), DemoTopics.named("mine"), tmp_path / "spec.yaml", candidate=None)


def test_conf_is_a_json_object_and_candidate_joins_it() -> None:
    assert _conf('{"window_records": 20}', "pkg.mod:job") == {"window_records": 20, "candidate": "pkg.mod:job"}
    assert _conf("{}", None) == {}
    with pytest.raises(OwnJobError, match=r"--conf '\{oops': not JSON .*\nFix: a JSON object"):
        _conf("{oops", None)
    with pytest.raises(OwnJobError, match=r"--conf '\[1\]': not a JSON object"):
        _conf("[1]", None)


def test_the_gate_needs_a_candidate(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run-dag", "gate", "--spec", str(spec)]) == 2
    assert "the release gate needs a candidate" in (err := capsys.readouterr().err) and "Fix: --candidate" in err
    assert main(["run-dag", "gate", "--spec", str(spec), "--candidate", "pkg.mod:job"]) == 2
    assert "the local stack is not up" in capsys.readouterr().err  # past the spec and the candidate
    assert main(["run-dag", "nightly", "--spec", str(spec)]) == 2
    assert "the local stack is not up" in capsys.readouterr().err


def test_a_missing_or_wrong_spec_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run-dag", "replay", "--spec", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml: no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    assert main(["run-dag", "replay", "--spec", str(bad)]) == 2
    assert "production: Field required" in capsys.readouterr().err


def test_a_bad_feed_file_is_named_before_airflow_starts(spec: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    feed = tmp_path / "feed.jsonl"
    feed.write_text('{"id": 1}\n{"id": 2,\n')
    assert main(["run-dag", "replay", "--spec", str(spec), "--feed", str(feed)]) == 2
    assert "feed.jsonl line 2: not JSON" in capsys.readouterr().err

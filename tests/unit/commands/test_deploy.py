"""`flink-replay deploy`: refuses what cannot work before touching the stack, with the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_flink_replay.cli import main


@pytest.fixture(autouse=True)
def _no_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLINK_REPLAY_STACK_DIR", str(tmp_path / "no-stack"))
    monkeypatch.chdir(tmp_path)


def test_agent_job_or_factory_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["deploy", "--name", "mine"])
    assert exit_.value.code == 2
    assert "one of the arguments --agent-job --agent-factory is required" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--agent-job", "my_agents.job"], "deploy: --agent-job 'my_agents.job' is not a reference.\nFix: give"),
        (["--agent-job", "my_agents.job:job"], "the package 'my_agents' is in none of"),
        (["--agent-factory", "examples.review_agent.v1.agent:build_agent", "--candidate", "nope:x"],
         "--candidate 'nope:x': the package 'nope' is in none of"),
        (["--agent-job", "examples.review_agent.v1.job:job", "--key-field", "id"],
         "--key-field is for --agent-factory.\nFix:"),
        (["--agent-factory", "examples.review_agent.v1.agent:build_agent"],
         "the local stack is not up"),
    ],
)
def test_refusals_name_the_option_and_the_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["deploy", "--name", "mine", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Fix:" in err


def _spec(tmp_path: Path, key: str = "$.id") -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: mine\ncompare_key: '{key}'\n")
    return spec


def test_a_compare_key_that_is_not_unique_among_productions_outputs_is_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    from airflow_flink_replay.commands import deploy

    outputs = [{"id": f"k-{i % 5}", "kind": kind} for i in range(20) for kind in ("triage", "reply")]
    monkeypatch.setattr(deploy, "first_outputs", lambda bootstrap, topic: outputs)
    stack = SimpleNamespace(kafka_bootstrap="localhost:9092")
    deploy.check_compare_key(stack, "mine-outputs", _spec(tmp_path))  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert "warning: in production's first 40 outputs on mine-outputs, compare key $.id is not unique per output " \
           "(5 keys, 40 outputs, up to 8 per key)" in err
    assert "aligns such outputs per input record (key + event time)" in err and "\nFix: set compare_key in " in err

    monkeypatch.setattr(deploy, "first_outputs", lambda bootstrap, topic: [{"id": i} for i in range(9)])
    deploy.check_compare_key(stack, "mine-outputs", _spec(tmp_path))  # type: ignore[arg-type]
    assert capsys.readouterr() == ("", "")  # unique: nothing to say


def test_a_compare_key_check_that_cannot_run_says_so_and_never_fails_the_deploy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    from airflow_flink_replay.commands import deploy

    def unreachable(bootstrap: str, topic: str) -> list[dict]:
        raise RuntimeError("broker down")

    stack = SimpleNamespace(kafka_bootstrap="localhost:9092")
    monkeypatch.setattr(deploy, "first_outputs", unreachable)
    deploy.check_compare_key(stack, "mine-outputs", _spec(tmp_path))  # type: ignore[arg-type]
    assert "compare_key $.id not checked: cannot read mine-outputs: broker down" in capsys.readouterr().out
    monkeypatch.setattr(deploy, "first_outputs", lambda bootstrap, topic: [])
    deploy.check_compare_key(stack, "mine-outputs", _spec(tmp_path))  # type: ignore[arg-type]
    assert "compare_key $.id not checked: no outputs on mine-outputs yet" in capsys.readouterr().out

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

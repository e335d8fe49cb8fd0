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
    assert exit_.value.code == 64  # a usage error: never 2, which `compare` reads as INCONCLUSIVE
    assert "one of the arguments --agent-job --agent-factory is required" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--agent-job", "my_agents.job"], "deploy: --agent-job 'my_agents.job' is not a reference. Fix: give"),
        (["--agent-job", "my_agents.job:job"], "the package 'my_agents' is in none of"),
        (["--agent-factory", "examples.review_agent.v1.agent:build_agent", "--candidate", "nope:x"],
         "--candidate 'nope:x': the package 'nope' is in none of"),
        (["--agent-job", "examples.review_agent.v1.job:job", "--key-field", "id"],
         "--key-field is for --agent-factory. Fix:"),
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


def _deploy_on_a_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, refused: str = "",
                       runs: object = None, submit: object = None) -> list[str]:
    """``deploy`` with the stack, the agent check, the submission and the wait replaced; returns what was
    submitted."""
    from types import SimpleNamespace

    from airflow_flink_replay.commands import deploy
    from airflow_flink_replay.local import demo, own_job

    submitted: list[str] = []

    def submitting(stack: object, topics: object, **kw: object) -> tuple[str, bool]:
        submitted.append(str(kw["job_name"]))
        if isinstance(submit, Exception):
            raise submit
        return "j1", True

    stack = SimpleNamespace(flink_rest_url="http://flink:8081", workdir=str(tmp_path))
    monkeypatch.setattr(deploy, "_prepared_stack", lambda args, agent: stack)
    monkeypatch.setattr(deploy, "_refused", lambda stack, agent: (refused, None))
    monkeypatch.setattr(demo, "submit_production", submitting)
    monkeypatch.setattr(own_job, "production_runs", runs)
    return submitted


def test_a_definition_the_agent_check_refuses_is_not_submitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    refusal = ("production's job definition pkg.job:job would not run in Flink; nothing was submitted.\nproduction job "
               "definition pkg.job:job cannot be imported the way Flink's Python worker imports it ...\nFix: ...")
    submitted = _deploy_on_a_stack(monkeypatch, tmp_path, refused=refusal)
    assert main(["deploy", "--agent-job", "pkg.job:job", "--name", "mine"]) == 1
    assert capsys.readouterr().err == f"deploy: {refusal}\n" and submitted == []


def test_a_production_that_does_not_run_fails_the_deploy_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_flink_replay.exceptions import FlinkSubmissionError, OwnJobError

    def dies(stack: object, job_id: str, *, submitted: bool, timeout: float) -> None:
        assert (job_id, submitted, timeout) == ("j1", True, 30.0)
        raise OwnJobError("production does not run: Flink job mine (j1) ended FAILED after 4 failure(s):\n"
                          "Traceback (most recent call last):\nException: boom\nFix: correct it")

    submitted = _deploy_on_a_stack(monkeypatch, tmp_path, runs=dies)
    assert main(["deploy", "--agent-job", "pkg.job:job", "--name", "mine", "--wait", "30"]) == 1
    captured = capsys.readouterr()
    assert submitted == ["mine"] and "submitted" not in captured.out
    assert captured.err.startswith("deploy: production does not run: Flink job mine (j1) ended FAILED")

    _deploy_on_a_stack(monkeypatch, tmp_path, submit=FlinkSubmissionError("Python process exits: ImportError: x"))
    assert main(["deploy", "--agent-job", "pkg.job:job", "--name", "mine"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("deploy: production mine could not be submitted: Python process exits: ImportError: x")
    assert "\nFix: correct the cause above, then deploy again" in err


def test_a_production_that_runs_and_checkpointed_is_reported_with_its_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_flink_replay.core.flink_models import CheckpointedJob

    running = CheckpointedJob(job_id="j1", checkpoint_id=3, failures=1, newest_failure="TimeoutException: 100 ms")
    _deploy_on_a_stack(monkeypatch, tmp_path, runs=lambda *a, **kw: running)
    assert main(["deploy", "--agent-job", "pkg.job:job", "--name", "mine"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "production mine: Flink job j1 submitted, runs (checkpoint 3 completed; 1 restart(s) before: "
        "TimeoutException: 100 ms) (http://flink:8081/#/job/running/j1/overview)"
    )

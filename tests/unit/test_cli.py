"""The CLI wires every sub-command module explicitly: all of them are in the parser. Usage errors and unexpected
errors have exit codes of their own (64, 70), never 1 or 2, which are verdicts for `compare`."""

from __future__ import annotations

import argparse

import pytest

from airflow_flink_replay.cli import COMMANDS, build_parser, main


def test_every_command_module_is_wired() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == ["stack", "compare", "manifest", "demo", "deploy", "produce", "run-dag"]
    assert [m.__name__.rsplit(".", 1)[-1] for m in COMMANDS] == [
        "stack", "compare", "manifest", "demo", "deploy", "produce", "run_dag"
    ]


def test_a_usage_error_exits_64_never_2(capsys: pytest.CaptureFixture[str]) -> None:
    """2 is INCONCLUSIVE in compare's contract: a CI step must not read a typo as a verdict."""
    for argv in ([], ["bogus"], ["--bogus", "stack", "status"], ["manifest"], ["demo", "--port", "0"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 64, argv
        assert capsys.readouterr().err.strip().splitlines()[-1].endswith("--help`")


def test_an_unexpected_error_is_one_line_and_exit_70_not_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1 reads as FAIL for compare; a bug is its own code, one line, the traceback on request."""
    from airflow_flink_replay.commands import manifest

    def broken(args: argparse.Namespace) -> int:
        raise KeyError("boom\x1b[2J")

    monkeypatch.setattr(manifest, "run_validate", broken)
    monkeypatch.delenv("FLINK_REPLAY_TRACEBACK", raising=False)
    assert main(["manifest", "validate", "x.json"]) == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: KeyError" in err and "Fix:" in err and "\x1b" not in err
    monkeypatch.setenv("FLINK_REPLAY_TRACEBACK", "1")
    assert main(["manifest", "validate", "x.json"]) == 70
    assert "Traceback" in capsys.readouterr().err


def test_run_dag_offers_every_dag_the_runner_knows() -> None:
    from airflow_flink_replay.commands.run_dag import DAGS
    from airflow_flink_replay.local.airflow_runner import DAG_IDS

    assert set(DAGS) == set(DAG_IDS)

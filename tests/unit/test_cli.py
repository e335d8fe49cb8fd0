"""The CLI wires every sub-command module explicitly: all of them are in the parser."""

from __future__ import annotations

import argparse

from airflow_flink_replay.cli import COMMANDS, build_parser


def test_every_command_module_is_wired() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == ["stack", "compare", "manifest", "demo", "deploy", "produce", "run-dag"]
    assert [m.__name__.rsplit(".", 1)[-1] for m in COMMANDS] == [
        "stack", "compare", "manifest", "demo", "deploy", "produce", "run_dag"
    ]

"""``flink-replay``: the command line (stack, compare, manifest, demo, and deploy / produce / run-dag for your
own job on the local stack).

Each sub-command lives in ``airflow_flink_replay.commands.<name>`` with ``add_parser(subparsers)``; this
module only wires them. They are imported explicitly: a command module missing from an installation is a
packaging error and fails at once, with its name, instead of the command silently disappearing from
``--help``. The command modules keep their heavy imports inside the functions that need them.
"""

from __future__ import annotations

import argparse
import sys

from airflow_flink_replay.commands import compare, demo, deploy, manifest, produce, run_dag, stack

#: Sub-command modules, in the order ``--help`` lists them.
COMMANDS = (stack, compare, manifest, demo, deploy, produce, run_dag)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="flink-replay",
        description="Replay a changed Flink Agents job on production state, and gate it.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; the return value is the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

"""``flink-replay``: the command line (stack, compare, manifest, demo, and deploy / produce / run-dag for your
own job on the local stack).

Each sub-command lives in ``airflow_flink_replay.commands.<name>`` with ``add_parser(subparsers)``; this
module only wires them. They are imported explicitly: a command module missing from an installation is a
packaging error and fails at once, with its name, instead of the command silently disappearing from
``--help``. The command modules keep their heavy imports inside the functions that need them.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import NoReturn

from airflow_flink_replay.commands import compare, demo, deploy, manifest, produce, run_dag, stack
from airflow_flink_replay.commands.output import EXIT_INTERNAL, EXIT_USAGE, one_line

#: Sub-command modules, in the order ``--help`` lists them.
COMMANDS = (stack, compare, manifest, demo, deploy, produce, run_dag)


class CliParser(argparse.ArgumentParser):
    """argparse with its usage errors as ``EXIT_USAGE`` (argparse's 2 is INCONCLUSIVE for ``compare``) and a
    last line that says where the fix is. Sub-command parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        """Print the usage and one line naming the problem and the fix; exit :data:`EXIT_USAGE`."""
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)}. Fix: see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every sub-command."""
    parser = CliParser(
        prog="flink-replay",
        description="Replay a changed Flink Agents job on production state, and gate it. Exit codes: each "
        f"command's own (see its --help), {EXIT_USAGE} for a command line it does not accept (compare: 3), "
        f"{EXIT_INTERNAL} for an internal error.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; the return value is the process exit code.

    An exception no command expected is a bug: it ends in one line and :data:`EXIT_INTERNAL`, never in exit 1
    (FAIL for ``compare``); ``FLINK_REPLAY_TRACEBACK=1`` prints its traceback too.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as err:
        if os.environ.get("FLINK_REPLAY_TRACEBACK"):
            traceback.print_exc()
        print(
            f"flink-replay {args.command}: internal error: {type(err).__name__}: {one_line(err, 500)}. Fix: this is "
            "a bug; run again with FLINK_REPLAY_TRACEBACK=1 and report the traceback",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())

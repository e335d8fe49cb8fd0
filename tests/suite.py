"""``make test``: the unit tests on two workers while the stack starts, then the integration tests on it.

Two pytest sessions with the same arguments (``PYTEST_ARGS``), one after the other:

1. ``-m unit -n 2``: the unit tests over two workers (pytest-xdist) — they need no service. Meanwhile
   ``flink-replay stack up`` starts the stack in a process of its own (its parts were installed before:
   ``make stack-prepare``).
2. ``-m integration``: the integration tests on that stack, one at a time (they share its clusters), with
   the whole machine to themselves: several of them time Flink and a real Airflow scheduler, and run slower
   and less predictably with the unit tests beside them (a clean-clone run with the unit tests alongside at
   the lowest priority took the demo's module from 345 s to 569 s).

A stack that was up before is reused and left running; one this command started is taken down at the end.
pytest exits 5 when it collected nothing: that fails the suite only when neither session collected a test.
Run as ``python -m tests.suite [pytest arguments]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.stack_start import StackStart

ROOT = Path(__file__).resolve().parent.parent
NO_TESTS = 5
UNIT_WORKERS = 2


def _pytest(marker: str, args: list[str], *extra: str) -> int:
    print(f"\n===== {marker} tests: pytest -m {marker} {' '.join([*extra, *args])}", flush=True)
    started = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "pytest", "-m", marker, *extra, *args], cwd=ROOT)
    print(f"===== {marker} tests: exit {code} in {time.monotonic() - started:.0f}s", flush=True)
    return code


def main(args: list[str]) -> int:
    """Run both sessions; the exit code is the first failure's, 0 when both passed."""
    os.environ.setdefault("FLINK_REPLAY_STACK_DIR", str(ROOT / ".stack"))
    started = time.monotonic()
    start = StackStart()
    try:
        unit = _pytest("unit", args, "-n", str(UNIT_WORKERS))
        try:
            start.wait()
        except RuntimeError as err:
            print(err, file=sys.stderr)
            return 1
        integration = _pytest("integration", args, "--durations=40")  # where the suite's time goes
    finally:
        start.abandon()
        if not start.already_up:
            start.local.down()
    print(f"===== suite: unit exit {unit}, integration exit {integration}, {time.monotonic() - started:.0f}s")
    if unit == integration == NO_TESTS:
        print("pytest collected no tests", file=sys.stderr)
        return 1
    failed = [code for code in (unit, integration) if code not in (0, NO_TESTS)]
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``make test``: the unit tests on two workers while the stack starts, then the integration tests on it, then
the distributed Airflow's tests.

Three pytest sessions with the same arguments (``PYTEST_ARGS``), one after the other:

1. ``-m unit -n 2``: the unit tests over two workers (pytest-xdist) — they need no service. Meanwhile
   ``flink-replay stack up`` starts the stack in a process of its own (its parts were installed before:
   ``make stack-prepare``).
2. ``-m integration``: the integration tests on that stack, one at a time (they share its clusters), with
   the whole machine to themselves: several of them time Flink and a real Airflow scheduler, and run slower
   and less predictably with the unit tests beside them (a clean-clone run with the unit tests alongside at
   the lowest priority took the demo's module from 345 s to 569 s).

A stack that was up before is reused and left running; one this command started is taken down at the end.
pytest exits 5 when it collected nothing: that fails the suite only when no session collected a test.
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


#: session name -> its marker expression and the folder it collects when the arguments name none (collecting
#: the unit tests only to deselect them costs the later sessions ~10 s each)
SESSIONS = {"unit": ("unit", "tests/unit"), "integration": ("integration and not distributed", "tests/integration"),
            "distributed": ("distributed", "tests/integration")}


def _names_a_path(args: list[str]) -> bool:
    """Whether the pytest arguments name a test file or folder (then each session collects just those)."""
    return any(not arg.startswith("-") and (ROOT / arg.split("::")[0]).exists() for arg in args)


def _pytest(name: str, args: list[str], *extra: str) -> tuple[int, float]:
    """Run one session; its exit code and wall time."""
    marker, folder = SESSIONS[name]
    paths = [] if _names_a_path(args) else [folder]
    print(f"\n===== {name} tests: pytest -m '{marker}' {' '.join([*extra, *args, *paths])}", flush=True)
    started = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "pytest", "-m", marker, *extra, *args, *paths], cwd=ROOT)
    took = time.monotonic() - started
    print(f"===== {name} tests: exit {code} in {took:.0f}s", flush=True)
    return code, took


def main(args: list[str]) -> int:
    """Run the three sessions; the exit code is the first failure's, 0 when all passed."""
    os.environ.setdefault("FLINK_REPLAY_STACK_DIR", str(ROOT / ".stack"))
    started = time.monotonic()
    start = StackStart()
    results: dict[str, tuple[int, float]] = {}
    try:
        results["unit"] = _pytest("unit", args, "-n", str(UNIT_WORKERS))
        waited = time.monotonic()
        try:
            start.wait()
        except RuntimeError as err:
            print(err, file=sys.stderr)
            return 1
        print(f"===== the stack was up {time.monotonic() - waited:.0f}s after the unit tests ended", flush=True)
        results["integration"] = _pytest("integration", args, "--durations=40")  # where the suite's time goes
        budgeted = time.monotonic() - started
        results["distributed"] = _pytest("distributed", args, "--durations=10")
    finally:
        start.abandon()
        if not start.already_up:
            start.local.down()
    codes = ", ".join(f"{name} exit {code}" for name, (code, _) in results.items())
    print(f"===== suite: {codes}; unit + integration {budgeted:.0f}s, distributed {results['distributed'][1]:.0f}s, "
          f"all {time.monotonic() - started:.0f}s")
    if all(code == NO_TESTS for code, _ in results.values()):
        print("pytest collected no tests", file=sys.stderr)
        return 1
    failed = [code for code, _ in results.values() if code not in (0, NO_TESTS)]
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

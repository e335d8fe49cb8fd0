"""``make test``: the integration tests on the real stack, with the unit tests alongside at low priority.

Two pytest sessions with the same arguments (``PYTEST_ARGS``), at the same time:

- ``-m integration`` in the foreground: the stack starts (its parts were installed before, by ``make
  stack-prepare``) and the integration tests run on it one at a time, as they always did;
- ``-m unit`` in the background at the lowest CPU priority (``nice 19``), its output in a log file: the unit
  tests need no service, and on a small machine the integration tests leave the CPU idle often enough
  (waits on Flink jobs, checkpoints, the scheduler) for the unit tests to finish in those gaps instead of
  taking minutes of their own. The unit session's summary (its whole output when it failed) is printed
  after the integration session's.

pytest exits 5 when it collected nothing: that fails the suite only when neither session collected a test.
Run as ``python -m tests.suite [pytest arguments]``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NO_TESTS = 5
#: lines of the unit session's output shown when it passed (its summary and slowest tests)
TAIL = 40


def _command(marker: str, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-m", marker, *args]


def main(args: list[str]) -> int:
    """Run both sessions; the exit code is the first failure's, 0 when both passed."""
    log = Path(tempfile.mkstemp(prefix="afr-unit-tests-", suffix=".log")[1])
    nice = [shutil.which("nice") or "nice", "-n", "19"] if shutil.which("nice") else []
    started = time.monotonic()
    with log.open("w") as out:
        # no cache plugin: the two sessions would write the same .pytest_cache files
        unit = subprocess.Popen([*nice, *_command("unit", ["-p", "no:cacheprovider", *args])], cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    print(f"unit tests: running alongside at low priority, output in {log}", flush=True)
    try:
        integration = subprocess.call(_command("integration", args), cwd=ROOT)
    except KeyboardInterrupt:
        unit.terminate()
        raise
    unit_code = unit.wait()
    text = log.read_text(errors="replace")
    lines = text.splitlines()
    print(f"\n===== unit tests (pytest -m unit, alongside): exit {unit_code}; suite wall time "
          f"{time.monotonic() - started:.0f}s =====")
    print("\n".join(lines if unit_code not in (0, NO_TESTS) else lines[-TAIL:]), flush=True)
    if unit_code == integration == NO_TESTS:
        print("pytest collected no tests", file=sys.stderr)
        return 1
    failed = [code for code in (integration, unit_code) if code not in (0, NO_TESTS)]
    return failed[0] if failed else 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(sys.argv[1:]))

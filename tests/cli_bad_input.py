"""The bad-input table of the ``flink-replay`` CLI: shared inputs, the runner and the check.

Every case runs the real console script (``.venv/bin/flink-replay``) as a subprocess, with the stack folder
pointing at an empty folder (no stack: nothing is ever started, sent or submitted), and is checked for:

- it ends within :data:`TIMEOUT_S` (an alias bomb or ``/dev/zero`` read to its end never would);
- its exit code is one the command documents for that input;
- no traceback, and nothing a terminal acts on (escape, bell, NUL, carriage return) in what it prints;
- on an error code, the last line of stderr names what is wrong (the option, the file) and the fix (``Fix:``).

The cases of a test module run a few at a time in the background (:class:`Runner`), so a table of many
Python start-ups stays quick; each case is still its own test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

#: The console script of this environment.
CLI = str(Path(sys.executable).with_name("flink-replay"))
#: Each case ends well within this; a hang never does (a Python start-up takes a few seconds on a busy machine).
TIMEOUT_S = 20.0
#: Cases run at once.
WORKERS = 3
#: Characters nothing the CLI prints may hold raw.
RAW_CONTROL = ("\x1b", "\x07", "\x00", "\r", "\u202e", "\u200b")
#: Exit code of a command line argparse refuses (all commands but compare).
USAGE = 64

#: A valid replay spec (its production is nowhere: the commands stop at "the stack is not up").
SPEC = {
    "name": "review-triage",
    "production": {
        "job_name": "review-triage-production",
        "program": {"module": "airflow_flink_replay.flink.production_job", "program_args": []},
        "agent_factory": "examples.review_agent.v1.agent:build_agent",
        "input_topic": "reviews",
        "capture_topic": "reviews-capture",
        "action_state_topic": "reviews-action-state",
        "job_identifier": "review-triage-prod",
    },
    "candidate_agent_factory": "examples.review_agent.v2.agent:build_agent",
    "kafka_bootstrap": "127.0.0.1:9092",
    "runs_uri": "file:///tmp/replay-runs",
}


#: Spec file kinds (``--spec``) and what the error line names.
SPEC_KINDS = [
    ("empty", "{empty}"),
    ("missing", "{missing}"),
    ("folder", "{folder}"),
    ("zero", "/dev/zero"),
    ("null", "/dev/null"),
    ("latin1", "{latin1}"),
    ("binary", "{binary}"),
    ("deep_yaml", "{deep_yaml}"),
    ("huge_text", "{huge_text}"),
    ("alias_bomb_yaml", "{alias_bomb_yaml}"),
    ("control_spec_yaml", "production.job_name"),
    ("control_path", "name.jsonl"),
]
#: JSONL file kinds (``--file``, ``--feed``) and what the error line names.
RECORD_KINDS = [
    ("empty", "{empty}"),
    ("missing", "{missing}"),
    ("folder", "{folder}"),
    ("zero", "/dev/zero"),
    ("null", "/dev/null"),
    ("latin1", "{latin1}"),
    ("binary", "{binary}"),
    ("deep_json", "{deep_json}"),
    ("control_path", "name.jsonl"),
]
#: What the last line says when a good input gets as far as the stack (there is none).
STACK_NOT_UP = "stack up"


@dataclass(frozen=True)
class Case:
    """One command line (``{name}`` placeholders are the inputs of :func:`make_inputs`) and what it may end with."""

    argv: tuple[str, ...]
    codes: tuple[int, ...]
    #: what the last stderr line of an error names ("" = only the fix)
    names: str = ""


def case(line: str, *codes: int, names: str = "") -> Case:
    """A case from a command line split on spaces (arguments with spaces: use an input placeholder)."""
    return Case(tuple(line.split(" ")), codes, names)


@dataclass
class Result:
    code: int | None
    stdout: str
    stderr: str
    seconds: float


def _alias_bomb(key: str) -> str:
    lines = [f"{key}:", '  a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


def make_inputs(root: Path) -> dict[str, str]:
    """The bad (and a few good) inputs, written once per module; name -> path or value."""
    files: dict[str, bytes] = {
        "empty": b"",
        "latin1": b'{"id": "caf\xe9"}\nname: caf\xe9\n',
        "binary": bytes(range(256)) * 64,
        "deep_json": b'{"id": 1, "a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        "deep_yaml": b"name: x\nproduction: " + b"[" * 100_000 + b"]" * 100_000 + b"\n",
        "huge_text": b"# filler\n" * (17 << 17),  # 17 MiB: above every limit (spec, config, manifest)
        "huge_jsonl": b"".join(b'{"id": %d, "pad": "%s"}\n' % (i, b"x" * 3000) for i in range(1000)),
        "alias_bomb.yaml": (yaml.safe_dump(SPEC) + _alias_bomb("mem0_config")).encode(),
        "alias_bomb_config.yaml": _alias_bomb("fields").encode(),
        "deep_config.yaml": b"fields: " + b"[" * 100_000 + b"]" * 100_000 + b"\n",
        "spec.yaml": yaml.safe_dump(SPEC).encode(),
        "control_spec.yaml": yaml.safe_dump(
            {**SPEC, "production": {**SPEC["production"], "job_name": "prod\x1b[2J\x07 gate PASSED"}}
        ).encode(),
        "records.jsonl": b"".join(b'{"id": %d, "label": "ok"}\n' % i for i in range(30)),
        "big_int.jsonl": b"".join(b'{"id": %d, "n": %s}\n' % (i, b"9" * 400 if i < 3 else b"1") for i in range(30)),
        "spill_config.json": json.dumps({"spill_dir": str(root / "no-such-folder"), "spill_above_mb": 0}).encode(),
        "manifest_forged.json": json.dumps({"run_id": "r\x1b]0;gate PASSED\x07", "digest": "sha256:0"}).encode(),
    }
    paths = {}
    for name, data in files.items():
        (root / name).write_bytes(data)
        paths[name.replace(".", "_")] = str(root / name)
    (root / "folder").mkdir()
    (root / "nostack").mkdir()
    return {
        **paths,
        "root": str(root),
        "nostack": str(root / "nostack"),
        "folder": str(root / "folder"),
        "missing": str(root / "missing.jsonl"),
        "control_path": str(root / "evil\x1b[2J\x07name.jsonl"),
        "zero": "/dev/zero",
        "null": "/dev/null",
        "spaced": "a b",
    }


def run(argv: tuple[str, ...], inputs: dict[str, str]) -> Result:
    """Run one case in ``inputs["root"]`` with no stack; a case that does not end in time is killed."""
    args = [a.format(**inputs) for a in argv]
    env = {**os.environ, "FLINK_REPLAY_STACK_DIR": inputs["nostack"]}
    env.pop("FLINK_REPLAY_TRACEBACK", None)
    started = time.monotonic()
    try:
        done = subprocess.run(
            [CLI, *args], cwd=inputs["root"], env=env, capture_output=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"").decode("utf-8", "replace")
        return Result(None, out, (err.stderr or b"").decode("utf-8", "replace"), time.monotonic() - started)
    return Result(
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
        time.monotonic() - started,
    )


class Runner:
    """Runs a table's cases in the background, :data:`WORKERS` at a time, in table order, each when a test asks
    for it or for one of the few before it (so a worker of a split test run starts only what it needs)."""

    def __init__(self, cases: dict[str, Case], inputs: dict[str, str]) -> None:
        self.cases, self.inputs = cases, inputs
        self.order = list(cases)
        self.pool = ThreadPoolExecutor(WORKERS)
        self.futures: dict[str, Future[Result]] = {}

    def result(self, case_id: str) -> Result:
        """The case's result; starts it and the next few cases if they are not running yet."""
        at = self.order.index(case_id)
        for later in self.order[at : at + WORKERS * 2]:
            if later not in self.futures:
                self.futures[later] = self.pool.submit(run, self.cases[later].argv, self.inputs)
        return self.futures[case_id].result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def check(case: Case, result: Result, inputs: dict[str, str], error_codes: tuple[int, ...]) -> None:
    """The contract of every case (the module docstring)."""
    shown = (
        f"exit {result.code} after {result.seconds:.1f}s\nstdout: {result.stdout[-800:]}\n"
        f"stderr: {result.stderr[-800:]}"
    )
    assert result.code is not None, f"did not end within {TIMEOUT_S:g}s\n{shown}"
    assert result.code in case.codes, f"exit {result.code}, expected one of {case.codes}\n{shown}"
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, shown
    for char in RAW_CONTROL:
        assert char not in result.stdout and char not in result.stderr, f"raw {char!r} printed\n{shown}"
    if result.code in error_codes:
        lines = result.stderr.strip().splitlines()
        assert lines, f"an error without a message\n{shown}"
        last = lines[-1]
        assert "Fix:" in last, f"the last line does not say the fix: {last!r}"
        names = case.names.format(**inputs)
        assert names in last, f"the last line does not name {names!r}: {last!r}"

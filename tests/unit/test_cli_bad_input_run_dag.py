"""Bad input for ``flink-replay run-dag`` (exit 2 for a wrong spec, conf, feed file or folder — and "the stack is
not up", where a good input gets to; 64 usage). Nothing reaches a stack: there is none. See
:mod:`tests.cli_bad_input` for the contract."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_bad_input import (
    RECORD_KINDS,
    SPEC_KINDS,
    STACK_NOT_UP,
    USAGE,
    Case,
    Runner,
    case,
    check,
    make_inputs,
)

BAD = 2
REPLAY = "run-dag replay --spec {spec_yaml}"

CASES: dict[str, Case] = {
    **{f"spec-{kind}": case(f"run-dag gate --spec {{{kind}}}", BAD, names=n) for kind, n in SPEC_KINDS},
    **{f"feed-{kind}": case(f"{REPLAY} --feed {{{kind}}}", BAD, names=n) for kind, n in RECORD_KINDS},
    "conf-deep": case(f"{REPLAY} --conf " + "[" * 50_000, BAD, names="--conf"),
    "conf-not-an-object": case(f"{REPLAY} --conf [1]", BAD, names="--conf"),
    "conf-bad-value": case(f'{REPLAY} --conf {{{{"quiesce_mode":"\x1b[2J"}}}}', BAD, names="quiesce_mode"),
    "candidate-trailing-newline": case(
        "run-dag gate --spec {spec_yaml} --candidate pkg.mod:job\n", BAD, names="candidate"
    ),
    "python-path-missing": case(f"{REPLAY} --python-path {{missing}}", BAD, names="--python-path"),
    "python-path-device": case(f"{REPLAY} --python-path /dev/null", BAD, names="--python-path"),
    "good-input-no-stack": case(REPLAY, BAD, names=STACK_NOT_UP),
    "usage-feed-rate-zero": case(f"{REPLAY} --feed-rate 0", USAGE, names="--feed-rate"),
    "usage-unknown-dag": case("run-dag bogus --spec {spec_yaml}", USAGE, names="--help"),
    "usage-no-spec": case("run-dag gate", USAGE, names="--help"),
}


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    table = Runner(CASES, make_inputs(Path(tmp_path_factory.mktemp("run-dag-bad-input"))))
    yield table
    table.close()


@pytest.mark.parametrize("case_id", list(CASES))
def test_run_dag_bad_input(runner: Runner, case_id: str) -> None:
    check(CASES[case_id], runner.result(case_id), runner.inputs, (BAD, USAGE))

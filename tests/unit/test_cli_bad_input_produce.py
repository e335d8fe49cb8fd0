"""Bad input for ``flink-replay produce`` (exit 2 for a wrong file, spec or topic — and "the stack is not up",
where a good input gets to; 64 usage). Nothing is sent: there is no stack. See :mod:`tests.cli_bad_input`."""

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
TOPIC = "produce --file {records_jsonl} --topic"

CASES: dict[str, Case] = {
    **{
        f"spec-{kind}": case(f"produce --file {{records_jsonl}} --spec {{{kind}}}", BAD, names=n)
        for kind, n in SPEC_KINDS
    },
    **{f"file-{kind}": case(f"produce --topic t --file {{{kind}}}", BAD, names=n) for kind, n in RECORD_KINDS},
    "file-huge": case("produce --topic t --file {huge_jsonl}", BAD, names=STACK_NOT_UP),
    "good-input-no-stack": case("produce --spec {spec_yaml} --file {records_jsonl}", BAD, names=STACK_NOT_UP),
    "topic-empty": case(f"{TOPIC}=", BAD, names="--topic"),
    "topic-dotdot": case(f"{TOPIC} ..", BAD, names="--topic"),
    "topic-control": case(f"{TOPIC} t\x1b[2J", BAD, names="--topic"),
    "topic-huge": case(f"{TOPIC} " + "t" * 10_000, BAD, names="--topic"),
    "usage-rate-negative": case(f"{TOPIC} t --rate -1", USAGE, names="--rate"),
    "usage-spec-and-topic": case(f"{TOPIC} t --spec {{spec_yaml}}", USAGE, names="--help"),
    "usage-no-file": case("produce --topic t", USAGE, names="--help"),
}


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    table = Runner(CASES, make_inputs(Path(tmp_path_factory.mktemp("produce-bad-input"))))
    yield table
    table.close()


@pytest.mark.parametrize("case_id", list(CASES))
def test_produce_bad_input(runner: Runner, case_id: str) -> None:
    check(CASES[case_id], runner.result(case_id), runner.inputs, (BAD, USAGE))

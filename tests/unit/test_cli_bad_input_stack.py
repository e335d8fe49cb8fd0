"""Bad input for the commands that start things — ``flink-replay stack``, ``deploy``, ``demo`` — and for the
top-level command line: only the cases refused before any service is touched (a corrupt ``stack.json`` in a
folder of its own, options out of range, names and topics that cannot be, folders that are not). Exit codes:
stack and demo 1, deploy 2 (as "the stack is not up"), 64 usage. See :mod:`tests.cli_bad_input`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_bad_input import STACK_NOT_UP, USAGE, Case, Runner, case, check, make_inputs

DEPLOY = "deploy --agent-job examples.review_agent.v1.job:job"
#: Stack folders whose stack.json is not a stack record (written by the fixture).
CORRUPT = {
    "corrupt_json": b"{not json",
    "corrupt_binary": bytes(range(256)),
    "corrupt_schema": b'{"pids": []}',
    "corrupt_deep": b"[" * 100_000,
    "corrupt_folder": None,
}

CASES: dict[str, Case] = {
    **{
        f"stack-{action}-{kind}": case(f"stack {action} --workdir {{root}}/{kind}", 1, names="stack.json")
        for action in ("status", "down", "up")
        for kind in CORRUPT
    },
    "stack-port-zero": case("stack up --kafka-port 0", USAGE, names="--kafka-port"),
    "stack-port-too-big": case("stack up --flink-rest-port 70000", USAGE, names="--flink-rest-port"),
    "stack-port-not-a-number": case("stack up --chroma-port x", USAGE, names="--chroma-port"),
    "stack-no-task-slots": case("stack up --task-slots 0", USAGE, names="--task-slots"),
    "stack-unknown-action": case("stack bogus", USAGE, names="--help"),
    "deploy-name-empty": case(f"{DEPLOY} --name=", 2, names="--name"),
    "deploy-name-control": case(f"{DEPLOY} --name prod\x1b[2J", 2, names="--name"),
    "deploy-name-zero-width": case(f"{DEPLOY} --name prod\u200bx", 2, names="--name"),
    "deploy-name-huge": case(f"{DEPLOY} --name " + "p" * 10_000, 2, names="--name"),
    "deploy-name-not-a-topic-prefix": case(f"{DEPLOY} --name prod/x", 2, names="--name"),
    "deploy-name-not-a-spec-name": case(f"{DEPLOY} --name Prod --spec-out {{root}}/s.yaml", 2, names="--name"),
    "deploy-topic-dotdot": case(f"{DEPLOY} --name prod --sink-topic ..", 2, names="--sink-topic"),
    "deploy-topic-empty": case(f"{DEPLOY} --name prod --source-topic=", 2, names="--source-topic"),
    "deploy-reference-newline": case(
        "deploy --agent-job examples.review_agent.v1.job:job\n --name prod", 2, names="--agent-job"
    ),
    "deploy-python-path-missing": case(f"{DEPLOY} --name prod --python-path {{missing}}", 2, names="--python-path"),
    "deploy-python-path-device": case(f"{DEPLOY} --name prod --python-path /dev/zero", 2, names="--python-path"),
    "deploy-spec-out-folder": case(f"{DEPLOY} --name prod --spec-out {{folder}}", 2, names="--spec-out"),
    "deploy-spec-out-no-folder": case(f"{DEPLOY} --name prod --spec-out {{missing}}/s.yaml", 2, names="--spec-out"),
    "deploy-good-input-no-stack": case(f"{DEPLOY} --name prod --python-path {{root}}", 2, names=STACK_NOT_UP),
    "deploy-window-zero": case(f"{DEPLOY} --name prod --window 0", USAGE, names="--window"),
    "deploy-wait-negative": case(f"{DEPLOY} --name prod --wait -5", USAGE, names="--wait"),
    "deploy-usage-no-agent": case("deploy --name prod", USAGE, names="--help"),
    "demo-port-zero": case("demo --port 0", USAGE, names="--port"),
    "demo-port-too-big": case("demo --port 65536", USAGE, names="--port"),
    "demo-window-zero": case("demo --window 0", USAGE, names="--window"),
    "demo-unknown-option": case("demo --bogus", USAGE, names="--help"),
    "top-no-command": case("", USAGE, names="--help"),
    "top-unknown-command": case("bogus", USAGE, names="--help"),
    "top-unknown-option": case("--bogus stack status", USAGE, names="--help"),
    "top-unknown-option-before-compare": case("--bogus compare", 3, names="--help"),  # compare's contract: 3
}
CASES["top-no-command"] = Case((), (USAGE,), "--help")


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    root = Path(tmp_path_factory.mktemp("stack-bad-input"))
    inputs = make_inputs(root)
    for kind, content in CORRUPT.items():
        (root / kind).mkdir()
        if content is None:
            (root / kind / "stack.json").mkdir()
        else:
            (root / kind / "stack.json").write_bytes(content)
    table = Runner(CASES, inputs)
    yield table
    table.close()


@pytest.mark.parametrize("case_id", list(CASES))
def test_stack_deploy_demo_bad_input(runner: Runner, case_id: str) -> None:
    check(CASES[case_id], runner.result(case_id), runner.inputs, (1, 2, 3, USAGE))

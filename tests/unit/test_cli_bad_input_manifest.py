"""Bad input for ``flink-replay manifest validate | show`` (exit 0 valid, 1 invalid or unreadable, 64 usage): every
path kind, unknown URI schemes, a forged manifest's escape sequences; see :mod:`tests.cli_bad_input`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_bad_input import USAGE, Case, Runner, case, check, make_inputs

BAD = 1
KINDS = [
    ("empty", "{empty}"),
    ("missing", "{missing}"),
    ("folder", "{folder}"),
    ("zero", "/dev/zero"),
    ("null", "/dev/null"),
    ("latin1", "{latin1}"),
    ("binary", "{binary}"),
    ("deep_json", "{deep_json}"),
    ("huge_text", "{huge_text}"),
    ("control_path", "name.jsonl"),
    ("unknown_scheme", "nope://"),
    ("file_host", "file://somehost"),
    ("forged", ""),
]
PATHS = {
    "unknown_scheme": "nope://bucket/manifest.json",
    "file_host": "file://somehost/tmp/manifest.json",
    "forged": "{manifest_forged_json}",
}

CASES: dict[str, Case] = {
    **{
        f"{action}-{kind}": case(f"manifest {action} {PATHS.get(kind, '{' + kind + '}')}", BAD, names=names)
        for action in ("validate", "show")
        for kind, names in KINDS
    },
    "show-no-verify-forged": case("manifest show --no-verify {manifest_forged_json}", BAD),
    "usage-no-action": case("manifest", USAGE, names="--help"),
    "usage-no-path": case("manifest validate", USAGE, names="--help"),
}


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    table = Runner(CASES, make_inputs(Path(tmp_path_factory.mktemp("manifest-bad-input"))))
    yield table
    table.close()


@pytest.mark.parametrize("case_id", list(CASES))
def test_manifest_bad_input(runner: Runner, case_id: str) -> None:
    check(CASES[case_id], runner.result(case_id), runner.inputs, (BAD, USAGE))

"""Bad input for ``flink-replay compare`` (exit 0 PASS, 1 FAIL, 2 INCONCLUSIVE, 3 bad usage or unreadable input):
every input file kind, the config file, the output folder; see :mod:`tests.cli_bad_input` for the contract."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_bad_input import Case, Runner, case, check, make_inputs

BAD = 3
VERDICTS = (0, 1, 2)
RUN = "compare --key $.id --out {root}/out"
A = f"{RUN} --candidate {{records_jsonl}} --baseline"
CONFIG = f"{RUN} --baseline {{records_jsonl}} --candidate {{records_jsonl}} --config"

CASES: dict[str, Case] = {
    **{
        f"baseline-{kind}": case(f"{A} {{{kind}}}", BAD, names=names)
        for kind, names in [
            ("empty", ""),
            ("missing", "{missing}"),
            ("folder", "{folder}"),
            ("zero", "/dev/zero"),
            ("null", "/dev/null"),
            ("latin1", "{latin1}"),
            ("binary", "{binary}"),
            ("deep_json", "{deep_json}"),
            ("control_path", "name.jsonl"),
            ("alias_bomb_yaml", "{alias_bomb_yaml}"),
        ]
    },
    "baseline-empty-file": case(f"{A} {{empty}}", *VERDICTS, BAD),
    "baseline-huge": case(f"{A} {{huge_jsonl}}", *VERDICTS),
    "candidate-ints-beyond-floats": case(
        f"{RUN} --baseline {{records_jsonl}} --baseline-2 {{records_jsonl}} --candidate {{big_int_jsonl}}", *VERDICTS
    ),
    **{
        f"config-{kind}": case(f"{CONFIG} {{{kind}}}", BAD, names="--config")
        for kind in [
            "empty",
            "missing",
            "folder",
            "zero",
            "null",
            "latin1",
            "binary",
            "deep_json",
            "huge_text",
            "alias_bomb_config_yaml",
            "deep_config_yaml",
        ]
    },
    "config-spill-dir-missing": case(f"{CONFIG} {{spill_config_json}}", BAD, names="spill_dir"),
    "out-is-a-file": case(
        "compare --key $.id --baseline {records_jsonl} --candidate {records_jsonl} --out {records_jsonl}",
        BAD,
        names="--out",
    ),
    "out-is-a-device": case(
        "compare --key $.id --baseline {records_jsonl} --candidate {records_jsonl} --out /dev/null", BAD, names="--out"
    ),
    "key-control-characters": case(
        "compare --key $.\x1b[2J --baseline {records_jsonl} --candidate {records_jsonl} --out {root}/out",
        *VERDICTS,
        BAD,
    ),
    "usage-missing-option": case("compare --baseline {records_jsonl}", BAD, names="--help"),
    "usage-unknown-option": case(f"{A} {{records_jsonl}} --bogus", BAD, names="--help"),
    "usage-bad-number": case(f"{A} {{records_jsonl}} --alpha nan-ish", BAD, names="--alpha"),
}
del CASES["baseline-empty"]  # an empty run is readable: INCONCLUSIVE or refused, see baseline-empty-file


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    inputs = make_inputs(Path(tmp_path_factory.mktemp("compare-bad-input")))
    table = Runner(CASES, inputs)
    yield table
    table.close()


@pytest.mark.parametrize("case_id", list(CASES))
def test_compare_bad_input(runner: Runner, case_id: str) -> None:
    check(CASES[case_id], runner.result(case_id), runner.inputs, (BAD,))

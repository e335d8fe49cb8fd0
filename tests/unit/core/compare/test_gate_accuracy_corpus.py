"""The labelled corpus of ``benchmarks/gate_accuracy.py`` keeps working: it is well formed, three cases the
comparison already gets right give their verdict with one seed, and the command line answers in JSON.

The benchmark runs every case with three seeds (~35 s); this keeps its code from rotting in a few seconds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from benchmarks import gate_accuracy  # noqa: E402 (the benchmarks folder is not an installed package)

ISSUE_41_KINDS = {"type", "direction", "magnitude", "meaning", "missing", "volatile", "list-count", "mean"}


def test_corpus_is_well_formed() -> None:
    """At least 30 cases with unique names, a label and a reason each; every kind of issue 41, five audits and ten
    shapes of output."""
    cases = gate_accuracy.CASES
    assert len(cases) >= 30
    assert len({c.name for c in cases}) == len(cases)
    assert all(c.expected in ("PASS", "FAIL", "INCONCLUSIVE") and len(c.why) > 20 for c in cases)
    assert {c.kind for c in cases} >= ISSUE_41_KINDS
    assert sum(c.kind.startswith("audit-") for c in cases) >= 5
    assert sum(c.kind == "shape" for c in cases) >= 10  # shapes of output unlike the others (types in lists, ...)
    assert {c.expected for c in cases} == {"PASS", "FAIL", "INCONCLUSIVE"}


@pytest.mark.parametrize("name", ["identical_runs", "label_regression", "too_few_outputs"])
def test_cases_the_comparison_gets_right_give_their_verdict(name: str) -> None:
    case = next(c for c in gate_accuracy.CASES if c.name == name)
    verdict, reasons = gate_accuracy.run_case(case, seed=1)
    assert verdict == case.expected, reasons


def test_one_case_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """``--case NAME --json``: one case, a machine-readable summary, exit code 0 when it is right."""
    code = gate_accuracy.main(["--case", "identical_runs", "--seeds", "1", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [c["name"] for c in summary["cases"]] == ["identical_runs"]
    assert summary["cases"][0]["verdicts"] == ["PASS"]
    assert summary["totals"] == {"false PASS": 0, "false FAIL": 0, "wrong INCONCLUSIVE": 0, "missed INCONCLUSIVE": 0}


def test_a_wrong_verdict_is_counted_by_kind() -> None:
    assert gate_accuracy.error_kind("FAIL", "PASS") == "false PASS"
    assert gate_accuracy.error_kind("PASS", "FAIL") == "false FAIL"
    assert gate_accuracy.error_kind("PASS", "INCONCLUSIVE") == "wrong INCONCLUSIVE"
    assert gate_accuracy.error_kind("INCONCLUSIVE", "PASS") == "missed INCONCLUSIVE"
    assert gate_accuracy.error_kind("FAIL", "FAIL") is None

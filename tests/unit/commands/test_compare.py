"""`flink-replay compare`: the exit-code contract, the three reports, bad usage and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from airflow_flink_replay.cli import main
from airflow_flink_replay.core.compare.synthetic import make_audit, make_run, write_jsonl

N = 300


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    noise = {"paraphrase": 0.3}
    outs_a = make_run(N, "baseline", 1, **noise)
    return {
        "a": write_jsonl(tmp_path / "a.jsonl", outs_a),
        "a2": write_jsonl(tmp_path / "a2.jsonl", make_run(N, "baseline_2", 2, **noise)),
        "same": write_jsonl(tmp_path / "same.jsonl", make_run(N, "candidate", 3, **noise)),
        "label": write_jsonl(tmp_path / "label.jsonl", make_run(N, "candidate", 3, label_change=0.2, **noise)),
        "aa": write_jsonl(tmp_path / "aa.jsonl", make_audit(outs_a, "baseline")),
        "ab": write_jsonl(tmp_path / "ab.jsonl", make_audit(outs_a, "candidate", extra_tool_keys=0.2)),
        "out": tmp_path / "out",
    }


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run the real console script in a subprocess (the exit code is the contract)."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_flink_replay.cli", "compare", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_pass_exits_0_and_writes_three_reports(files: dict[str, Path]) -> None:
    proc = cli(
        "--baseline",
        files["a"],
        "--baseline-2",
        files["a2"],
        "--candidate",
        files["same"],
        "--key",
        "$.id",
        "--out",
        files["out"],
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("PASS")
    summary = json.loads((files["out"] / "summary.json").read_text())
    assert summary["verdict"] == "PASS" and summary["mode"] == "noise_calibrated"
    assert {f["path"] for f in summary["fields"]} >= {"$.label", "$.summary"}
    html = (files["out"] / "report.html").read_text()
    assert "PASS" in html and "<script" not in html and "http://" not in html and "https://" not in html
    suite = ET.parse(files["out"] / "junit.xml").getroot()
    assert suite.tag == "testsuite" and suite.get("failures") == "0"
    names = {tc.get("name") for tc in suite.iter("testcase")}
    assert {"verdict", "$.label", "$.summary", "missing outputs"} <= names


def test_fail_exits_1_with_junit_failure_on_the_field(files: dict[str, Path]) -> None:
    proc = cli(
        "--baseline",
        files["a"],
        "--baseline-2",
        files["a2"],
        "--candidate",
        files["label"],
        "--key",
        "$.id",
        "--out",
        files["out"],
    )
    assert proc.returncode == 1, proc.stderr
    assert "FIELD_REGRESSION" in proc.stdout and "$.label" in proc.stdout
    suite = ET.parse(files["out"] / "junit.xml").getroot()
    failed = {tc.get("name") for tc in suite.iter("testcase") if tc.find("failure") is not None}
    assert failed == {"verdict", "$.label"}


def test_inconclusive_exits_2(files: dict[str, Path], tmp_path: Path) -> None:
    few = write_jsonl(tmp_path / "few.jsonl", make_run(5, "baseline", 1))
    assert (
        main(
            [
                "compare",
                "--baseline",
                str(few),
                "--baseline-2",
                str(few),
                "--candidate",
                str(few),
                "--key",
                "$.id",
                "--out",
                str(files["out"]),
            ]
        )
        == 2
    )
    suite = ET.parse(files["out"] / "junit.xml").getroot()
    verdict = next(tc for tc in suite.iter("testcase") if tc.get("name") == "verdict")
    assert verdict.find("skipped") is not None


def test_audit_options_make_a_side_effect_finding(files: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    code = main(
        [
            "compare",
            "--baseline",
            str(files["a"]),
            "--baseline-2",
            str(files["a2"]),
            "--candidate",
            str(files["same"]),
            "--key",
            "$.id",
            "--out",
            str(files["out"]),
            "--baseline-audit",
            str(files["aa"]),
            "--candidate-audit",
            str(files["ab"]),
            "--json",
        ]
    )
    assert code == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["verdict"] == "FAIL"
    reason = next(r for r in printed["reasons"] if r["code"] == "SIDE_EFFECT_REGRESSION")
    assert "candidate now calls tool notify_support for" in reason["message"]
    assert printed["reports"]["html"].endswith("report.html")


def test_options_override_config_file(files: dict[str, Path], tmp_path: Path) -> None:
    # a YAML config that ignores the label makes the FAIL a PASS; --must-not-change on the CLI brings it back
    cfg = tmp_path / "compare.yaml"
    cfg.write_text("ignore: ['$.label']\nabs_threshold: 0.05\n")
    base = [
        "compare",
        "--baseline",
        str(files["a"]),
        "--baseline-2",
        str(files["a2"]),
        "--candidate",
        str(files["label"]),
        "--key",
        "$.id",
        "--out",
        str(files["out"]),
        "--config",
        str(cfg),
    ]
    assert main(base) == 0
    summary = json.loads((files["out"] / "summary.json").read_text())
    assert summary["config"]["abs_threshold"] == 0.05
    assert main([*base[:-2], "--must-not-change", "$.label", "--tolerance", "$.score=0.01"]) == 1


def test_bad_json_line_exits_3_naming_the_line(files: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(files["a"].read_text().splitlines()[0] + "\n\n" + '{"id": "r-1", "label": }\n')
    proc = cli("--baseline", files["a"], "--candidate", bad, "--key", "$.id", "--out", files["out"])
    assert proc.returncode == 3
    assert f"{bad}:3: invalid JSON" in proc.stderr
    assert not (files["out"] / "summary.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline", "A"], "the following arguments are required"),
        (["--baseline", "A", "--candidate", "B", "--key", "$.id", "--out", "o", "--bogus"], "unrecognized"),
        (["--baseline", "A", "--candidate", "B", "--key", "$.id", "--out", "o", "--alpha", "x"], "invalid float"),
    ],
)
def test_bad_usage_exits_3(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["compare", *args])
    assert exc.value.code == 3
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--abs-threshold", "2"], "configuration abs_threshold"),
        (["--tolerance", "$.score"], "expected JSONPATH=NUMBER"),
        (["--key", "id"], "must start with '$'"),
        (["--baseline-audit", "nope.jsonl"], "both the baseline and the candidate audit"),
        (["--config", "missing.yaml"], "no such file"),
    ],
)
def test_bad_options_exit_3(
    files: dict[str, Path], extra: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    args = [
        "compare",
        "--baseline",
        str(files["a"]),
        "--candidate",
        str(files["same"]),
        "--key",
        "$.id",
        "--out",
        str(files["out"]),
        *extra,
    ]
    assert main(args) == 3
    assert message in capsys.readouterr().err


def test_missing_input_file_exits_3(files: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    assert (
        main(
            [
                "compare",
                "--baseline",
                str(files["a"]),
                "--candidate",
                "/nonexistent/b.jsonl",
                "--key",
                "$.id",
                "--out",
                str(files["out"]),
            ]
        )
        == 3
    )
    assert "/nonexistent/b.jsonl: file not found" in capsys.readouterr().err


def test_repeated_ignore_flags_all_apply(files: dict[str, Path], tmp_path: Path) -> None:
    """`--ignore` given twice (the console script, end to end): both paths are left out, not only the last."""
    both = write_jsonl(
        tmp_path / "both.jsonl", make_run(N, "candidate", 3, paraphrase=0.3, label_change=0.2, tool_change=0.2)
    )
    common = ["--baseline", files["a"], "--baseline-2", files["a2"], "--candidate", both, "--key", "$.id"]
    plain = cli(*common, "--out", tmp_path / "plain")
    assert plain.returncode == 1, plain.stderr
    failed = json.loads((tmp_path / "plain" / "summary.json").read_text())["reasons"][0]["fields"]
    assert set(failed) == {"$.label", "$.tools"}

    for flags in (["--ignore", "$.label"], ["--ignore", "$.tools"]):
        one = cli(*common, *flags, "--out", tmp_path / "one")
        assert one.returncode == 1, (flags, one.stdout)

    out = tmp_path / "two"
    two = cli(*common, "--ignore", "$.label", "--ignore", "$.tools", "--out", out)
    assert two.returncode == 0, two.stdout + two.stderr
    assert two.stdout.startswith("PASS")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ignore"] == ["$._replay", "$.label", "$.tools"]
    assert summary["config"]["ignore"] == ["$.label", "$.tools"]
    paths = {f["path"] for f in summary["fields"]}
    assert "$.summary" in paths and not paths & {"$.label", "$.tools"}
    suite = ET.parse(out / "junit.xml").getroot()
    assert not {"$.label", "$.tools"} & {tc.get("name") for tc in suite.iter("testcase")}
    assert "<code>$.label</code>, <code>$.tools</code>" in (out / "report.html").read_text()


def _accented(tmp_path: Path) -> list[str]:
    def outs(change: bool) -> list[dict]:
        return [
            {"id": f"r-{i}", "priorité": "haute" if change else "basse", "a b": i if change else 0} for i in range(60)
        ]

    a = write_jsonl(tmp_path / "a.jsonl", outs(False))
    a2 = write_jsonl(tmp_path / "a2.jsonl", outs(False))
    b = write_jsonl(tmp_path / "b.jsonl", outs(True))
    return [
        "compare",
        "--baseline",
        str(a),
        "--baseline-2",
        str(a2),
        "--candidate",
        str(b),
        "--key",
        "$.id",
        "--out",
        str(tmp_path / "out"),
    ]


def test_rules_on_non_ascii_and_quoted_names_match(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`--must-not-change '$.priorité'` and `--ignore "$['a b']"` used to match nothing (JSON-escaped paths)."""
    args = _accented(tmp_path)
    assert main([*args, "--must-not-change", "$.priorité", "--ignore", "$['a b']"]) == 1
    out = capsys.readouterr().out
    assert "MUST_NOT_CHANGE" in out and "$.priorité" in out and "\\u00e9" not in out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {f["path"] for f in summary["fields"]} == {"$.id", "$.priorité"}


def test_ignore_without_dollar_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([*_accented(tmp_path), "--ignore", "label"]) == 3
    err = capsys.readouterr().err
    assert "--ignore" in err and "must start with '$'" in err


def test_rule_matching_nothing_is_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = _accented(tmp_path)
    main([*args, "--ignore", "$.priority", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert any("$.priority matches no field" in w for w in summary["warnings"]), summary


# ------------------------------------------------------------------ bad input: exit 3, one line, file + line + fix
def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_deeply_nested_input_exits_3_naming_the_line(files: dict[str, Path], tmp_path: Path) -> None:
    deep = tmp_path / "deep.jsonl"
    first = files["a"].read_text().splitlines()[:2]
    deep.write_text("\n".join([*first, '{"id": "r-x", "v": ' + "[" * 1000 + "]" * 1000 + "}"]) + "\n")
    line = _one_error_line(cli("--baseline", files["a"], "--candidate", deep, "--key", "$.id", "--out", files["out"]))
    assert f"{deep}:3:" in line and "nested" in line and "Fix:" in line


def test_nesting_that_json_reads_but_is_too_deep_to_flatten_exits_3(files: dict[str, Path], tmp_path: Path) -> None:
    deep = tmp_path / "deep.jsonl"
    nested: dict = {"leaf": 1}
    for _ in range(600):
        nested = {"n": nested}
    deep.write_text(json.dumps({"id": "r-x", "v": nested}) + "\n")
    line = _one_error_line(
        cli(
            "--baseline",
            files["a"],
            "--candidate",
            deep,
            "--key",
            "$.id",
            "--out",
            files["out"],
            "--list-mode",
            "index",
        )
    )
    assert f"{deep}:1:" in line and "nested" in line


def test_non_utf8_input_is_reported_by_line(files: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "latin1.jsonl"
    lines = files["a"].read_bytes().splitlines()[:400]
    lines[299] = '{"id": "r-299", "label": "café"}'.encode("latin-1")
    bad.write_bytes(b"\n".join(lines) + b"\n")
    line = _one_error_line(cli("--baseline", files["a"], "--candidate", bad, "--key", "$.id", "--out", files["out"]))
    assert f"{bad}:300:" in line and "not UTF-8" in line and "Fix:" in line


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"alpha": 0.05,\n "list_mode": "caf\xe9"}'.encode("latin-1"), ":2: not UTF-8"),
        (b'{"fields": ' + b"[" * 1000 + b"]" * 1000 + b"}", "nested"),
    ],
    ids=["latin-1", "deep"],
)
def test_bad_config_file_exits_3(files: dict[str, Path], tmp_path: Path, content: bytes, expected: str) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(content)
    line = _one_error_line(
        cli(
            "--baseline",
            files["a"],
            "--candidate",
            files["same"],
            "--key",
            "$.id",
            "--out",
            files["out"],
            "--config",
            config,
        )
    )
    assert str(config) in line and expected in line


def test_control_characters_are_escaped_in_junit_and_terminal(files: dict[str, Path], tmp_path: Path) -> None:
    evil = "evil\x1b[31m\x07\x00tool"
    records = [json.loads(x) for x in files["ab"].read_text().splitlines()]
    for r in records[:40]:
        r["resource_name"] = evil
    audit = write_jsonl(tmp_path / "evil.jsonl", records)
    proc = cli(
        "--baseline",
        files["a"],
        "--baseline-2",
        files["a2"],
        "--candidate",
        files["same"],
        "--key",
        "$.id",
        "--out",
        files["out"],
        "--baseline-audit",
        files["aa"],
        "--candidate-audit",
        audit,
    )
    assert proc.returncode == 1, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout and "\x00" not in proc.stdout
    assert "evil\\x1b[31m\\x07\\x00tool" in proc.stdout
    suite = ET.parse(files["out"] / "junit.xml").getroot()  # well-formed
    assert any("evil\\x1b" in (tc.get("name") or "") for tc in suite.iter("testcase"))


def test_more_baselines_measure_the_noise_on_more_pairs(files: dict[str, Path], tmp_path: Path) -> None:
    """``--more-baseline`` (repeatable): the baseline with each more run is a noise pair; their audits are read with
    ``--more-baseline-audit``; without ``--baseline-2`` it is bad usage."""
    a3 = write_jsonl(tmp_path / "a3.jsonl", make_run(N, "baseline_3", 4, paraphrase=0.3))
    a3_records = make_audit(make_run(N, "baseline_3", 4), "baseline_3")
    a3_audit = write_jsonl(tmp_path / "a3-audit.jsonl", a3_records)
    code = main(
        [
            "compare",
            "--baseline",
            str(files["a"]),
            "--baseline-2",
            str(files["a2"]),
            "--more-baseline",
            str(a3),
            "--candidate",
            str(files["label"]),
            "--key",
            "$.id",
            "--out",
            str(files["out"]),
            "--baseline-audit",
            str(files["aa"]),
            "--candidate-audit",
            str(files["aa"]),
            "--more-baseline-audit",
            str(a3_audit),
        ]
    )
    assert code == 1  # the label change still fails
    summary = json.loads((files["out"] / "summary.json").read_text())
    assert summary["counts"]["noise_pairs"] == 2
    assert [p["pair"] for p in summary["noise_pairs"]] == ["baseline ~ baseline_2", "baseline ~ baseline_3"]
    assert summary["counts"]["audit_records"]["baseline_3"] == len(a3_records)
    done = cli(
        "--baseline",
        files["a"],
        "--more-baseline",
        a3,
        "--candidate",
        files["same"],
        "--key",
        "$.id",
        "--out",
        files["out"],
    )
    assert done.returncode == 3 and "baseline-2" in done.stderr

"""``flink-replay compare``: compare replay outputs of a baseline (twice) and a candidate, and gate.

Contract: writes OUT/summary.json, OUT/report.html, OUT/junit.xml and exits 0 for PASS, 1 for FAIL,
2 for INCONCLUSIVE and 3 for bad usage or unreadable input (a bad JSON line is named by its line number).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from airflow_flink_replay.exceptions import UsageError

#: Exit code for bad usage or unreadable input (argparse's own 2 would read as INCONCLUSIVE).
EXIT_USAGE = 3


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``compare``."""
    p = sub.add_parser(
        "compare",
        help="compare baseline and candidate replay outputs (noise-calibrated) and gate",
        description=(
            "Align outputs by --key, diff them per field, calibrate against the noise between --baseline "
            "and --baseline-2, and decide PASS (exit 0), FAIL (1) or INCONCLUSIVE (2); 3 = bad usage/input."
        ),
    )
    p.add_argument("--baseline", required=True, type=Path, metavar="A.jsonl", help="baseline outputs (JSONL)")
    p.add_argument("--baseline-2", type=Path, metavar="A2.jsonl", help="the baseline run again, to measure noise")
    p.add_argument("--candidate", required=True, type=Path, metavar="B.jsonl", help="candidate outputs (JSONL)")
    p.add_argument("--key", required=True, metavar="JSONPATH", help="correlation key, e.g. '$.id'")
    p.add_argument(
        "--ignore",
        action="extend",
        nargs="+",
        default=[],
        metavar="JSONPATH",
        help="paths to ignore ($._replay always is); repeatable",
    )
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder for the reports")
    p.add_argument("--config", type=Path, metavar="FILE", help="CompareConfig as JSON or YAML")
    p.add_argument("--baseline-audit", type=Path, metavar="FILE", help="side-effect audit of the baseline (JSONL)")
    p.add_argument("--baseline-2-audit", type=Path, metavar="FILE", help="side-effect audit of baseline-2")
    p.add_argument("--candidate-audit", type=Path, metavar="FILE", help="side-effect audit of the candidate")
    p.add_argument("--abs-threshold", type=float, help="absolute margin over the noise rate (default 0.02)")
    p.add_argument("--rel-threshold", type=float, help="relative margin over the noise rate (default 0.25)")
    p.add_argument("--alpha", type=float, help="one-sided level of the significance bound (default 0.05)")
    p.add_argument("--min-aligned", type=int, help="fewer aligned outputs -> INCONCLUSIVE (default 20)")
    p.add_argument("--max-noise-rate", type=float, help="noisier fields cannot decide (default 0.5)")
    p.add_argument("--text-threshold", type=float, help="text similarity counted as equal (default 0.85)")
    p.add_argument("--list-mode", choices=["auto", "index", "set"], help="how lists compare (default auto)")
    for flag, comp in (("--set", "set"), ("--text", "text"), ("--exact", "exact")):
        p.add_argument(flag, action="append", default=[], metavar="JSONPATH", help=f"compare this path as {comp}")
    p.add_argument(
        "--tolerance",
        action="append",
        default=[],
        metavar="JSONPATH=ABS",
        help="numeric absolute tolerance for a path, e.g. '$.score=0.01'",
    )
    p.add_argument(
        "--must-not-change",
        action="append",
        default=[],
        metavar="JSONPATH",
        help="FAIL if the candidate changes this field where the baseline runs agree",
    )
    p.add_argument("--json", action="store_true", help="print summary.json's small form instead of text")
    p.set_defaults(func=run)
    _exit_3_on_usage_errors(p)


def _exit_3_on_usage_errors(p: argparse.ArgumentParser) -> None:
    """argparse exits 2 on usage errors; the contract says 3, and 2 means INCONCLUSIVE."""

    def error(message: str) -> NoReturn:
        p.print_usage(sys.stderr)
        p.exit(EXIT_USAGE, f"{p.prog}: error: {message}\n")

    original = p.parse_known_args

    def parse_known_args(args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = original(args, namespace)
        if extras:
            error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras

    p.error = error  # type: ignore[method-assign]
    p.parse_known_args = parse_known_args  # type: ignore[method-assign,assignment]


def build_config(args: argparse.Namespace) -> Any:
    """The CompareConfig from --config plus the command-line overrides."""
    from airflow_flink_replay.core.compare import CompareConfig

    data = _read_config(args.config) if args.config is not None else {}
    overrides = {
        "abs_threshold": args.abs_threshold,
        "rel_threshold": args.rel_threshold,
        "alpha": args.alpha,
        "min_aligned": args.min_aligned,
        "max_noise_rate": args.max_noise_rate,
        "text_threshold": args.text_threshold,
        "list_mode": args.list_mode,
    }
    data.update({k: v for k, v in overrides.items() if v is not None})
    rules: list[dict[str, Any]] = []
    for comp, paths in (("set", args.set), ("text", args.text), ("exact", args.exact)):
        rules.extend({"path": p, "comparator": comp} for p in paths)
    for spec in args.tolerance:
        path, sep, tol = spec.partition("=")
        try:
            rules.append({"path": path, "comparator": "numeric", "abs_tol": float(tol)})
        except ValueError:
            raise UsageError(f"--tolerance {spec!r}: expected JSONPATH=NUMBER, e.g. '$.score=0.01'") from None
        if not sep:
            raise UsageError(f"--tolerance {spec!r}: expected JSONPATH=NUMBER, e.g. '$.score=0.01'")
    rules.extend({"path": p, "must_not_change": True} for p in args.must_not_change)
    # command-line rules first: the first matching rule wins
    data["fields"] = rules + list(data.get("fields") or [])
    try:
        return CompareConfig.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise UsageError(f"configuration {where}: {first['msg']}") from None


def _read_config(path: Path) -> dict[str, Any]:
    """The --config file as a mapping; every problem is one line naming the file (and line) with a fix."""
    from airflow_flink_replay.core.compare.loading import first_bad_utf8_line

    if not path.is_file():
        raise UsageError(f"--config {path}: file not found")
    raw = path.read_bytes()
    line, col, byte = first_bad_utf8_line(raw)
    if line:
        raise UsageError(
            f"--config {path}:{line}: not UTF-8 text (byte 0x{byte:02x} at column {col}). Fix: save it as UTF-8"
        )
    text = raw.decode("utf-8")
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
    except RecursionError:
        raise UsageError(
            f"--config {path}: nested too deeply to read. Fix: a CompareConfig is a few levels deep"
        ) from None
    except Exception as err:
        raise UsageError(f"--config {path}: cannot parse: {' '.join(str(err).split())}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a mapping of CompareConfig fields")
    return data


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters (terminal escapes, NUL, bell) written as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def run(args: argparse.Namespace) -> int:
    """Compare, write the reports, print the verdict; return the exit code."""
    from airflow_flink_replay.core.compare import EXIT_CODES, compare_runs, write_reports
    from airflow_flink_replay.core.compare.result import WARNING_CODES
    from airflow_flink_replay.exceptions import CompareInputError

    try:
        config = build_config(args)
        audits = None
        if args.baseline_audit or args.candidate_audit or args.baseline_2_audit:
            audits = {
                "baseline": args.baseline_audit,
                "candidate": args.candidate_audit,
                "baseline_2": args.baseline_2_audit,
            }
        result = compare_runs(
            args.baseline,
            args.candidate,
            baseline_2=args.baseline_2,
            key=args.key,
            config=config,
            audits=audits,
            ignore=args.ignore,
        )
    except (UsageError, CompareInputError) as err:
        print(printable(f"flink-replay compare: error: {' '.join(str(err).splitlines())}"), file=sys.stderr)
        return EXIT_USAGE
    try:
        written = write_reports(result, args.out)
    except OSError as err:
        print(f"flink-replay compare: error: cannot write reports to {args.out}: {err}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps({**result.summary(), "reports": {k: str(v) for k, v in written.items()}}, indent=2))
    else:
        print(f"{result.verdict}  ({result.mode.replace('_', '-')}, {result.counts.aligned_candidate} aligned outputs)")
        for reason in result.reasons:
            severity = "warning" if reason.code in WARNING_CODES else reason.severity
            print(printable(f"  [{severity}] {reason.code}: {reason.message}"))
        for name, path in written.items():
            print(f"  {name:8s} {path}")
    return EXIT_CODES[result.verdict]

"""``flink-replay compare``: compare replay outputs of a baseline (twice) and a candidate, and gate.

Contract: writes OUT/summary.json, OUT/report.html, OUT/junit.xml and exits 0 for PASS, 1 for FAIL,
2 for INCONCLUSIVE and 3 for bad usage or unreadable input (a bad JSON line is named by its line number).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from airflow_flink_replay.commands.output import one_line, printable
from airflow_flink_replay.exceptions import UsageError

#: Exit code for bad usage or unreadable input (argparse's own 2 would read as INCONCLUSIVE).
EXIT_USAGE = 3
#: Largest --config file read.
MAX_CONFIG_BYTES = 1 << 20


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
    p.add_argument(
        "--more-baseline",
        action="append",
        default=[],
        type=Path,
        metavar="A3.jsonl",
        help="the baseline run once more (repeatable; baseline_3, ...): the noise is measured on every pair of "
        "baseline runs, pooled; needs --baseline-2",
    )
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
    p.add_argument(
        "--more-baseline-audit",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="side-effect audit of each --more-baseline, in the same order (repeatable)",
    )
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
        p.exit(EXIT_USAGE, f"{p.prog}: error: {one_line(message)}. Fix: see `{p.prog} --help`\n")

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
    from pydantic import ValidationError

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
        config = CompareConfig.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise UsageError(f"configuration {where}: {first['msg']}") from None
    if config.spill_dir is not None and not Path(config.spill_dir).is_dir():
        raise UsageError(
            f"configuration spill_dir {config.spill_dir}: no such folder. Fix: create it, or leave spill_dir out "
            "(the temp folder)"
        )
    return config


def _read_config(path: Path) -> dict[str, Any]:
    """The --config file as a mapping; every problem is one line naming the file (and line) with a fix. It is read
    with bounds (a regular file of at most 1 MiB; YAML without alias bombs or deep nesting)."""
    from airflow_flink_replay.core.yaml_input import load_yaml, read_text_file

    expected = "a CompareConfig as JSON or YAML"
    try:
        text = read_text_file(path, f"--config {path}", expected, MAX_CONFIG_BYTES)
        yaml_file = path.suffix in (".yaml", ".yml")
        data = (load_yaml(text, f"--config {path}") or {}) if yaml_file else json.loads(text)
    except RecursionError:
        raise UsageError(
            f"--config {path}: nested too deeply to read. Fix: a CompareConfig is a few levels deep"
        ) from None
    except ValueError as err:
        message = str(err)
        if not message.startswith("--config"):  # json's own error
            message = f"--config {path}: cannot parse: {' '.join(message.split())}. Fix: correct the JSON"
        raise UsageError(message) from None
    if not isinstance(data, dict):
        raise UsageError(f'--config {path}: expected a mapping of CompareConfig fields. Fix: e.g. {{"alpha": 0.05}}')
    return data


def run(args: argparse.Namespace) -> int:
    """Compare, write the reports, print the verdict; return the exit code."""
    from airflow_flink_replay.core.compare import EXIT_CODES, compare_runs, write_reports
    from airflow_flink_replay.core.compare.result import WARNING_CODES
    from airflow_flink_replay.exceptions import CompareInputError

    try:
        config = build_config(args)
        audits = None
        if args.baseline_audit or args.candidate_audit or args.baseline_2_audit or args.more_baseline_audit:
            audits = {
                "baseline": args.baseline_audit,
                "candidate": args.candidate_audit,
                "baseline_2": args.baseline_2_audit,
                "extra_baselines": list(args.more_baseline_audit) or None,
            }
        result = compare_runs(
            args.baseline,
            args.candidate,
            baseline_2=args.baseline_2,
            key=args.key,
            config=config,
            audits=audits,
            ignore=args.ignore,
            extra_baselines=args.more_baseline,
        )
    except (UsageError, CompareInputError) as err:
        message = one_line(err)
        if "Fix:" not in message:  # every error line ends with what to do
            message += f". Fix: correct {getattr(err, 'source', 'the option above')} (`flink-replay compare --help`)"
        print(f"flink-replay compare: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    try:
        written = write_reports(result, args.out)
    except OSError as err:
        print(
            one_line(
                f"flink-replay compare: error: cannot write reports to {args.out}: {err}. Fix: give --out "
                "a folder you can write"
            ),
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.json:
        print(json.dumps({**result.summary(), "reports": {k: str(v) for k, v in written.items()}}, indent=2))
    else:
        print(f"{result.verdict}  ({result.mode.replace('_', '-')}, {result.counts.aligned_candidate} aligned outputs)")
        for reason in result.reasons:
            severity = "warning" if reason.code in WARNING_CODES else reason.severity
            print(printable(f"  [{severity}] {reason.code}: {reason.message}", keep="\t"))
        for name, path in written.items():
            print(f"  {name:8s} {path}")
    return EXIT_CODES[result.verdict]

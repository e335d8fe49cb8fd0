"""``flink-replay manifest validate PATH`` and ``flink-replay manifest show PATH``."""

from __future__ import annotations

import argparse
import json
import sys

from airflow_flink_replay.core.manifest_io import load_manifest, savepoint_problems
from airflow_flink_replay.exceptions import ManifestError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``manifest`` and its actions."""
    p = sub.add_parser("manifest", help="validate or show a replay manifest")
    actions = p.add_subparsers(dest="manifest_action", required=True)
    v = actions.add_parser(
        "validate", help="check schema, digest (tampering) and, with --check-savepoint, the savepoint"
    )
    v.add_argument("path", help="manifest path or URI (file://, s3://, …)")
    v.add_argument("--check-savepoint", action="store_true", help="also check that the savepoint's _metadata exists")
    v.set_defaults(func=run_validate)
    s = actions.add_parser("show", help="print a human summary (or --json)")
    s.add_argument("path", help="manifest path or URI")
    s.add_argument("--json", action="store_true", help="print the manifest JSON")
    s.add_argument("--no-verify", action="store_true", help="show even when the digest does not match")
    s.set_defaults(func=run_show)


def run_validate(args: argparse.Namespace) -> int:
    """Exit 0 when valid, 1 with one ``field: problem. Fix: …`` line per problem."""
    try:
        manifest = load_manifest(args.path)
    except ManifestError as err:
        print(f"INVALID {args.path}\n{err}", file=sys.stderr)
        return 1
    problems = savepoint_problems(manifest) if args.check_savepoint else []
    if problems:
        print(f"INVALID {args.path}\n" + "\n".join(f"  - {p}" for p in problems), file=sys.stderr)
        return 1
    print(f"OK {args.path}: {manifest.capture.record_count} records, {manifest.digest}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    """Print the summary; a tampered manifest is refused unless ``--no-verify``."""
    try:
        manifest = load_manifest(args.path, verify=not args.no_verify)
    except ManifestError as err:
        print(str(err), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(json.loads(manifest.to_json()), indent=2))
    else:
        print(manifest.summary())
    return 0

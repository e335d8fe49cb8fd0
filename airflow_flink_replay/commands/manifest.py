"""``flink-replay manifest validate PATH`` and ``flink-replay manifest show PATH``.

Exit codes: 0 valid (``show``: printed); 1 invalid, tampered or unreadable — each problem on a line naming the
field or the file and the fix; 64 a command line that does not parse.

The manifest is read with bounds: a local path or ``file://`` URI must be a regular file of at most
:data:`MAX_MANIFEST_BYTES` (a folder, ``/dev/zero`` or a pipe is refused unread), another URI is read through its
fsspec backend no further than that. What is printed from it is escaped (:mod:`~airflow_flink_replay.commands.output`):
a job name holding terminal escapes or newlines cannot repaint the terminal or forge a line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_flink_replay.commands.output import escaped_model, one_line, printable, printable_lines
from airflow_flink_replay.exceptions import ManifestError

if TYPE_CHECKING:
    from airflow_flink_replay.core.manifest import ReplayManifest

#: Largest manifest read (one is a few KB; a plan with many vertices and partitions stays far below this).
MAX_MANIFEST_BYTES = 16 << 20
_EXPECTED = "the path or URI of a manifest.json (its run record names it)"


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


def read_manifest_text(location: str) -> str:
    """The manifest's text, read with bounds; :class:`ValueError` naming the location and the fix otherwise."""
    from urllib.parse import unquote, urlparse

    from airflow_flink_replay.core.yaml_input import read_text_file

    parsed = urlparse(location)
    if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
        raise ValueError(f"{location}: a file:// URI with a host ({parsed.netloc!r}). Fix: file:///absolute/path")
    if parsed.scheme in ("", "file") or len(parsed.scheme) == 1:  # a plain path (C:\\ on Windows)
        path = Path(unquote(parsed.path) if parsed.scheme == "file" else location)
        return read_text_file(path, location, _EXPECTED, MAX_MANIFEST_BYTES)
    return _read_remote(location)


def _read_remote(location: str) -> str:
    """A manifest behind another fsspec scheme, read no further than :data:`MAX_MANIFEST_BYTES` (+1)."""
    import fsspec

    try:
        with fsspec.open(location, "rb") as fh:
            data = fh.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"{location}: not found. Fix: give {_EXPECTED}") from None
    except ImportError as err:  # the scheme is known, its backend (s3fs, gcsfs, ...) is not installed
        raise ValueError(f"{location}: {one_line(err)}. Fix: install the fsspec backend of this scheme") from None
    except ValueError as err:  # fsspec: "Protocol not known: ..."
        raise ValueError(
            f"{location}: {one_line(err)}. Fix: a local path, file:///path, or a URI whose "
            "fsspec backend is installed (s3://, gs://, ...)"
        ) from None
    except OSError as err:
        raise ValueError(f"{location}: cannot be read ({one_line(err)}). Fix: give {_EXPECTED}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise ValueError(f"{location}: larger than {MAX_MANIFEST_BYTES:,} bytes. Fix: give {_EXPECTED}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{location}: not UTF-8 text (byte {err.start}). Fix: give {_EXPECTED}") from None


def load(location: str, *, verify: bool = True) -> ReplayManifest:
    """Read and parse the manifest; :class:`ManifestError` with one problem line for anything that fails."""
    try:
        text = read_manifest_text(location)
    except ValueError as err:
        raise ManifestError([str(err)], title="cannot read the manifest") from None
    from airflow_flink_replay.core.manifest import ReplayManifest

    try:
        data = json.loads(text)
    except RecursionError:
        raise ManifestError([f"{location}: nested too deeply. Fix: restore the manifest file"]) from None
    except ValueError as err:  # not JSON, or beyond json's limits (an integer of thousands of digits)
        raise ManifestError([f"{location}: not JSON ({one_line(err)}). Fix: restore the manifest file"]) from None
    if not isinstance(data, dict):
        raise ManifestError([f"{location}: a JSON {type(data).__name__}, not a manifest. Fix: give {_EXPECTED}"])
    return ReplayManifest.parse(data, verify=verify)


def run_validate(args: argparse.Namespace) -> int:
    """Exit 0 when valid, 1 with one ``field: problem. Fix: …`` line per problem."""
    from airflow_flink_replay.core.manifest_io import savepoint_problems

    try:
        manifest = load(args.path)
    except ManifestError as err:
        print(printable_lines(f"INVALID {args.path}\n{err}"), file=sys.stderr)
        return 1
    problems = savepoint_problems(manifest) if args.check_savepoint else []
    if problems:
        print(printable_lines(f"INVALID {args.path}\n" + "\n".join(f"  - {p}" for p in problems)), file=sys.stderr)
        return 1
    print(printable(f"OK {args.path}: {manifest.capture.record_count} records, {manifest.digest}"))
    return 0


def run_show(args: argparse.Namespace) -> int:
    """Print the summary; a tampered manifest is refused unless ``--no-verify``."""
    try:
        manifest = load(args.path, verify=not args.no_verify)
    except ManifestError as err:
        print(printable_lines(str(err)), file=sys.stderr)
        return 1
    if args.json:  # json.dumps escapes every control character (and all non-ASCII)
        print(json.dumps(json.loads(manifest.to_json()), indent=2))
    else:
        print(printable_lines(escaped_model(manifest).summary()))
    return 0

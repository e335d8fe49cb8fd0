"""`flink-replay manifest validate | show`: what is printed from a manifest is escaped, and a path that is not a
manifest file (a folder, a device, not UTF-8, an unknown scheme) is one problem line and exit 1, read with bounds."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_flink_replay.core.manifest import ReplayManifest
from tests.unit.core.test_manifest import _data

FORGED = "support-agent\x1b[2K\r\nINFO gate PASSED\x07\u202e"


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_flink_replay.cli", "manifest", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _manifest_file(tmp_path: Path, job_name: str) -> Path:
    data = _data()
    data["production"]["job_name"] = job_name
    data["run_id"] = f"run\x1b]0;{job_name}\x07"
    try:
        text = ReplayManifest.parse(data, verify=False).sealed().to_json()
    except ValueError:  # a manifest model that refuses such names: write the forged file by hand
        text = json.dumps({**data, "digest": "sha256:" + "0" * 64})
    path = tmp_path / "manifest.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("flags", [[], ["--no-verify"], ["--json"]])
def test_show_never_prints_a_job_names_escape_sequences_raw(tmp_path: Path, flags: list[str]) -> None:
    proc = cli("show", _manifest_file(tmp_path, FORGED), *flags)
    out = proc.stdout + proc.stderr
    assert not any(c in out for c in "\x1b\x07\r\u202e"), out
    assert "\nINFO gate PASSED" not in out  # no forged line of its own
    assert "Traceback" not in out


def test_validate_escapes_too(tmp_path: Path) -> None:
    proc = cli("validate", _manifest_file(tmp_path, FORGED))
    assert not any(c in proc.stdout + proc.stderr for c in "\x1b\x07\r\u202e")


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("folder", "is a folder, not a file"),
        ("/dev/zero", "not a regular file"),
        ("/dev/null", "not a regular file"),
        ("latin1", "not UTF-8"),
        ("nope://bucket/m.json", "Protocol not known: nope"),
        ("file://somehost/tmp/m.json", "with a host"),
        ("missing", "no such file"),
    ],
)
@pytest.mark.parametrize("action", ["validate", "show"])
def test_a_path_that_is_not_a_manifest_file_is_one_problem_line(
    tmp_path: Path, where: str, message: str, action: str
) -> None:
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(b'{"run_id": "caf\xe9"}')
    path = {"folder": str(tmp_path), "latin1": str(latin1), "missing": str(tmp_path / "m.json")}.get(where, where)
    started = time.monotonic()
    proc = cli(action, path)
    assert time.monotonic() - started < 30
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert message in last and "Fix:" in last and "Traceback" not in proc.stderr

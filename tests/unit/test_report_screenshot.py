"""The HTML report looked at in headless Chromium: rendered to PNG from a file (no network), the verdict
and the worst field visible in the first screen. Nothing generated is kept (pytest's tmp_path)."""

from __future__ import annotations

import re
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from airflow_flink_replay.core.compare import compare_runs, write_reports
from airflow_flink_replay.core.compare.synthetic import make_audit, make_run, write_jsonl

CHROMIUM = Path("/usr/bin/chromium")
WIDTH, HEIGHT = 1280, 1000

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (make system-deps installs it)"
    ),
]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with everything that could reach the network switched off."""
    profile = tmp_path / "chromium-profile"
    return subprocess.run(
        [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--hide-scrollbars", *args,
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )


def read_png_rows(path: Path, max_rows: int) -> tuple[int, int, list[bytes], int]:
    """Minimal PNG reader (8-bit RGB/RGBA, non-interlaced): (width, height, first rows, bytes per pixel)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    height = bpp = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompressobj().decompress(idat, (width * bpp + 1) * max_rows)
    rows: list[bytes] = []
    prev = bytearray(width * bpp)
    stride = width * bpp + 1
    for y in range(min(max_rows, height)):
        ftype, line = raw[y * stride], bytearray(raw[y * stride + 1 : (y + 1) * stride])
        for x in range(len(line)):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 255
            elif ftype == 2:
                line[x] = (line[x] + b) & 255
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


def count_colour(rows: list[bytes], bpp: int, rgb: tuple[int, int, int], tol: int = 6) -> int:
    n = 0
    for row in rows:
        for i in range(0, len(row), bpp):
            if abs(row[i] - rgb[0]) <= tol and abs(row[i + 1] - rgb[1]) <= tol and abs(row[i + 2] - rgb[2]) <= tol:
                n += 1
    return n


@pytest.fixture
def fail_report(tmp_path: Path) -> Path:
    """A FAIL like the demo's v2: the label changes for a subset and a tool is called for more keys."""
    outs_a = make_run(500, "baseline", 1, paraphrase=0.25)
    a = write_jsonl(tmp_path / "a.jsonl", outs_a)
    a2 = write_jsonl(tmp_path / "a2.jsonl", make_run(500, "baseline_2", 2, paraphrase=0.25))
    b = write_jsonl(tmp_path / "b.jsonl", make_run(500, "candidate", 3, paraphrase=0.25, label_change=0.12))
    audits = {
        "baseline": write_jsonl(tmp_path / "aa.jsonl", make_audit(outs_a, "baseline")),
        "candidate": write_jsonl(tmp_path / "ab.jsonl", make_audit(outs_a, "candidate", extra_tool_keys=0.1)),
    }
    result = compare_runs(a, b, a2, key="$.id", audits=audits)
    assert result.verdict == "FAIL" and result.worst_field is not None
    assert result.worst_field.path == "$.label"
    return write_reports(result, tmp_path / "report")["html"]


def test_report_renders_with_verdict_and_worst_field_visible(fail_report: Path, tmp_path: Path) -> None:
    html = fail_report.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "the report must not load anything remote"

    png = tmp_path / "report.png"
    shot = chromium(tmp_path, f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}", fail_report.as_uri())
    assert png.is_file(), shot.stderr[-2000:]
    assert png.stat().st_size > 30_000  # a rendered page, not a blank one

    width, height, rows, bpp = read_png_rows(png, max_rows=260)
    assert (width, height) == (WIDTH, HEIGHT)
    # the FAIL banner fills the first screen: its pale red background and the red verdict text are there
    assert count_colour(rows, bpp, (0xFF, 0xEB, 0xE9)) > 50_000
    assert count_colour(rows, bpp, (0xCF, 0x22, 0x2E), tol=20) > 500
    # and no green PASS colours in that banner
    assert count_colour(rows, bpp, (0xDA, 0xFB, 0xE1)) == 0

    dom = chromium(tmp_path, "--dump-dom", fail_report.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    banner = re.search(r'<section class="banner FAIL" id="verdict">(.*?)</section>', dom.stdout, re.S)
    assert banner, "verdict banner missing from the rendered DOM"
    assert '<div class="verdict">FAIL</div>' in banner.group(1)
    assert '<code id="worst-field">$.label</code>' in banner.group(1)
    first_row = re.search(r'<table id="fields">.*?<tbody>\s*<tr[^>]*>\s*<td><code>([^<]+)</code>', dom.stdout, re.S)
    assert first_row and first_row.group(1) == "$.label"
    assert "candidate now calls tool notify_support for" in dom.stdout

"""The HTML report looked at in headless Chromium (driven over CDP by tests/browser.py): opened from a file
(no network), rendered to PNG, and the verdict and the worst field asserted visible inside the first
viewport by their bounding boxes, the PNG showing the verdict's colour where the DOM says the verdict is.
Nothing generated is kept (pytest's tmp_path)."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare import compare_runs, write_reports
from airflow_flink_replay.core.compare.synthetic import make_audit, make_run, write_jsonl
from tests.browser import CHROMIUM, Browser, BrowserError

WIDTH, HEIGHT = 1280, 1000

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True, scope="module")
def _chromium_installed() -> None:
    """A missing browser fails these tests (never a silent skip): CI must not go green without them."""
    if not CHROMIUM.exists():
        pytest.fail(f"Debian's chromium is missing at {CHROMIUM}: run `make system-deps` (as root it installs "
                    "it; otherwise `sudo apt-get install chromium`)", pytrace=False)

#: Elements that must be visible in the first screen: the verdict word and the worst field's name.
TARGETS = {"verdict": "#verdict .verdict", "worst": "#worst-field"}

_BOXES_JS = """JSON.stringify(Object.fromEntries(Object.entries(%s).map(([name, sel]) => {
  const el = document.querySelector(sel);
  if (!el) return [name, null];
  const r = el.getBoundingClientRect();
  const s = getComputedStyle(el);
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return [name, {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width,
                 height: r.height, text: el.innerText, visibility: s.visibility, display: s.display,
                 opacity: parseFloat(s.opacity), color: s.color, onTop: !!hit && (hit === el || el.contains(hit)),
                 viewport: [innerWidth, innerHeight], scroll: [scrollX, scrollY]}];
})))"""


class ReportBrowser(Browser):
    """tests/browser.py's Browser plus a JavaScript evaluation returning a JSON value."""

    def evaluate_json(self, expression: str) -> Any:
        """Evaluate ``expression`` (which must produce a JSON string) in the page and return it decoded."""
        import json

        result = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"evaluating failed: {result['exceptionDetails']}")
        return json.loads(result["result"]["value"])


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


def in_first_viewport(box: dict[str, Any]) -> bool:
    return 0 <= box["left"] < box["right"] <= WIDTH and 0 <= box["top"] < box["bottom"] <= HEIGHT


def test_report_renders_with_verdict_and_worst_field_visible(fail_report: Path, tmp_path: Path) -> None:
    html = fail_report.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "the report must not load anything remote"

    with ReportBrowser(tmp_path / "chromium", width=WIDTH, height=HEIGHT) as browser:
        browser.goto(fail_report.as_uri())
        dom = browser.wait_for(
            lambda d: d.ready == "complete" and d.contains('id="verdict"', 'id="worst-field"'),
            timeout=60,
            what="the report with its verdict banner",
        )
        boxes = browser.evaluate_json(_BOXES_JS % json_dumps(TARGETS))
        png = browser.screenshot(tmp_path / "report.png")

    # --- the verdict and the worst field: in the DOM, visible, on top, and inside the first viewport
    for name, box in boxes.items():
        assert box is not None, f"{TARGETS[name]} missing from the rendered report"
        assert box["viewport"] == [WIDTH, HEIGHT] and box["scroll"] == [0, 0]
        assert box["width"] > 0 and box["height"] > 0, (name, box)
        assert box["display"] != "none" and box["visibility"] == "visible" and box["opacity"] > 0, (name, box)
        assert in_first_viewport(box), (name, box)
        assert box["onTop"], f"{name} is covered by another element at its centre"
    assert boxes["verdict"]["text"] == "FAIL"
    assert boxes["verdict"]["color"] == "rgb(207, 34, 46)"  # the FAIL red
    assert boxes["worst"]["text"] == "$.label"
    assert boxes["verdict"]["height"] >= 30  # the big headline type, not a footnote
    banner = re.search(r'<section class="banner FAIL" id="verdict">(.*?)</section>', dom.html, re.S)
    assert banner, "verdict banner missing from the rendered DOM"
    assert '<code id="worst-field">$.label</code>' in banner.group(1)
    first_row = re.search(r'<table id="fields">.*?<tbody>\s*<tr[^>]*>\s*<td><code>([^<]+)</code>', dom.html, re.S)
    assert first_row and first_row.group(1) == "$.label"
    assert "candidate now calls tool notify_support for" in dom.text

    # --- the PNG: a rendered page of the viewport's size whose first screen is the FAIL banner
    assert png.stat().st_size > 30_000  # a rendered page, not a blank one
    width, height, rows, bpp = read_png_rows(png, max_rows=260)
    assert (width, height) == (WIDTH, HEIGHT)
    assert count_colour(rows, bpp, (0xFF, 0xEB, 0xE9)) > 50_000  # the banner's pale red background
    assert count_colour(rows, bpp, (0xCF, 0x22, 0x2E), tol=20) > 500  # the red verdict text
    assert count_colour(rows, bpp, (0xDA, 0xFB, 0xE1)) == 0  # and no green PASS colours
    # where the DOM puts the verdict and the worst field, the screenshot shows text in their colours
    for name, min_pixels in (("verdict", 100), ("worst", 20)):
        box = boxes[name]
        ink = tuple(int(c) for c in re.findall(r"\d+", box["color"])[:3])
        assert count_colour(crop(rows, bpp, box), bpp, ink, tol=40) > min_pixels, (name, box)


def crop(rows: list[bytes], bpp: int, box: dict[str, Any]) -> list[bytes]:
    """The pixels of ``rows`` inside ``box`` (CSS pixels = device pixels here: deviceScaleFactor 1)."""
    top, bottom = int(box["top"]), int(box["bottom"]) + 1
    left, right = int(box["left"]), int(box["right"]) + 1
    assert bottom <= len(rows), f"box {box} lies below the {len(rows)} rows read"
    return [row[left * bpp : right * bpp] for row in rows[top:bottom]]


def json_dumps(value: Any) -> str:
    import json

    return json.dumps(value)

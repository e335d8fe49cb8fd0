"""The pages as HTML: the report's style, inline SVG charts, links under the API server's path, everything a record
says escaped, no script and nothing loaded from elsewhere."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

from airflow_flink_replay.core.run_record import RunRecord, VariantRecord
from airflow_flink_replay.ui import pages
from airflow_flink_replay.ui.replays import field_rows, productions, run_row
from airflow_flink_replay.ui.views import CompareSide, CompareView, ReplaysView, Skipped

T0 = datetime(2026, 3, 1, tzinfo=UTC)
EVIL = '<script>alert("x")</script>'


def _row(run_id: str, days: int, **values: object) -> object:
    return run_row(RunRecord(spec_name="reviews", dag_id="gate", run_id=run_id, created_at=T0 + timedelta(days=days),
                             variants=[VariantRecord(variant="candidate", agent_factory="a.v2:job", duration_s=3.0)],
                             **values))  # type: ignore[arg-type]  # fmt: skip


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def _self_contained(html: str) -> None:
    tags = _tags(html)
    assert not [t for t, _ in tags if t in ("script", "link", "img", "iframe", "object")]
    assert not [a for _, a in tags for k, v in a.items() if k.startswith("on") or (v or "").startswith("javascript:")]
    urls = [v for _, a in tags for k, v in a.items() if k in ("href", "src", "action") and v]
    assert all(u.startswith("/") for u in urls), urls  # this server only
    assert "report.css" not in html and "--pass: #1a7f37" in html  # the report's style, included


def test_the_replays_page() -> None:
    rows = [
        _row("scheduled__1", 0, verdict="PASS", downtime_s=4.0, fidelity=0.9, noise={"$.label": 0.04}),
        _row("manual__2+00:00", 1, verdict="FAIL", downtime_s=5.0, fidelity=0.8,
             reasons=[{"code": "FIELD_REGRESSION", "severity": "fail", "message": f"$.label {EVIL}"}]),
    ]  # fmt: skip
    view = ReplaysView(productions(rows), 2, Skipped(no_record=1, outside=2), ["/data/runs"], 200, False)
    html = pages.render_replays(view, root="/airflow", user=f"alice{EVIL}")
    _self_contained(html)
    assert EVIL not in html and "&lt;script&gt;" in html
    assert html.count("<svg") == 4 and "<polyline" in html
    assert '<span class="vd FAIL">FAIL</span>' in html and '<span class="vd PASS">PASS</span>' in html
    assert 'href="/airflow/flink-replay/runs/gate/manual__2%2B00%3A00/report.html"' in html
    assert 'href="/airflow/dags/gate/runs/manual__2%2B00%3A00"' in html
    assert 'action="/airflow/flink-replay/replays/compare"' in html
    assert "3 runs not shown" in html and "1 without a run record" in html and "2 with a run folder outside" in html
    # the form starts on the newest run (B) against the one before it (A)
    checked = re.findall(r'name="(a|b)" value="([^"]+)"[^>]*checked', html)
    assert checked == [("b", "gate/manual__2+00:00"), ("a", "gate/scheduled__1")]


def test_the_replays_page_without_locations_or_runs() -> None:
    html = pages.render_replays(ReplaysView([], 0, Skipped(), [], 200, True, ["gate"]), root="", user="alice")
    _self_contained(html)
    assert 'id="no-locations"' in html and 'id="empty"' in html and "<svg" not in html
    assert "(the newest 200 only)" in html and "of gate only" in html and 'href="/flink-replay/replays"' in html


def test_the_compare_page() -> None:
    a = CompareSide("gate/r1", "gate", "r1", row=_row("r1", 0, verdict="PASS"),
                    summary={"fields": [{"path": "$.x", "noise_rate": 0.1, "candidate_rate": 0.12, "status": "ok"}]})
    b = CompareSide("gate/r2", "gate", "r2", problem="no run record yet")  # fmt: skip
    html = pages.render_compare(CompareView(a, b, field_rows(a.summary, None)), root="", user="alice")
    _self_contained(html)
    assert 'id="side-a"' in html and "PASS" in html and "no run record yet" in html
    assert "<code>$.x</code>" in html and "12%" in html and "not in this comparison" in html
    assert 'href="/flink-replay/runs/gate/r1/summary.json"' in html

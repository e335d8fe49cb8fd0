"""The reports' content: report.html's word highlighting of the worst differences and its missing/extra
outputs table (read through a small DOM built with the standard library's HTML parser), and junit.xml's
side-effect test cases."""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.reports import render_html, render_junit
from airflow_flink_replay.core.compare.synthetic import make_audit, make_run, write_jsonl

VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "col"}


@dataclass
class Node:
    """An element of the parsed report: tag, attributes, children (elements and text)."""

    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def find_all(self, tag: str, cls: str | None = None, **attrs: str) -> list[Node]:
        """Descendant elements with this tag, carrying class ``cls`` and the given attributes."""
        out: list[Node] = []
        for c in self.children:
            if isinstance(c, Node):
                if (
                    c.tag == tag
                    and (cls is None or cls in c.classes)
                    and all(c.attrs.get(k) == v for k, v in attrs.items())
                ):
                    out.append(c)
                out.extend(c.find_all(tag, cls, **attrs))
        return out

    def find(self, tag: str, cls: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}> in the report"
        return found[0]

    def segments(self) -> list[tuple[str | None, str]]:
        """The cell's text in pieces: ('del' | 'ins' | None, text), adjacent plain text merged."""
        out: list[tuple[str | None, str]] = []
        for c in self.children:
            kind, text = (None, c) if isinstance(c, str) else (c.tag if c.tag in ("del", "ins") else None, c.text())
            if out and kind is None and out[-1][0] is None:
                out[-1] = (None, out[-1][1] + text)
            elif text:
                out.append((kind, text))
        return out


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>: the report is not well nested"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    assert builder.stack == [builder.root], "unclosed elements in the report"
    return builder.root


def cells(row: Node) -> list[Node]:
    return row.find_all("td")


def section(doc: Node, heading: str) -> list[Node]:
    """The elements after the <h2> starting with ``heading`` up to the next <h2>."""
    main = doc.find("main")
    kids = [c for c in main.children if isinstance(c, Node)]
    start = next(i for i, c in enumerate(kids) if c.tag == "h2" and c.text().startswith(heading))
    end = next((i for i in range(start + 1, len(kids)) if kids[i].tag == "h2"), len(kids))
    return kids[start + 1 : end]


# ------------------------------------------------------------------------------------------- highlighting


@pytest.fixture
def label_change(tmp_path: Path) -> Any:
    noise = {"paraphrase": 0.3}
    a = write_jsonl(tmp_path / "a.jsonl", make_run(300, "baseline", 1, **noise))
    a2 = write_jsonl(tmp_path / "a2.jsonl", make_run(300, "baseline_2", 2, **noise))
    b = write_jsonl(tmp_path / "b.jsonl", make_run(300, "candidate", 3, label_change=0.15, **noise))
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL" and result.worst_field is not None and result.worst_field.path == "$.label"
    return result


def test_worst_field_examples_come_first_with_the_changed_words_marked(label_change: Any) -> None:
    doc = parse(render_html(label_change))
    # the fields table marks the worst row
    first = doc.find("table", id="fields").find("tbody").find_all("tr")[0]
    assert "worst" in first.classes and first.find("code").text() == "$.label"

    examples = section(doc, "Examples")
    headings = [n.text() for n in examples if n.tag == "h3"]
    assert headings[0] == "$.label"  # the worst field's examples first, then the other differing fields
    assert headings == [f.path for f in label_change.fields if f.candidate_diffs][: len(headings)]
    first_example = next(n for n in examples if n.tag == "div" and "example" in n.classes)
    assert "baseline runs agree, candidate differs" in first_example.find("div", "head").text()
    header = [th.text() for th in first_example.find("thead").find_all("th")]
    assert header == ["field", "baseline (A)", "baseline-2 (A\u2032)", "candidate (B)"]

    rows = {cells(r)[0].text(): r for r in first_example.find("tbody").find_all("tr")}
    focus = rows["$.label"]
    assert focus.classes == {"diff", "focus"}  # the deciding field is outlined and marked as differing
    _, base, base2, cand = cells(focus)
    ex = label_change.examples[0]
    value = next(v for v in ex.values if v.path == "$.label")
    assert value.baseline != value.candidate
    assert base.segments() == [("del", value.baseline)]
    assert cand.segments() == [("ins", value.candidate)]
    assert base2.segments() == [(None, value.baseline)]  # A' agrees with A: nothing marked
    # fields that do not differ are not marked at all
    for path in ("$.id", "$.customer", "$.score"):
        assert rows[path].classes == set()
        assert all(kind is None for c in cells(rows[path]) for kind, _ in c.segments())


def test_text_differences_are_marked_word_by_word(label_change: Any) -> None:
    doc = parse(render_html(label_change))
    marked = 0
    for example, ex in zip(
        (n for n in section(doc, "Examples") if n.tag == "div" and "example" in n.classes),
        label_change.examples,
        strict=True,
    ):
        value = next(v for v in ex.values if v.path == "$.summary")
        row = next(r for r in example.find("tbody").find_all("tr") if cells(r)[0].text() == "$.summary")
        _, base, _, cand = cells(row)
        assert base.text() == value.baseline and cand.text() == value.candidate  # nothing lost or added
        if not value.candidate_differs:
            assert "diff" not in row.classes and cand.segments() == [(None, value.candidate)]
            continue
        marked += 1
        assert "diff" in row.classes
        kinds = {k for k, _ in cand.segments()}
        assert kinds == {None, "ins"}, cand.segments()  # partly marked: the shared words stay plain
        assert {k for k, _ in base.segments()} == {None, "del"}
        # the words both wordings share stay unmarked, the same on both sides
        shared = "".join(t for k, t in base.segments() if k is None)
        assert shared == "".join(t for k, t in cand.segments() if k is None)
        assert any(ch.isalnum() for ch in shared), shared  # at least one whole word in common
    assert marked > 0


def test_highlighted_values_are_escaped(tmp_path: Path) -> None:
    recs = [{"id": f"k-{i}", "note": f"order {i} shipped & paid"} for i in range(40)]
    a = write_jsonl(tmp_path / "a.jsonl", recs)
    evil = "order 0 shipped <script>alert(1)</script> & <b>paid</b>"
    b = write_jsonl(tmp_path / "b.jsonl", [{**recs[0], "note": evil}, *recs[1:]])
    result = compare_runs(a, b, key="$.id")
    html = render_html(result)
    doc = parse(html)
    assert not doc.find_all("script") and "<script>" not in html and "<b>paid" not in html
    example = doc.find("div", "example")
    row = next(r for r in example.find("tbody").find_all("tr") if cells(r)[0].text() == "$.note")
    cand = cells(row)[-1]
    assert cand.text() == evil
    assert cand.segments() == [
        (None, "order 0 shipped "),
        ("ins", "<script>alert(1)</script> "),
        (None, "& "),
        ("ins", "<b>"),
        (None, "paid"),
        ("ins", "</b>"),
    ]
    assert cells(row)[1].segments() == [(None, "order 0 shipped & paid")]  # nothing of A's was removed


# ------------------------------------------------------------------------------------------- missing / extra


def unmatched_case(tmp_path: Path, **cfg: Any) -> Any:
    recs = [{"id": f"r-{i}", "label": "same"} for i in range(60)]
    a = write_jsonl(tmp_path / "a.jsonl", recs)
    kept = [r for r in recs if r["id"] not in ("r-3", "r-7")]
    b = write_jsonl(tmp_path / "b.jsonl", [*kept, {"id": "r-5", "label": "again"}, {"id": "r-100", "label": "new"}])
    # no baseline-2: the exact rule fails them (2 of 60 against a baseline-2 losing none is not significant)
    return compare_runs(a, b, key="$.id", config=CompareConfig(**cfg))


def test_missing_and_extra_outputs_table(tmp_path: Path) -> None:
    result = unmatched_case(tmp_path)
    assert {r.code for r in result.reasons if r.severity == "fail"} == {"MISSING_OUTPUTS", "EXTRA_OUTPUTS"}
    doc = parse(render_html(result))
    table = doc.find("table", id="unmatched")
    rows = [[c.text() for c in cells(r)] for r in table.find("tbody").find_all("tr")]
    assert [r[:4] for r in rows] == [
        ["missing in candidate", "r-3", "1", "A:4"],
        ["missing in candidate", "r-7", "1", "A:8"],
        ["extra in candidate", "r-5", "2", "B:59"],
        ["extra in candidate", "r-100", "1", "B:60"],
    ]
    assert [json.loads(r[4]) for r in rows] == [
        {"id": "r-3", "label": "same"},
        {"id": "r-7", "label": "same"},
        {"id": "r-5", "label": "again"},
        {"id": "r-100", "label": "new"},
    ]
    missing_badge = table.find("tbody").find_all("tr")[0].find("span", "status")
    assert "st-regression" in missing_badge.classes
    # the count cards flag both
    cards = {c.find("div", "l").text(): c for c in doc.find("div", "cards").find_all("div", "card")}
    assert (
        cards["missing in candidate"].find("div", "n").text() == "2" and "bad" in cards["missing in candidate"].classes
    )
    assert cards["extra in candidate"].find("div", "n").text() == "2" and "bad" in cards["extra in candidate"].classes
    assert "Listing the first" not in table.text()


def test_missing_and_extra_table_is_capped_and_says_so(tmp_path: Path) -> None:
    doc = parse(render_html(unmatched_case(tmp_path, max_listed=1)))
    rows = doc.find("table", id="unmatched").find("tbody").find_all("tr")
    assert [cells(r)[1].text() for r in rows] == ["r-3", "r-5"]
    note = [n.text() for n in section(doc, "Missing and extra") if n.tag == "p"]
    assert any("Listing the first 1 of each" in t for t in note), note


def test_no_missing_or_extra_outputs_has_no_table(tmp_path: Path) -> None:
    recs = [{"id": f"r-{i}", "label": "same"} for i in range(30)]
    a = write_jsonl(tmp_path / "a.jsonl", recs)
    doc = parse(render_html(compare_runs(a, a, a, key="$.id")))
    assert not doc.find_all("table", id="unmatched")
    assert any("Every baseline output has a candidate output" in n.text() for n in section(doc, "Missing and extra"))


# ------------------------------------------------------------------------------------------- junit side effects


def junit_cases(result: Any) -> tuple[ET.Element, dict[str, ET.Element]]:
    suite = ET.fromstring(render_junit(result))
    side = {tc.get("name", ""): tc for tc in suite.iter("testcase") if tc.get("classname") == "compare.side_effects"}
    return suite, side


def outcome(tc: ET.Element) -> str:
    return "failure" if tc.find("failure") is not None else "skipped" if tc.find("skipped") is not None else "ok"


def test_junit_has_a_case_per_side_effect(tmp_path: Path) -> None:
    outs = make_run(400, "baseline", 1)
    outs_b = make_run(400, "candidate", 3, tool_change=0.05)
    a = write_jsonl(tmp_path / "a.jsonl", outs)
    b = write_jsonl(tmp_path / "b.jsonl", outs_b)
    audits = {
        "baseline": write_jsonl(tmp_path / "aa.jsonl", make_audit(outs, "baseline")),
        "baseline_2": write_jsonl(tmp_path / "aa2.jsonl", make_audit(outs, "baseline_2")),
        "candidate": write_jsonl(tmp_path / "ab.jsonl", make_audit(outs_b, "candidate", extra_tool_keys=0.1)),
    }
    result = compare_runs(a, b, a, key="$.id", audits=audits, ignore=["$.tools"])
    statuses = {s.signature: s.status for s in result.resources}
    assert statuses == {
        "tool:issue_refund.call": "new",
        "tool:notify_support.call": "regression",
        "chat_model:llm.chat": "ok",
    }
    suite, side = junit_cases(result)
    assert {name: outcome(tc) for name, tc in side.items()} == {
        "tool:issue_refund.call": "failure",
        "tool:notify_support.call": "failure",
        "chat_model:llm.chat": "ok",
    }
    notify = side["tool:notify_support.call"].find("failure")
    assert notify is not None and notify.get("message", "").startswith("regression: candidate ")
    new = side["tool:issue_refund.call"].find("failure")
    assert new is not None and "baseline 0 calls on 0 keys" in new.get("message", "")
    # the suite's totals count them
    all_cases = list(suite.iter("testcase"))
    assert suite.get("tests") == str(len(all_cases))
    assert suite.get("failures") == str(sum(outcome(tc) == "failure" for tc in all_cases))
    assert {tc.get("name") for tc in all_cases if outcome(tc) == "failure"} == {
        "verdict",
        "tool:issue_refund.call",
        "tool:notify_support.call",
    }


@pytest.mark.parametrize(("n", "x0", "x1", "status"), [(25, 0, 2, "not_significant"), (200, 120, 120, "too_noisy")])
def test_junit_skips_inconclusive_side_effects(tmp_path: Path, n: int, x0: int, x1: int, status: str) -> None:
    outs = [{"id": f"r-{i}", "tools": []} for i in range(n)]
    rng = random.Random(n)

    def doubled(variant: str, k: int) -> list[dict[str, Any]]:
        keys = {f"r-{i}" for i in rng.sample(range(n), k)}
        return [r for r in make_audit(outs, variant) for _ in range(2 if r["key"] in keys else 1)]

    a = write_jsonl(tmp_path / "a.jsonl", outs)
    audits = {
        "baseline": write_jsonl(tmp_path / "aa.jsonl", make_audit(outs, "baseline")),
        "baseline_2": write_jsonl(tmp_path / "aa2.jsonl", doubled("baseline_2", x0)),
        "candidate": write_jsonl(tmp_path / "ab.jsonl", doubled("candidate", x1)),
    }
    result = compare_runs(a, a, a, key="$.id", audits=audits)
    assert result.verdict == "INCONCLUSIVE" and result.resources[0].status == status
    suite, side = junit_cases(result)
    chat = side["chat_model:llm.chat"]
    assert outcome(chat) == "skipped"
    skipped = chat.find("skipped")
    assert skipped is not None and skipped.get("message", "").startswith(f"{status}: ")
    assert suite.get("failures") == "0" and int(suite.get("skipped", "0")) == 2  # the side effect and the verdict


def test_many_distinct_fields_are_capped_in_the_reports(tmp_path: Path) -> None:
    """50k distinct field names made a 57 MB report.html: list the worst max_fields_listed, count the rest."""
    from airflow_flink_replay.core.compare import CompareConfig, compare_runs, write_reports
    from airflow_flink_replay.core.compare.synthetic import write_jsonl

    n, k = 30, 2000

    def outs(change: bool) -> list[dict]:
        return [
            {"id": f"r-{i}", **{f"f{j}": (j if not (change and j < 3) else -j - 1) for j in range(k)}} for i in range(n)
        ]

    a = write_jsonl(tmp_path / "a.jsonl", outs(False))
    b = write_jsonl(tmp_path / "b.jsonl", outs(True))
    result = compare_runs(a, b, key="$.id", config=CompareConfig(max_fields_listed=100, min_aligned=5))
    assert len(result.fields) == 100
    assert result.fields_omitted == {"ok": k + 1 - 100}
    assert {f.path for f in result.fields[:3]} == {"$.f0", "$.f1", "$.f2"}  # the worst are listed
    written = write_reports(result, tmp_path / "out")
    html = Path(written["html"]).read_text()
    assert "1901 more fields not listed (1901 ok)" in html
    assert Path(written["html"]).stat().st_size < 300_000
    assert Path(written["summary"]).stat().st_size < 300_000


# ------------------------------------------------------------------------------------------- writing the files


def _small_fail(tmp_path: Path, value: str = "changed") -> Any:
    a = write_jsonl(tmp_path / "a.jsonl", [{"id": f"k{i}", "v": "same"} for i in range(40)])
    b = write_jsonl(tmp_path / "b.jsonl", [{"id": f"k{i}", "v": value if i < 20 else "same"} for i in range(40)])
    result = compare_runs(a, b, a, key="$.id")
    assert result.verdict == "FAIL"
    return result


def test_a_symlink_planted_in_the_report_folder_is_replaced_not_written_through(tmp_path: Path) -> None:
    from airflow_flink_replay.core.compare.reports import REPORT_FILES, write_reports

    out = tmp_path / "reports"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    for name in REPORT_FILES.values():
        (out / name).symlink_to(victim)
    written = write_reports(_small_fail(tmp_path), out)
    assert victim.read_text() == "keep me"
    for path in written.values():
        assert not path.is_symlink() and path.stat().st_size > 0
    assert json.loads(written["summary"].read_text())["verdict"] == "FAIL"
    assert sorted(p.name for p in out.iterdir()) == sorted(REPORT_FILES.values())  # no temporary file left


def test_a_lone_surrogate_in_a_differing_value_is_written_escaped(tmp_path: Path) -> None:
    from airflow_flink_replay.core.compare.reports import write_reports

    written = write_reports(_small_fail(tmp_path, "\ud800bad"), tmp_path / "reports")
    summary = json.loads(written["summary"].read_text(encoding="utf-8"))
    assert summary["verdict"] == "FAIL"
    assert "\ud800bad" in json.dumps(summary, ensure_ascii=False)  # JSON's own escape: read back as it was
    assert "\\ud800bad" in written["html"].read_text(encoding="utf-8")
    ET.parse(written["junit"])  # well-formed XML

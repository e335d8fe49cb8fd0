"""The three reports of a comparison: summary.json, a self-contained report.html, junit.xml."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jinja2

from airflow_flink_replay.core.compare.content_audits import describe_audit
from airflow_flink_replay.core.compare.highlight import highlight_pair
from airflow_flink_replay.core.compare.meaning import describe_meaning
from airflow_flink_replay.core.compare.result import ComparisonResult
from airflow_flink_replay.core.local_files import write_replacing

#: Process exit code of each verdict (the CLI contract; 3 is bad usage or unreadable input).
EXIT_CODES = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 2}

REPORT_FILES = {"summary": "summary.json", "html": "report.html", "junit": "junit.xml"}

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("airflow_flink_replay.core.compare", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


def _pct(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "—"
    return f"{value * 100:.{digits}f}%"


def _signed_pct(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 100:+.1f} pt"


_env.filters["pct"] = _pct
_env.filters["spct"] = _signed_pct
_env.globals["highlight_pair"] = highlight_pair


def headline(result: ComparisonResult) -> str:
    """One sentence: the verdict and what decided it."""
    decisive = [r for r in result.reasons if r.severity != "info"]
    if decisive:
        return decisive[0].message
    worst = result.worst_field
    if worst is None:
        return "no fields to compare"
    if result.mode == "exact":
        return f"all {len(result.fields)} fields equal under their comparators (exact rules)"
    volatile = sum(1 for f in result.fields if f.status == "volatile")
    judged = len(result.fields) - volatile
    left_out = f" ({volatile} volatile fields left out)" if volatile else ""
    if worst.candidate_rate == 0 or worst.status == "volatile":
        return f"all {judged} fields identical in baseline and candidate{left_out}"
    return (
        f"all {judged} fields within the noise{left_out}; {worst.path} differs most "
        f"({_pct(worst.candidate_rate)} vs noise {_pct(worst.noise_rate)})"
    )


def render_html(result: ComparisonResult) -> str:
    """The HTML report (one file, inline CSS, no scripts or external resources)."""
    template = _env.get_template("report.html.j2")
    by_field: dict[str, list[Any]] = {}
    for ex in result.examples:
        by_field.setdefault(ex.field, []).append(ex)
    return template.render(
        r=result,
        headline=headline(result),
        examples_by_field=by_field,
        worst=result.worst_field,
        config_json=result.config.model_dump_json(indent=2),
    )


#: Characters XML 1.0 does not allow (C0 controls but tab/newline/CR, surrogates, U+FFFE/U+FFFF), plus the
#: other C0/C1 controls that would reach a terminal printing the file.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` safe for an XML attribute or element: disallowed and control characters as ``\\xNN``."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def render_junit(result: ComparisonResult) -> str:
    """JUnit XML: one test case per field, side-effect signature and rule, plus the verdict."""
    suite = ET.Element("testsuite", name="flink-replay-compare")
    cases = 0
    failures = 0
    skipped = 0

    def case(classname: str, name: str, status: str, message: str = "") -> None:
        nonlocal cases, failures, skipped
        name, message = xml_text(name), xml_text(message)
        tc = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")
        cases += 1
        if status == "fail":
            failures += 1
            ET.SubElement(tc, "failure", message=message, type="regression").text = message
        elif status == "skip":
            skipped += 1
            ET.SubElement(tc, "skipped", message=message)

    verdict_status = {"PASS": "ok", "FAIL": "fail", "INCONCLUSIVE": "skip"}[result.verdict]
    decisive = "; ".join(f"{r.code}: {r.message}" for r in result.reasons if r.severity != "info")
    case("compare", "verdict", verdict_status, decisive)
    c = result.counts
    codes = {r.code: r for r in result.reasons}
    for code, name in (
        ("TOO_FEW_ALIGNED", "alignment"),
        ("MISSING_OUTPUTS", "missing outputs"),
        ("EXTRA_OUTPUTS", "extra outputs"),
    ):
        r = codes.get(code)
        case(
            "compare.outputs",
            name,
            "ok" if r is None else ("fail" if r.severity == "fail" else "skip"),
            r.message if r else "",
        )
    if result.fidelity is not None:
        low = codes.get("LOW_FIDELITY")
        said = low or codes.get("FIDELITY")
        case("compare.outputs", "fidelity", "skip" if low else "ok", said.message if said else "")
    for f in result.fields:
        rate = f"candidate {_pct(f.candidate_rate)} vs noise {_pct(f.noise_rate)} (n={f.candidate_n})"
        kinds = [k for k in f.kinds[:2] if k.candidate_diffs]
        rate += "".join(f"; {k.kind}: {k.candidate_diffs} vs A/A {k.noise_diffs}" for k in kinds)
        status = {"regression": "fail", "changed": "fail", "not_significant": "skip", "too_noisy": "skip"}.get(
            f.status, "ok"
        )
        case("compare.fields", f.path, status, f"{f.status}: {rate}")
    for s in result.resources:
        status = {
            "new": "fail",
            "regression": "fail",
            "rule": "fail",
            "not_significant": "skip",
            "too_noisy": "skip",
        }.get(s.status, "ok")
        case(
            "compare.side_effects",
            f"{s.stage}:{s.signature}" if s.stage else s.signature,
            status,
            f"{s.status}: candidate {s.candidate_calls} calls on {s.candidate_keys} keys "
            f"(new keys {s.new_keys}, other arguments on {s.arguments_changed_keys}, other free text on "
            f"{s.free_text_changed_keys}, other decision/outcome on {s.outcome_changed_keys}), baseline "
            f"{s.baseline_calls} calls on {s.baseline_keys} keys",
        )
    for a in result.content_audits:
        case("compare.content", f"{a.audit} {a.field}", "fail" if a.status == "fail" else "ok", describe_audit(a))
    for m in (m for m in result.meaning if m.candidate_outputs):
        case("compare.meaning", f"{m.field} {m.signature}", "fail" if m.status == "fail" else "ok", describe_meaning(m))
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    suite.set("errors", "0")
    suite.set("time", f"{result.duration_s:.3f}")
    props = ET.Element("properties")
    for k, v in (("verdict", result.verdict), ("mode", result.mode), ("aligned", str(c.aligned_candidate))):
        ET.SubElement(props, "property", name=k, value=v)
    suite.insert(0, props)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def write_reports(result: ComparisonResult, out_dir: Any) -> dict[str, Any]:
    """Write summary.json, report.html and junit.xml into ``out_dir``.

    ``out_dir`` is a local path (str or PathLike) or any path object with ``/``, ``mkdir`` and
    ``write_text`` (e.g. Airflow's ObjectStoragePath for s3://...). Returns
    ``{"summary": path, "html": path, "junit": path}``. A local file is written beside its name and renamed
    over it (:mod:`~airflow_flink_replay.core.local_files`): a symlink planted at the name is replaced, never
    written through. A character UTF-8 cannot hold (a lone surrogate in a compared value) is written as its
    ``\\uXXXX`` escape.
    """
    out = Path(out_dir) if isinstance(out_dir, str | os.PathLike) and not _is_object_path(out_dir) else out_dir
    out.mkdir(parents=True, exist_ok=True)
    contents = {
        "summary": summary_json(result),
        "html": render_html(result),
        "junit": render_junit(result),
    }
    written: dict[str, Any] = {}
    for name, text in contents.items():
        target = out / REPORT_FILES[name]
        if isinstance(target, Path):
            write_replacing(target, text, errors="backslashreplace")
        else:
            target.write_text(text.encode("utf-8", "backslashreplace").decode("utf-8"), encoding="utf-8")
        written[name] = target
    return written


def summary_json(result: ComparisonResult) -> str:
    """summary.json's text; a lone surrogate in a value (which pydantic cannot encode) is kept as is, for the
    writer to escape (in a JSON string, ``\\ud800`` reads back as the same character)."""
    try:
        return result.model_dump_json(indent=2)
    except ValueError:  # pydantic's PydanticSerializationError: "surrogates not allowed"
        return json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False)


def _is_object_path(value: Any) -> bool:
    return not isinstance(value, str | Path) and hasattr(value, "write_text")

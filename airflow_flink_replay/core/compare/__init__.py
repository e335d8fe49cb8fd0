"""Noise-calibrated comparison of replay outputs (baseline A, baseline-2 A', candidate B) and the gate.

Pure Python (pydantic, deepdiff, rapidfuzz, jsonpath-ng, jinja2); no Airflow, no pyflink. Entry points:

- :func:`compare_runs` -> :class:`ComparisonResult` (verdict PASS / FAIL / INCONCLUSIVE, reasons, rates)
- :func:`write_reports` -> ``{"summary": .../summary.json, "html": .../report.html, "junit": .../junit.xml}``
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from airflow_flink_replay.exceptions import CompareInputError

if TYPE_CHECKING:
    from airflow_flink_replay.core.compare.config import AuditRule, CompareConfig, FieldRule
    from airflow_flink_replay.core.compare.engine import AuditSources, compare_runs, describe_method
    from airflow_flink_replay.core.compare.loading import AuditRecord
    from airflow_flink_replay.core.compare.reports import EXIT_CODES, render_html, render_junit, write_reports
    from airflow_flink_replay.core.compare.result import (
        CallChange,
        ComparisonResult,
        Counts,
        Example,
        FieldStat,
        Reason,
        ResourceStat,
        Verdict,
    )

#: Where each public name lives. Imported on first use: the DAG files import the spec (and with it
#: ``compare.config``) in every Airflow task process, which then need neither the engine nor jinja2.
_SUBMODULE = {
    **dict.fromkeys(("AuditRule", "CompareConfig", "FieldRule"), "config"),
    **dict.fromkeys(("AuditSources", "compare_runs", "describe_method"), "engine"),
    "AuditRecord": "loading",
    **dict.fromkeys(("EXIT_CODES", "render_html", "render_junit", "write_reports"), "reports"),
    **dict.fromkeys(
        ("CallChange", "ComparisonResult", "Counts", "Example", "FieldStat", "Reason", "ResourceStat", "Verdict"),
        "result",
    ),
}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULE:
        value = getattr(import_module(f"{__name__}.{_SUBMODULE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EXIT_CODES",
    "AuditRecord",
    "AuditRule",
    "AuditSources",
    "CallChange",
    "CompareConfig",
    "CompareInputError",
    "ComparisonResult",
    "Counts",
    "Example",
    "FieldRule",
    "FieldStat",
    "Reason",
    "ResourceStat",
    "Verdict",
    "compare_runs",
    "describe_method",
    "render_html",
    "render_junit",
    "write_reports",
]

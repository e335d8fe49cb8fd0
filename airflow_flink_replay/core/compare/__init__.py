"""Noise-calibrated comparison of replay outputs (baseline A, baseline-2 A', candidate B) and the gate.

Pure Python (pydantic, deepdiff, rapidfuzz, jsonpath-ng, jinja2); no Airflow, no pyflink. Entry points:

- :func:`compare_runs` -> :class:`ComparisonResult` (verdict PASS / FAIL / INCONCLUSIVE, reasons, rates)
- :func:`write_reports` -> ``{"summary": .../summary.json, "html": .../report.html, "junit": .../junit.xml}``
"""

from __future__ import annotations

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
from airflow_flink_replay.exceptions import CompareInputError

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

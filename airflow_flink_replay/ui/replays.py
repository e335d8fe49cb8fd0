"""What the Replays pages show, built from run records and comparison summaries: one row per run, the runs
grouped by production (the run record's ``spec_name``) with charts over time, and two runs' fields side by side.

Pure (no Airflow, no I/O): :mod:`.app` reads the files and passes them in, :mod:`.pages` renders the result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_flink_replay.core.run_record import RunRecord
from airflow_flink_replay.ui.charts import Chart, line_chart

#: How much of a reason's message a row shows (its first line, cut here).
REASON_CHARS = 240
#: The noise chart draws this many fields at most (the noisiest across the runs).
NOISE_FIELDS = 6


@dataclass(frozen=True)
class ReasonLine:
    """A reason as a row shows it: its code, severity and the first line of its message."""

    code: str
    severity: str
    text: str


@dataclass(frozen=True)
class RunRow:
    """One replay run as the pages show it (from its run record, and the DAG run's state)."""

    dag_id: str
    run_id: str
    spec_name: str
    created_at: datetime
    state: str | None
    verdict: str | None
    reasons: tuple[ReasonLine, ...]
    candidate: str | None
    downtime_s: float | None
    replay_s: float | None
    fidelity: float | None
    fidelity_self: float | None
    noise: Mapping[str, float] = field(default_factory=dict)
    refusal: str | None = None

    @property
    def key(self) -> str:
        """``<dag_id>/<run_id>``: how the compare view names the run."""
        return f"{self.dag_id}/{self.run_id}"


def first_line(text: str, limit: int = REASON_CHARS) -> str:
    """The first line of ``text``, cut to ``limit`` characters (an ellipsis marks the cut)."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def run_row(record: RunRecord, state: str | None = None) -> RunRow:
    """The row of one run record. The candidate is the agent its ``candidate`` variant ran; the replay's
    duration is its longest variant's (the replays run side by side)."""
    durations = [v.duration_s for v in record.variants if v.duration_s is not None]
    candidate = next((v.agent_factory for v in record.variants if v.variant == "candidate"), None)
    reasons = tuple(
        ReasonLine(str(r.get("code", "")), str(r.get("severity", "")), first_line(str(r.get("message", ""))))
        for r in record.reasons
    )
    return RunRow(
        dag_id=record.dag_id,
        run_id=record.run_id,
        spec_name=record.spec_name,
        created_at=record.created_at,
        state=state,
        verdict=record.verdict,
        reasons=reasons,
        candidate=candidate,
        downtime_s=record.downtime_s,
        replay_s=max(durations) if durations else None,
        fidelity=record.fidelity,
        fidelity_self=record.fidelity_self,
        noise=dict(record.noise),
        refusal=first_line(record.refusal) if record.refusal else None,
    )


@dataclass(frozen=True)
class Production:
    """One production's runs, newest first, and its charts over time."""

    name: str
    runs: tuple[RunRow, ...]
    charts: tuple[Chart, ...]

    @property
    def verdicts(self) -> dict[str, int]:
        """How many runs ended with each verdict (``none`` for runs without one)."""
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.verdict or "none"] = counts.get(run.verdict or "none", 0) + 1
        return counts


def _series(runs: Sequence[RunRow], value: Any) -> list[tuple[datetime, float, str]]:
    """``(when, value, run id)`` of the runs where ``value(run)`` is a number."""
    return [(r.created_at, float(v), r.run_id) for r in runs if (v := value(r)) is not None]


def noisiest_fields(runs: Sequence[RunRow], limit: int = NOISE_FIELDS) -> list[str]:
    """The fields with the highest A/A noise in any of ``runs``, noisiest first."""
    peak: dict[str, float] = {}
    for run in runs:
        for path, rate in run.noise.items():
            peak[path] = max(peak.get(path, 0.0), rate)
    return sorted(peak, key=lambda p: (-peak[p], p))[:limit]


def production_charts(runs: Sequence[RunRow]) -> tuple[Chart, ...]:
    """A production's charts over time: production's downtime, the replay's duration, fidelity, and the A/A noise
    of its noisiest fields (a chart with no value in any run is left out)."""
    fields = noisiest_fields(runs)
    charts = (
        line_chart("Production downtime", {"downtime": _series(runs, lambda r: r.downtime_s)}, unit="s",
                   caption="from the stop to production running again"),
        line_chart("Replay duration", {"longest replay": _series(runs, lambda r: r.replay_s)}, unit="s",
                   caption="the longest variant's replay job (they run side by side)"),
        line_chart(
            "Fidelity",
            {"baseline = production": _series(runs, lambda r: r.fidelity),
             "baseline = baseline-2": _series(runs, lambda r: r.fidelity_self)},
            unit="%", y_max=1.0, caption="share of the baseline's outputs equal to production's own",
        ),
        line_chart(
            "A/A noise per field",
            {path: _series(runs, lambda r, p=path: r.noise.get(p)) for path in fields},
            unit="%", caption="how often the two baselines differed; a run draws the five fields it found noisiest",
        ),
    )  # fmt: skip
    return tuple(c for c in charts if c is not None)


def productions(rows: Iterable[RunRow]) -> list[Production]:
    """The runs grouped by production (``spec_name``, sorted), each production's runs newest first."""
    grouped: dict[str, list[RunRow]] = {}
    for row in rows:
        grouped.setdefault(row.spec_name, []).append(row)
    out = []
    for name in sorted(grouped):
        runs = sorted(grouped[name], key=lambda r: r.created_at, reverse=True)
        out.append(Production(name, tuple(runs), production_charts(runs)))
    return out


@dataclass(frozen=True)
class FieldSide:
    """One field in one run's comparison: its A/A noise rate, the candidate's rate and the verdict on it."""

    noise_rate: float | None
    candidate_rate: float | None
    status: str


@dataclass(frozen=True)
class FieldRow:
    """One field in both runs (None: the run's comparison has no such field)."""

    path: str
    a: FieldSide | None
    b: FieldSide | None


def _fields(summary: Mapping[str, Any] | None) -> dict[str, FieldSide]:
    found: dict[str, FieldSide] = {}
    for f in (summary or {}).get("fields") or []:
        if isinstance(f, dict) and isinstance(f.get("path"), str):
            found[f["path"]] = FieldSide(f.get("noise_rate"), f.get("candidate_rate"), str(f.get("status", "")))
    return found


def field_rows(summary_a: Mapping[str, Any] | None, summary_b: Mapping[str, Any] | None) -> list[FieldRow]:
    """Every field of either comparison (``summary.json``), in ``a``'s order (worst first) then ``b``'s others."""
    a, b = _fields(summary_a), _fields(summary_b)
    paths = list(a) + [p for p in b if p not in a]
    return [FieldRow(p, a.get(p), b.get(p)) for p in paths]

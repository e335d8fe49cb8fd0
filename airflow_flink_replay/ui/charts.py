"""Line charts over time as plain SVG geometry: the Replays page draws them server-side with jinja2 (no script, no
CDN, nothing the page's Content-Security-Policy would have to allow).

Pure: values in, coordinates and labels out. A chart's x axis is time (a run's place is when it was recorded), its y
axis starts at 0; rates (``unit="%"``) are fractions shown as percentages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

#: Line colours, in order (the report's blue, red, green, amber, then purple, orange, grey).
PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bc4c00", "#57606a")

Unit = Literal["s", "%"]


@dataclass(frozen=True)
class Point:
    """One run's value, placed: ``label`` is its tooltip (when, value, run id)."""

    x: float
    y: float
    label: str


@dataclass(frozen=True)
class Line:
    """One series: its name in the legend, colour, points in time order and their SVG ``points`` attribute."""

    name: str
    color: str
    points: tuple[Point, ...]

    @property
    def path(self) -> str:
        """The ``points`` attribute of the series' ``<polyline>``."""
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)


@dataclass(frozen=True)
class Tick:
    """An axis label at ``at`` (x or y, in SVG units)."""

    at: float
    label: str


@dataclass(frozen=True)
class Chart:
    """A chart ready to draw: its frame (``left``/``top``/``right``/``bottom`` of the plot area inside a
    ``width`` x ``height`` viewBox), lines and axis labels."""

    title: str
    caption: str
    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float
    lines: tuple[Line, ...]
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``value`` (``value`` > 0)."""
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value * (1 - 1e-9):
            return step * power
    return 10 * power  # pragma: no cover - the loop ends at 10


def format_value(value: float, unit: Unit) -> str:
    """``value`` as the chart shows it: seconds with up to three significant digits, rates as percentages."""
    if unit == "%":
        return f"{value * 100:.1f}".removesuffix(".0") + "%"
    return f"{value:.3g} s"


def _y_top(values: Sequence[float], unit: Unit, y_max: float | None) -> float:
    if y_max is not None:
        return y_max
    peak = max(values, default=0.0)
    if peak <= 0:
        return 0.1 if unit == "%" else 1.0
    return nice_ceiling(peak)


def line_chart(
    title: str,
    series: Mapping[str, Sequence[tuple[datetime, float, str]]],
    *,
    unit: Unit,
    caption: str = "",
    y_max: float | None = None,
    width: int = 520,
    height: int = 190,
) -> Chart | None:
    """A chart of ``series`` (name -> ``(when, value, run id)``; their order is the legend's), or None when no
    series has a point. ``y_max``: the y axis' top (default: a round number above the largest value)."""
    points = [(when, value) for values in series.values() for when, value, _ in values]
    if not points:
        return None
    left, top, right, bottom = 56.0, 12.0, width - 12.0, height - 28.0
    first, last = min(w for w, _ in points), max(w for w, _ in points)
    span = (last - first).total_seconds()
    y_top = _y_top([v for _, v in points], unit, y_max)

    def x_of(when: datetime) -> float:
        if span <= 0:
            return (left + right) / 2
        return left + (right - left) * (when - first).total_seconds() / span

    def y_of(value: float) -> float:
        return bottom - (bottom - top) * min(max(value, 0.0), y_top) / y_top

    lines = tuple(
        Line(
            name=name,
            color=PALETTE[i % len(PALETTE)],
            points=tuple(
                Point(x_of(w), y_of(v), f"{w:%Y-%m-%d %H:%M} · {format_value(v, unit)} · {run_id}")
                for w, v, run_id in sorted(values, key=lambda item: item[0])
            ),
        )
        for i, (name, values) in enumerate(series.items())
        if values
    )
    y_ticks = tuple(Tick(y_of(y_top * i / 4), format_value(y_top * i / 4, unit)) for i in range(5))
    # runs of one day: the ends by time (two ticks of the same date would say nothing)
    same_day = first.date() == last.date()
    x_ticks: tuple[Tick, ...] = (Tick(x_of(first), f"{first:%Y-%m-%d %H:%M}" if same_day else f"{first:%Y-%m-%d}"),)
    if span > 0:
        x_ticks += (Tick(x_of(last), f"{last:%H:%M}" if same_day else f"{last:%Y-%m-%d}"),)
    return Chart(title, caption, width, height, left, top, right, bottom, lines, y_ticks, x_ticks)

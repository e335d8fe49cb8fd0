"""Line charts as SVG geometry: time on x, 0 at the bottom of y, round axis tops, rates as percentages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_flink_replay.ui.charts import PALETTE, format_value, line_chart, nice_ceiling

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("value", "top"), [(0.7, 1), (1, 1), (1.2, 2), (2.2, 2.5), (3, 5), (7.5, 10), (42, 50)])
def test_nice_ceiling(value: float, top: float) -> None:
    assert nice_ceiling(value) == pytest.approx(top)


def test_format_value() -> None:
    assert format_value(0.07000000001, "%") == "7%"
    assert format_value(0.125, "%") == "12.5%"
    assert format_value(5.137, "s") == "5.14 s"
    assert format_value(31.42, "s") == "31.4 s"


def test_points_are_placed_by_time_and_value_inside_the_frame() -> None:
    series = {"downtime": [(T0 + timedelta(days=2), 4.0, "r2"), (T0, 2.0, "r0"), (T0 + timedelta(days=1), 8.0, "r1")]}
    chart = line_chart("Downtime", series, unit="s")
    assert chart is not None
    (line,) = chart.lines
    assert line.color == PALETTE[0]
    xs, ys = [p.x for p in line.points], [p.y for p in line.points]
    assert xs == sorted(xs) and xs[0] == chart.left and xs[-1] == chart.right  # time order, full width
    assert xs[1] == pytest.approx((chart.left + chart.right) / 2)
    assert chart.y_ticks[-1].label == "10 s" and chart.y_ticks[0].label == "0 s"  # 8 s -> a round top of 10
    assert ys[1] == pytest.approx(chart.bottom - (chart.bottom - chart.top) * 0.8)
    assert line.points[0].label == "2026-01-01 00:00 · 2 s · r0"
    assert line.path.count(",") == 3
    assert [t.label for t in chart.x_ticks] == ["2026-01-01", "2026-01-03"]


def test_rates_with_a_fixed_top_and_one_point_centred() -> None:
    chart = line_chart("Fidelity", {"f": [(T0, 0.93, "r")], "self": []}, unit="%", y_max=1.0)
    assert chart is not None and len(chart.lines) == 1  # a series without points draws nothing
    point = chart.lines[0].points[0]
    assert point.x == pytest.approx((chart.left + chart.right) / 2)
    assert [t.label for t in chart.y_ticks] == ["0%", "25%", "50%", "75%", "100%"]
    assert [t.label for t in chart.x_ticks] == ["2026-01-01 00:00"]


def test_runs_of_one_day_are_told_apart_by_their_time() -> None:
    series = {"d": [(T0 + timedelta(hours=4, minutes=28), 5.0, "r0"), (T0 + timedelta(hours=4, minutes=30), 4.0, "r1")]}
    chart = line_chart("Downtime", series, unit="s")
    assert chart is not None
    assert [t.label for t in chart.x_ticks] == ["2026-01-01 04:28", "04:30"]


def test_no_point_no_chart_and_zero_values_have_an_axis() -> None:
    assert line_chart("Empty", {"a": []}, unit="s") is None
    chart = line_chart("Zero", {"a": [(T0, 0.0, "r")]}, unit="%")
    assert chart is not None and chart.y_ticks[-1].label == "10%"

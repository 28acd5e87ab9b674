"""The dashboard's charts as SVG, drawn on the server: no script, so a page with charts reads
in any browser and under the pages' Content-Security-Policy (colours come from classes in
the stylesheet, never from inline styles).

A `Chart` is a few `Series` of (ms, value) points over one time range; `svg` draws it as a
line chart with its value axis (a few round ticks) and time axis (UTC), each series in its
own colour and dash, so they tell apart without colour too. A gap in a series (None) is a
gap in its line. The SVG has a title and a description saying each series' latest value,
which is what a screen reader says of it. `bars` draws counts at one moment (the forecast)
as horizontal bars, each labelled with its count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import Protocol

WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 10, 24
"""The plot's margins: the value axis' labels on the left, the time axis' below."""
SERIES_CLASSES = 5
"""Distinct series styles (``s0``..``s4`` in style.css); more series reuse them."""


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    points: Sequence[tuple[int, float | None]]
    """(Redis ms, value), oldest first; None: no value then (a gap)."""

    def latest(self) -> float | None:
        return next((v for _, v in reversed(self.points) if v is not None), None)


@dataclass(frozen=True, slots=True)
class Chart:
    key: str
    """A name for ids (``fired``)."""
    title: str
    unit: str
    """What the values count: ``jobs/s``, ``ms``, ``jobs``."""
    start_ms: int
    end_ms: int
    series: list[Series] = field(default_factory=list)
    problem: str = ""
    """Why some of it could not be read (shown under the chart)."""

    def empty(self) -> bool:
        return all(v is None for s in self.series for _, v in s.points)


class ChartSource(Protocol):
    """Where a page's charts come from: Prometheus, or the service's own samples."""

    since_ms: int | None
    """The oldest data it can have (None: no limit)."""

    async def charts(self, topic: str | None, start_ms: int, end_ms: int) -> list[Chart]:
        """The charts of `topic` (None: every topic) over the range."""
        ...


RANGES = {"15m": 900_000, "1h": 3_600_000, "6h": 21_600_000, "24h": 86_400_000}
"""The ranges a page offers, by how its query names them."""


def svg(chart: Chart, width: int = WIDTH, height: int = HEIGHT) -> str:
    """The chart as an inline ``<svg>`` element (escaped: labels may be users' names)."""
    plot_w, plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM
    values = [v for s in chart.series for _, v in s.points if v is not None]
    top = nice_ceiling(max(values, default=0.0))
    span = max(1, chart.end_ms - chart.start_ms)

    def x(ms: int) -> float:
        return LEFT + (ms - chart.start_ms) / span * plot_w

    def y(value: float) -> float:
        return TOP + plot_h - (value / top) * plot_h if top > 0 else TOP + plot_h

    title_id, desc_id = f"chart-{chart.key}-title", f"chart-{chart.key}-desc"
    out = [
        f'<svg class="chart" id="chart-{escape(chart.key)}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-labelledby="{title_id} {desc_id}">',
        f'<title id="{title_id}">{escape(chart.title)} ({escape(chart.unit)})</title>',
        f'<desc id="{desc_id}">{escape(describe(chart))}</desc>',
    ]
    for tick in ticks(top):
        ty = y(tick)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{width - RIGHT}" y1="{ty:.1f}" y2="{ty:.1f}"/>'
        )
        out.append(
            f'<text class="axis" x="{LEFT - 6}" y="{ty + 4:.1f}" text-anchor="end">'
            f"{escape(short(tick))}</text>"
        )
    for ms in time_ticks(chart.start_ms, chart.end_ms):
        tx = x(ms)
        out.append(
            f'<text class="axis" x="{tx:.1f}" y="{height - 6}" text-anchor="middle">'
            f"{clock(ms, chart.end_ms - chart.start_ms)}</text>"
        )
    for i, series in enumerate(chart.series):
        for run in runs(series.points):
            if len(run) == 1:
                ms, value = run[0]
                out.append(
                    f'<circle class="s{i % SERIES_CLASSES}" cx="{x(ms):.1f}" '
                    f'cy="{y(value):.1f}" r="2"/>'
                )
                continue
            path = " ".join(f"{x(ms):.1f},{y(v):.1f}" for ms, v in run)
            out.append(f'<polyline class="s{i % SERIES_CLASSES}" points="{path}"/>')
    out.append("</svg>")
    return "".join(out)


def runs(points: Sequence[tuple[int, float | None]]) -> list[list[tuple[int, float]]]:
    """The unbroken stretches of a series (a None ends one)."""
    out: list[list[tuple[int, float]]] = []
    current: list[tuple[int, float]] = []
    for ms, value in points:
        if value is None or not math.isfinite(value):
            if current:
                out.append(current)
            current = []
        else:
            current.append((ms, value))
    if current:
        out.append(current)
    return out


def nice_ceiling(value: float) -> float:
    """The round number (1, 2 or 5 times a power of ten) at or above `value` (0 stays 0)."""
    if value <= 0 or not math.isfinite(value):
        return 0.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)


def ticks(top: float) -> list[float]:
    """Value-axis ticks from 0 to `top`: 0, and four more evenly spaced (0 alone for 0)."""
    if top <= 0:
        return [0.0]
    return [top * i / 4 for i in range(5)]


def time_ticks(start_ms: int, end_ms: int) -> list[int]:
    """Five evenly spaced times across the range, ends included."""
    return [start_ms + (end_ms - start_ms) * i // 4 for i in range(5)]


def clock(ms: int, span_ms: int) -> str:
    """A time-axis label (UTC): HH:MM:SS over ten minutes or less, the day too over more
    than six hours, else HH:MM."""
    at = datetime.fromtimestamp(ms / 1000, UTC)
    if span_ms <= 600_000:
        return at.strftime("%H:%M:%S")
    return at.strftime("%d %H:%M" if span_ms > 6 * 3_600_000 else "%H:%M")


def short(value: float) -> str:
    """A value as an axis or a description says it: 1.5k, 250, 0.25."""
    magnitude = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def describe(chart: Chart) -> str:
    """What a screen reader says of the chart: each series' latest value."""
    if chart.empty():
        return "no data in this range"
    parts = []
    for s in chart.series:
        latest = s.latest()
        parts.append(f"{s.label} {'none' if latest is None else short(latest)}")
    return "latest: " + ", ".join(parts)


BAR_HEIGHT, BAR_GAP, LABEL_WIDTH, COUNT_WIDTH = 18, 8, 110, 80
"""A bar's thickness and the space between bars; the labels' column; the counts' column."""


def bars(key: str, title: str, rows: Sequence[tuple[str, int]], width: int = WIDTH) -> str:
    """`rows` (label, count) as horizontal bars on one scale from 0, each count written at
    its bar's end (with id ``bars-KEY-i``), as an inline ``<svg>`` whose title and
    description say every count (escaped: a label may be a user's name)."""
    plot_w = width - LABEL_WIDTH - COUNT_WIDTH - RIGHT
    top = nice_ceiling(max((n for _, n in rows), default=0))
    height = TOP * 2 + len(rows) * (BAR_HEIGHT + BAR_GAP) - BAR_GAP
    title_id, desc_id = f"bars-{key}-title", f"bars-{key}-desc"
    said = ", ".join(f"{label}: {n:,}" for label, n in rows)
    out = [
        f'<svg class="chart bars" id="bars-{escape(key)}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-labelledby="{title_id} {desc_id}">',
        f'<title id="{title_id}">{escape(title)}</title>',
        f'<desc id="{desc_id}">{escape(said)}</desc>',
    ]
    for i, (label, n) in enumerate(rows):
        y = TOP + i * (BAR_HEIGHT + BAR_GAP)
        length = plot_w * n / top if top > 0 else 0.0
        middle = y + BAR_HEIGHT / 2 + 4
        out.append(
            f'<text class="axis" x="{LABEL_WIDTH - 8}" y="{middle:.1f}" text-anchor="end">'
            f"{escape(label)}</text>"
        )
        out.append(
            f'<rect class="s0" x="{LABEL_WIDTH}" y="{y}" width="{length:.1f}" '
            f'height="{BAR_HEIGHT}"/>'
        )
        out.append(
            f'<text class="count" id="bars-{escape(key)}-{i}" x="{LABEL_WIDTH + length + 6:.1f}" '
            f'y="{middle:.1f}">{n:,}</text>'
        )
    out.append("</svg>")
    return "".join(out)

"""One series as an inline SVG plot: the median over labels, its interval band, steps marked.

Everything from the data (labels, names, numbers) is escaped; the SVG needs nothing outside
the page (no fonts, scripts or images of its own).
"""

from __future__ import annotations

from html import escape
from typing import List, Sequence

from param_compute.formatting import format_ms
from param_compute.history.series import Series
from param_compute.history.steps import Step

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 14, 64
#: Most labels written under the axis (every step's label is written too).
MAX_AXIS_LABELS = 16


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def _axis_indices(count: int, steps: Sequence[Step]) -> List[int]:
    every = max(1, -(-count // MAX_AXIS_LABELS))
    chosen = set(range(0, count, every)) | {count - 1} | {s.index for s in steps}
    return sorted(i for i in chosen if 0 <= i < count)


def series_svg(series: Series, steps: Sequence[Step]) -> str:
    """The plot of one series (see the module docstring)."""
    points = series.points
    count = len(points)
    low = min(p.lower for p in points)
    high = max(p.upper for p in points)
    if high <= low:
        high, low = high * 1.05 + 1e-12, low * 0.95
    pad = (high - low) * 0.08
    low, high = max(low - pad, 0.0), high + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(i: int) -> float:
        return LEFT + (plot_w * (i + 0.5) / count)

    def y(value: float) -> float:
        return TOP + plot_h * (1 - (value - low) / (high - low))

    out = [f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} '
           f'{HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
           f'aria-label="{escape(series.name)}">',
           f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>']
    for value in (low, (low + high) / 2, high):
        out.append(f'<text x="{LEFT - 6}" y="{_fmt(y(value) + 4)}" class="tick" '
                   f'text-anchor="end">{escape(format_ms(value))}</text>')
    if any(p.low is not None or p.high is not None for p in points):
        edge = [f"{_fmt(x(i))},{_fmt(y(p.upper))}" for i, p in enumerate(points)]
        edge += [f"{_fmt(x(i))},{_fmt(y(p.lower))}" for i, p in reversed(list(enumerate(points)))]
        out.append(f'<polygon class="band" points="{" ".join(edge)}"/>')
    for step in steps:
        at = (x(step.index - 1) + x(step.index)) / 2
        kind = "regression" if step.regression else "improvement"
        out.append(f'<line class="step {kind}" x1="{_fmt(at)}" x2="{_fmt(at)}" y1="{TOP}" '
                   f'y2="{TOP + plot_h}"/>')
        out.append(f'<text class="steptext {kind}" x="{_fmt(at + 3)}" y="{TOP + 12}">'
                   f'{"+" if step.change >= 0 else ""}{100 * step.change:.1f}%</text>')
    line = " ".join(f"{_fmt(x(i))},{_fmt(y(p.median))}" for i, p in enumerate(points))
    out.append(f'<polyline class="median" points="{line}"/>')
    for i, p in enumerate(points):
        interval = (f" [{format_ms(p.lower)} – {format_ms(p.upper)}]"
                    if p.low is not None or p.high is not None else "")
        out.append(f'<circle class="point" cx="{_fmt(x(i))}" cy="{_fmt(y(p.median))}" r="2.5">'
                   f'<title>{escape(p.label)}: {escape(format_ms(p.median))}'
                   f'{escape(interval)}</title></circle>')
    for i in _axis_indices(count, steps):
        text = points[i].label if len(points[i].label) <= 14 else points[i].label[:13] + "…"
        out.append(f'<text class="label" transform="translate({_fmt(x(i))},'
                   f'{TOP + plot_h + 10}) rotate(40)">{escape(text)}</text>')
    out.append("</svg>")
    return "".join(out)

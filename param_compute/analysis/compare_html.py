"""``compare BASE NEW --html OUT.html``: the comparison as one self-contained HTML page.

The page says which files were compared and how (settings that differ, the significance
level), then the verdict counts and the geometric mean speedup overall and per operator, then a
row per compared pass: its config label, both medians, and the speedup drawn as a bar from 1×
(right: NEW faster, left: slower; a log scale shared by all rows, wide enough for the largest
change from ``SCALES`` and clipped at the last) with the interval as a whisker, coloured by the verdict (green faster, red slower, grey same: not significant). Passes
that failed the gate and pairs not compared follow. Significant changes come first, the largest
first. Every value from the files is HTML-escaped (:mod:`param_compute.analysis.html_page`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

from param_compute.formatting import format_ms
from param_compute.plan.runkey import key_of
from param_compute.analysis.comparison import CompareReport, Row
from param_compute.analysis.html_page import definitions, e, page

#: The bars' scale ends at 1/S and S, for the first S that holds every speedup and interval
#: (a speedup beyond the last is drawn at the end).
SCALES = (1.05, 1.1, 1.25, 1.5, 2.0, 4.0)
WIDTH, HEIGHT = 240, 16
COLOURS = {"faster": "#2e7d32", "slower": "#c62828", "same": "#9e9e9e"}


def scale(rows: List[Row]) -> float:
    """The first of ``SCALES`` that holds every row's speedup and interval."""
    largest = 1.0
    for row in rows:
        values = [row.result.speedup]
        if row.result.ratio_interval is not None:
            values += list(row.result.ratio_interval)
        for value in values:
            if value is not None and 0 < value < math.inf:
                largest = max(largest, value, 1 / value)
    return next((s for s in SCALES if largest <= s), SCALES[-1])


def speedup_bar(row: Row, limit: float = SCALES[-1]) -> str:
    """Inline SVG: the speedup as a bar from 1×, its interval as a whisker (scale 1/limit ..
    limit)."""
    def _x(speedup: float) -> float:
        clipped = min(max(speedup, 1 / limit), limit)
        return WIDTH / 2 * (1 + math.log(clipped) / math.log(limit))

    result = row.result
    colour = COLOURS.get(result.verdict, "#9e9e9e")
    middle = WIDTH / 2
    out = [f'<svg width="{WIDTH}" height="{HEIGHT}" '
           f'role="img" aria-label="speedup {e(_times(result.speedup))}">'
           f'<line x1="{middle}" y1="0" x2="{middle}" y2="{HEIGHT}" stroke="#555"/>']
    if result.speedup is not None and 0 < result.speedup < math.inf:
        end = _x(result.speedup)
        out.append(f'<rect x="{min(middle, end):.1f}" y="4" width="{abs(end - middle):.1f}" '
                   f'height="8" fill="{colour}"/>')
    if result.ratio_interval is not None and result.ratio_interval[0] > 0:
        low, high = (1 / result.ratio_interval[1], 1 / result.ratio_interval[0])
        out.append(f'<line x1="{_x(low):.1f}" y1="8" x2="{_x(high):.1f}" y2="8" stroke="#000" '
                   f'stroke-width="1.2"/><line x1="{_x(low):.1f}" y1="5" x2="{_x(low):.1f}" '
                   f'y2="11" stroke="#000"/><line x1="{_x(high):.1f}" y1="5" '
                   f'x2="{_x(high):.1f}" y2="11" stroke="#000"/>')
    out.append("</svg>")
    return "".join(out)


def _times(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}×"


def _interval(row: Row) -> str:
    interval = row.result.ratio_interval
    if interval is None or interval[0] <= 0:
        return "-"
    return f"{1 / interval[1]:.3f}–{1 / interval[0]:.3f}×"


def _summary(report: CompareReport) -> str:
    ops = list(dict.fromkeys(row.op for row in report.rows))
    head = ("op", "passes", "geomean speedup", "faster", "slower", "same")
    out = ["<table><thead><tr>", "".join(f"<th>{h}</th>" for h in head),
           "</tr></thead><tbody>"]
    for op in ops + [None]:
        mine = [r for r in report.rows if op is None or r.op == op]
        counts = {v: sum(r.result.verdict == v for r in mine) for v in COLOURS}
        name = "<b>overall</b>" if op is None else e(op)
        out.append(f"<tr><td>{name}</td><td class=\"num\">{len(mine)}</td>"
                   f"<td class=\"num\">{e(_times(report.geomean(op)))}</td>"
                   + "".join(f"<td class=\"num\">{counts[v]}</td>" for v in COLOURS)
                   + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _rows(report: CompareReport, alpha: float) -> str:
    rows = sorted(report.rows, key=lambda r: (r.result.verdict == "same",
                                              -abs(math.log(r.result.speedup))
                                              if r.result.speedup and
                                              0 < r.result.speedup < math.inf else 0))
    limit = scale(rows)
    head = ("op", "config", "pass", "base", "new", "speedup", f"{1 - alpha:.0%} interval",
            f"{1 / limit:.3g}× ← slower · 1× · faster → {limit:g}× (log)", "p", "verdict",
            "id")
    out = ["<table class=\"compare\"><thead><tr>", "".join(f"<th>{e(h)}</th>" for h in head),
           "</tr></thead><tbody>"]
    for row in rows:
        result = row.result
        verdict = result.verdict
        shown = "n<4" if verdict == "same" and min(row.base_n, row.new_n) < 4 else verdict
        out.append(f"<tr class=\"{e(verdict)}\"><td>{e(row.op)}</td>"
                   f"<td class=\"config\">{e(row.config)}</td><td>{e(row.pass_name)}</td>"
                   f"<td class=\"num\">{e(format_ms(result.base_median))}</td>"
                   f"<td class=\"num\">{e(format_ms(result.new_median))}</td>"
                   f"<td class=\"num\">{e(_times(result.speedup))}</td>"
                   f"<td class=\"num\">{e(_interval(row))}</td><td>{speedup_bar(row, limit)}</td>"
                   f"<td class=\"num\">{result.p_value:.3g}</td>"
                   f"<td class=\"verdict\">{e(shown)}</td><td>{e(row.id)}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _not_judged(report: CompareReport) -> str:
    out = []
    if report.gate:
        out.append("<h2>Measured in BASE, not judged in NEW</h2><table><thead><tr><th>op</th>"
                   "<th>id</th><th>pass</th><th>base</th><th>reason</th><th>detail</th></tr>"
                   "</thead><tbody>")
        for miss in report.gate:
            out.append(f"<tr class=\"error\"><td>{e(miss.key[0])}</td><td>{e(miss.key[1])}</td>"
                       f"<td>{e(miss.key[2])}</td><td class=\"num\">"
                       f"{e(format_ms(miss.base_median))}</td><td>{e(miss.reason)}</td>"
                       f"<td>{e(miss.detail)}</td></tr>")
        out.append("</tbody></table>")
    lists = [("Not compared (they measured different things)",
              [f"{key_of(k[0], k[1])} ({k[2]}): {why}" for k, why in report.mismatched]),
             ("Only in NEW", [f"{key_of(k[0], k[1])} ({k[2]})" for k in report.only_new])]
    for title, items in lists:
        if items:
            shown = "".join(f"<li>{e(item)}</li>" for item in items[:200])
            more = f"<li>… {len(items) - 200} more</li>" if len(items) > 200 else ""
            out.append(f"<h2>{e(title)}: {len(items)}</h2><ul>{shown}{more}</ul>")
    return "".join(out)


def compare_html(report: CompareReport, base: Path, new: Path, alpha: float = 0.05) -> str:
    """The whole page for one comparison."""
    verdicts = {v: sum(r.result.verdict == v for r in report.rows) for v in COLOURS}
    about = definitions([
        ("base", base), ("new", new),
        ("compared", f"{len(report.rows)} passes: {verdicts['faster']} faster, "
                     f"{verdicts['slower']} slower, {verdicts['same']} not significantly "
                     "different"),
        ("overall", f"geometric mean speedup {_times(report.geomean())} (above 1×: NEW is "
                    "faster)"),
        ("significance", f"Mann-Whitney p < {alpha:g} and the {1 - alpha:.0%} bootstrap "
                         "interval of the median ratio excludes 1×"),
        ("settings differ", "; ".join(report.settings_diff)),
        ("not judged", f"{len(report.gate)} passes measured in BASE" if report.gate else "")])
    parts: List[str] = [about, "<h2>Geometric mean speedup per operator</h2>",
                        _summary(report), "<h2>Every compared pass</h2>",
                        "<p class=\"note\">Significant changes first, the largest first; the "
                        "bar runs from 1× to the speedup, the whisker is the interval.</p>",
                        _rows(report, alpha), _not_judged(report)]
    return page(f"param_compute compare: {new.name} vs {base.name}", parts)

"""The report's roofline: every run with utilization data against the machine's roofs (SVG).

A run's throughput (``flops_util``, ``bw_util``, ``intensity``) gives the peaks it was judged
against (achieved rate / utilization), so no calibration file is needed to draw them. Axes are
log-log: arithmetic intensity (FLOP/byte) against FLOP/s; the memory roof is bandwidth x
intensity, and each dtype seen has its own compute ceiling (its peak FLOP/s, e.g. bf16 above
f32) drawn in that dtype's colour, as are its runs. Runs that do no arithmetic (a copy, an add
without counted FLOPs) sit at the left edge, at their bandwidth utilization's height under the
memory roof, drawn hollow. A legend beside the plot names the colours, the ceilings and the
markers. Inline SVG: no scripts, no matplotlib. Torch-free.
"""

from __future__ import annotations

import html
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from param_compute.dtypes import DIFFERENTIABLE, short_dtype
from param_compute.plan.runkey import key_of
from param_compute.plan.summary import config_label, tensors
from param_compute.results.stats import upper_median

WIDTH, HEIGHT, MARGIN = 680, 420, 60
LEGEND = 230  # px right of the plot
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"]


def main_dtype(config: Any) -> str:
    """The dtype a run's peak is read for: its first floating tensor's (else its first)."""
    found = [dtype for _, _, dtype in tensors(config)]
    floating = [d for d in found if d in DIFFERENTIABLE]
    return short_dtype((floating or found or ["?"])[0])


def roofline_points(records: Sequence[Dict[str, Any]]
                    ) -> Tuple[List[Dict[str, Any]], Optional[float], Dict[str, float]]:
    """(points, peak bandwidth in B/s, compute roof in FLOP/s per dtype) from records'
    throughput."""
    points, bandwidths, roofs = [], [], {}
    for record in records:
        dtype = main_dtype(record.get("config"))
        for name, rates in (record.get("throughput") or {}).items():
            if not rates or rates.get("bw_util") is None:
                continue
            seconds_rate = (rates.get("gb_per_s") or 0) * 1e9
            if rates["bw_util"] > 0 and seconds_rate > 0:
                bandwidths.append(seconds_rate / rates["bw_util"])
            flops_rate = (rates.get("tflops_per_s") or 0) * 1e12
            if rates.get("flops_util") and flops_rate > 0:
                roofs.setdefault(dtype, round(flops_rate / rates["flops_util"], -3))
            label = config_label(record.get("config"), 48)
            points.append({"label": f"{key_of(record.get('op_name'), record.get('id'))} {name} "
                                    f"{label}".rstrip(), "dtype": dtype,
                           "intensity": rates.get("intensity") or 0.0, "flops": flops_rate,
                           "bw_util": rates["bw_util"], "bound": rates.get("bound"),
                           "util": rates.get("util")})
    bandwidth = upper_median(bandwidths) if bandwidths else None
    return points, bandwidth, dict(sorted(roofs.items(), key=lambda item: -item[1]))


def roofline_svg(records: Sequence[Dict[str, Any]]) -> str:
    """The roofline as inline SVG; "" when no record carries utilization."""
    points, bandwidth, ceilings = roofline_points(records)
    if not points or bandwidth is None:
        return ""
    dtypes = list(dict.fromkeys(list(ceilings) + [p["dtype"] for p in points]))
    colour = {d: COLOURS[i % len(COLOURS)] for i, d in enumerate(dtypes)}
    roofs = list(ceilings.values())
    positive = [p["intensity"] for p in points if p["intensity"] > 0]
    balance = [roof / bandwidth for roof in roofs]
    x_lo = 10 ** math.floor(math.log10(min(positive + balance + [1.0]) / 4))
    x_hi = 10 ** math.ceil(math.log10(max(positive + balance + [1.0]) * 4))
    top = max(roofs + [bandwidth * x_hi if not roofs else 0] + [p["flops"] for p in points])
    y_hi = 10 ** math.ceil(math.log10(top * 2))
    y_lo = 10 ** math.floor(math.log10(bandwidth * x_lo / 10))

    def sx(x: float) -> float:
        return MARGIN + (WIDTH - 2 * MARGIN) * math.log10(x / x_lo) / math.log10(x_hi / x_lo)

    def sy(y: float) -> float:
        y = min(max(y, y_lo), y_hi)
        return HEIGHT - MARGIN - (HEIGHT - 2 * MARGIN) * math.log10(y / y_lo) / math.log10(
            y_hi / y_lo)

    out = [f'<svg width="{WIDTH + LEGEND}" '
           f'height="{HEIGHT}" role="img" aria-label="roofline" font-size="11" '
           f'font-family="sans-serif">',
           f'<rect x="{MARGIN}" y="{MARGIN}" width="{WIDTH - 2 * MARGIN}" '
           f'height="{HEIGHT - 2 * MARGIN}" fill="none" stroke="#999"/>']
    for exponent in range(int(math.log10(x_lo)), int(math.log10(x_hi)) + 1):
        x = sx(10.0 ** exponent)
        out.append(f'<text x="{x:.1f}" y="{HEIGHT - MARGIN + 14}" text-anchor="middle">'
                   f'1e{exponent}</text>')
    for exponent in range(int(math.log10(y_lo)), int(math.log10(y_hi)) + 1):
        y = sy(10.0 ** exponent)
        out.append(f'<text x="{MARGIN - 4}" y="{y + 4:.1f}" text-anchor="end">1e{exponent}'
                   f'</text>')
    out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT - 18}" text-anchor="middle">arithmetic '
               f'intensity (FLOP/byte)</text>')
    out.append(f'<text x="14" y="{HEIGHT / 2}" transform="rotate(-90 14 {HEIGHT / 2})" '
               f'text-anchor="middle">FLOP/s</text>')
    memory_end = max(roofs) / bandwidth if roofs else x_hi
    out.append(f'<line x1="{sx(x_lo):.1f}" y1="{sy(bandwidth * x_lo):.1f}" '
               f'x2="{sx(memory_end):.1f}" y2="{sy(bandwidth * memory_end):.1f}" '
               f'stroke="#444" stroke-width="2"/>')
    for dtype, roof in ceilings.items():
        knee = roof / bandwidth
        out.append(f'<line x1="{sx(knee):.1f}" y1="{sy(roof):.1f}" x2="{sx(x_hi):.1f}" '
                   f'y2="{sy(roof):.1f}" stroke="{colour[dtype]}" stroke-width="2"/>')
        out.append(f'<text x="{WIDTH - MARGIN - 4}" y="{sy(roof) - 4:.1f}" text-anchor="end" '
                   f'fill="{colour[dtype]}">{html.escape(dtype)} {roof / 1e12:.3g} TFLOP/s'
                   f'</text>')
    out.append(f'<text x="{sx(x_lo) + 4:.1f}" y="{sy(bandwidth * x_lo) - 6:.1f}">'
               f'{bandwidth / 1e9:.3g} GB/s</text>')
    for point in points:
        stroke = colour[point["dtype"]]
        if point["intensity"] > 0 and point["flops"] > 0:
            x, y, fill = point["intensity"], point["flops"], stroke
        else:  # no arithmetic: at the left edge, as high under the memory roof as its bw use
            x, y, fill = x_lo, bandwidth * x_lo * point["bw_util"], "none"
        util = f", {point['util']:.0%} of peak" if point.get("util") is not None else ""
        shape = ('<rect x="{0:.1f}" y="{1:.1f}" width="8" height="8"'.format(sx(x) - 4, sy(y) - 4)
                 if point["bound"] == "memory" else
                 f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4"')
        tag = "rect" if point["bound"] == "memory" else "circle"
        out.append(f'{shape} fill="{fill}" stroke="{stroke}"><title>'
                   f'{html.escape(point["label"])}{util}</title></{tag}>')
    out.append(_legend(dtypes, colour, ceilings, bandwidth))
    out.append("</svg>")
    return "".join(out)


def _legend(dtypes: List[str], colour: Dict[str, str], ceilings: Dict[str, float],
            bandwidth: float) -> str:
    x, y = WIDTH + 10, MARGIN
    out = [f'<text x="{x}" y="{y}" font-weight="bold">legend</text>']
    entries = [(f'<line x1="{x}" y1="{{y}}" x2="{x + 24}" y2="{{y}}" stroke="#444" '
                f'stroke-width="2"/>', f"memory roof {bandwidth / 1e9:.3g} GB/s")]
    for dtype in dtypes:
        peak = ceilings.get(dtype)
        entries.append((f'<line x1="{x}" y1="{{y}}" x2="{x + 24}" y2="{{y}}" '
                        f'stroke="{colour[dtype]}" stroke-width="2"/>',
                        f"{dtype} ceiling {peak / 1e12:.3g} TFLOP/s" if peak
                        else f"{dtype}: no FLOP peak"))
    entries += [(f'<circle cx="{x + 12}" cy="{{y}}" r="4" fill="#888" stroke="#888"/>',
                 "compute-bound run"),
                (f'<rect x="{x + 8}" y="{{y4}}" width="8" height="8" fill="#888" '
                 f'stroke="#888"/>', "memory-bound run"),
                (f'<circle cx="{x + 12}" cy="{{y}}" r="4" fill="none" stroke="#888"/>',
                 "no FLOPs (left edge)")]
    for index, (mark, text) in enumerate(entries):
        row = y + 20 + 18 * index
        out.append(mark.format(y=row, y4=row - 4))
        out.append(f'<text x="{x + 32}" y="{row + 4}">{html.escape(text)}</text>')
    return "".join(out)


def roofline_section(records: Sequence[Dict[str, Any]]) -> str:
    """The report's roofline section (heading, SVG, note); "" without utilization data."""
    svg = roofline_svg(records)
    if not svg:
        return ""
    return ("<h2>Roofline</h2>" + svg + "<p class=\"note\">Every run with utilization data "
            "(peaks from <code>python -m param_compute.calibrate</code> or --peaks), coloured "
            "by dtype, each dtype against its own ceiling; hover a point for its run, config "
            "and % of peak.</p>")

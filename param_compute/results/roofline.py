"""The report's roofline: every run with utilization data against the machine's roofs (SVG).

A run's throughput (``flops_util``, ``bw_util``, ``intensity``) gives the peaks it was judged
against (achieved rate / utilization), so no calibration file is needed to draw them. Axes are
log-log: arithmetic intensity (FLOP/byte) against FLOP/s; the memory roof is bandwidth x
intensity, the compute roof the peak FLOP/s of each dtype seen. Runs that do no arithmetic (a
copy, an add without counted FLOPs) sit at the left edge, at their bandwidth utilization's
height under the memory roof, drawn hollow. Inline SVG: no scripts, no matplotlib. Torch-free.
"""

from __future__ import annotations

import html
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from param_compute.plan.runkey import key_of

WIDTH, HEIGHT, MARGIN = 680, 420, 60


def roofline_points(records: Sequence[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]],
                                                                  Optional[float], List[float]]:
    """(points, peak bandwidth in B/s, compute roofs in FLOP/s) from records' throughput."""
    points, bandwidths, roofs = [], [], set()
    for record in records:
        for name, rates in (record.get("throughput") or {}).items():
            if not rates or rates.get("bw_util") is None:
                continue
            seconds_rate = (rates.get("gb_per_s") or 0) * 1e9
            if rates["bw_util"] > 0 and seconds_rate > 0:
                bandwidths.append(seconds_rate / rates["bw_util"])
            flops_rate = (rates.get("tflops_per_s") or 0) * 1e12
            if rates.get("flops_util") and flops_rate > 0:
                roofs.add(round(flops_rate / rates["flops_util"], -3))
            points.append({"label": f"{key_of(record.get('op_name'), record.get('id'))} {name}",
                           "intensity": rates.get("intensity") or 0.0, "flops": flops_rate,
                           "bw_util": rates["bw_util"], "bound": rates.get("bound"),
                           "util": rates.get("util")})
    bandwidth = sorted(bandwidths)[len(bandwidths) // 2] if bandwidths else None
    return points, bandwidth, sorted(roofs)


def roofline_svg(records: Sequence[Dict[str, Any]]) -> str:
    """The roofline as inline SVG; "" when no record carries utilization."""
    points, bandwidth, roofs = roofline_points(records)
    if not points or bandwidth is None:
        return ""
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

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'role="img" aria-label="roofline" font-size="11" font-family="sans-serif">',
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
    for roof in roofs or [None]:
        knee = roof / bandwidth if roof else x_hi
        out.append(f'<polyline fill="none" stroke="#c33" stroke-width="2" points="'
                   f'{sx(x_lo):.1f},{sy(bandwidth * x_lo):.1f} {sx(knee):.1f},'
                   f'{sy(bandwidth * knee):.1f}' + (f' {sx(x_hi):.1f},{sy(roof):.1f}"/>'
                                                    if roof else '"/>'))
        if roof:
            out.append(f'<text x="{WIDTH - MARGIN - 4}" y="{sy(roof) - 4:.1f}" '
                       f'text-anchor="end">{roof / 1e12:.3g} TFLOP/s</text>')
    out.append(f'<text x="{sx(x_lo) + 4:.1f}" y="{sy(bandwidth * x_lo) - 6:.1f}">'
               f'{bandwidth / 1e9:.3g} GB/s</text>')
    for point in points:
        colour = "#1f77b4" if point["bound"] == "compute" else "#2ca02c"
        if point["intensity"] > 0 and point["flops"] > 0:
            x, y, fill = point["intensity"], point["flops"], colour
        else:  # no arithmetic: at the left edge, as high under the memory roof as its bw use
            x, y, fill = x_lo, bandwidth * x_lo * point["bw_util"], "none"
        util = f", {point['util']:.0%} of peak" if point.get("util") is not None else ""
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="{fill}" '
                   f'stroke="{colour}"><title>{html.escape(point["label"])}{util}</title>'
                   f'</circle>')
    out.append("</svg>")
    return "".join(out)


def roofline_section(records: Sequence[Dict[str, Any]]) -> str:
    """The report's roofline section (heading, SVG, note); "" without utilization data."""
    svg = roofline_svg(records)
    if not svg:
        return ""
    return ("<h2>Roofline</h2>" + svg + "<p class=\"note\">Every run with utilization data "
            "(peaks from <code>python -m param_compute.calibrate</code> or --peaks); filled: "
            "runs with FLOPs, hollow at the left edge: runs without; hover a point for its "
            "run and % of peak.</p>")

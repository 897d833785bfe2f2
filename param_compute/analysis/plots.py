"""Drawing one sweep: latency (median, p10-p90 band) and throughput side by side, as PNG.

A sweep over categories (dtypes, flags) is drawn as grouped bars with p10-p90 whiskers.
Uses matplotlib's Agg canvas (no display, no global pyplot state).
"""

from __future__ import annotations

import io

from param_compute.analysis.sweeps import Sweep

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22"]


def _bars(sweep: Sweep, latency, throughput) -> None:
    """Grouped bars: a group per category, a bar per line (its label in the legend)."""
    width = 0.8 / max(len(sweep.lines), 1)
    for index, line in enumerate(sweep.lines):
        color = PALETTE[index % len(PALETTE)]
        hatch = None if line.pass_name == "forward" else "//"
        xs = [p.x - 0.4 + width * (index + 0.5) for p in line.points]
        medians = [p.median for p in line.points]
        latency.bar(xs, medians, width, color=color, hatch=hatch, label=line.label,
                    yerr=[[m - p.p10 for m, p in zip(medians, line.points)],
                          [p.p90 - m for m, p in zip(medians, line.points)]],
                    error_kw={"elinewidth": 0.8, "capsize": 2})
        rated = [(x, p.rate) for x, p in zip(xs, line.points) if p.rate is not None]
        if rated:
            throughput.bar([x for x, _ in rated], [r for _, r in rated], width, color=color,
                           hatch=hatch, label=line.label)
    for axis in (latency, throughput):
        axis.set_xticks(range(len(sweep.categories)))
        axis.set_xticklabels(sweep.categories, fontsize=8)


def plot_sweep(sweep: Sweep) -> bytes:
    """PNG of one sweep: latency (median, p10-p90 band) and throughput side by side."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(12, 4.3), dpi=100)
    FigureCanvasAgg(figure)
    latency, throughput = figure.subplots(1, 2)
    colors = {}
    palette = PALETTE
    if sweep.categories:
        _bars(sweep, latency, throughput)
    for line in [] if sweep.categories else sweep.lines:
        # a pass shares its line's colour (dashed), except among scattered points
        base_label = line.label if sweep.scatter else line.label.replace(
            f" ({line.pass_name})", "")
        color = colors.setdefault(base_label, palette[len(colors) % len(palette)])
        xs = [p.x for p in line.points]
        medians = [p.median for p in line.points]
        rates = [(p.x, p.rate) for p in line.points if p.rate is not None]
        marker = "o" if line.pass_name == "forward" else "s"
        if sweep.scatter:  # p10-p90 as error bars, no line joining unrelated configs
            latency.errorbar(xs, medians, yerr=[[m - p.p10 for m, p in zip(medians, line.points)],
                                                [p.p90 - m for m, p in zip(medians, line.points)]],
                             fmt=marker, markersize=3, color=color, ecolor=color, elinewidth=0.6,
                             alpha=0.8, label=line.label)
            if rates:
                throughput.plot([x for x, _ in rates], [r for _, r in rates], marker,
                                markersize=3, color=color, alpha=0.8, label=line.label)
            continue
        style = "-" if line.pass_name == "forward" else "--"
        latency.plot(xs, medians, style, marker=marker, markersize=3, color=color,
                     label=line.label)
        latency.fill_between(xs, [p.p10 for p in line.points], [p.p90 for p in line.points],
                             color=color, alpha=0.15, linewidth=0)
        if rates:
            throughput.plot([x for x, _ in rates], [r for _, r in rates], style, marker=marker,
                            markersize=3, color=color, label=line.label)
    medians = [p.median for line in sweep.lines for p in line.points if p.median > 0]
    integer_x = all(float(p.x).is_integer() for line in sweep.lines for p in line.points)
    for axis, title, unit in ((latency, "median latency (p10–p90 band)", "ms"),
                              (throughput, "throughput at the median", sweep.rate_label)):
        axis.set_title(f"{sweep.op}: {title}", fontsize=10)
        axis.set_xlabel(sweep.x_label, fontsize=9)
        axis.set_ylabel(unit, fontsize=9)
        axis.grid(True, alpha=0.3)
        axis.tick_params(labelsize=8)
        if sweep.categories:
            axis.grid(False, axis="x")
        elif sweep.log_x:
            axis.set_xscale("log")
        elif integer_x:
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    if medians and max(medians) / min(medians) > 50 and not sweep.categories:
        latency.set_yscale("log")
    handles, labels = latency.get_legend_handles_labels()
    if len(labels) > 1 or (labels and labels[0] != sweep.op):
        latency.legend(fontsize=7, loc="best")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()

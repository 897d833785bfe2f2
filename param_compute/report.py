"""``python -m param_compute.report RESULTS -o report.html``: plots of sweeps and a summary table.

For each operator whose runs sweep a numeric dimension (a ``__range__``/``__list__`` shape dim or
scalar value), the report plots the median latency (with the p10-p90 band) and the throughput
(GFLOP/s when FLOPs were counted, else GB/s, else calls/s) against it. Runs are taken by spec
variant (ids ``config|build|variant_*``); in each, the x axis is the varying feature with the
most distinct values (dims tied to it by ``__copy__`` named with it) and the other varying
features split the runs into lines (forward solid, backward dashed). Variants sweeping the same
feature share a plot, one line each; another feature gets its own plot. A grid that would take
more than eight lines is drawn as points against the estimated FLOPs per call. Then comes a
table of every run.

The HTML file is self-contained: inline CSS, PNG images embedded as base64, no scripts and no
external assets, so it reads offline and can be attached to an issue. Exit status: 0 written;
2 the results file is missing or invalid, or matplotlib is not installed.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .config_summary import (dtypes_summary, estimate_flops, features, numeric_column,
                             params_summary, shapes_summary, varying_features)
from .formatting import format_ms
from .results_io import (ResultsFile, ResultsFileError, load_results, measured_passes,
                         pass_throughput)

MAX_LINES = 8
TABLE_ROWS = 5000


@dataclass
class Point:
    x: float
    median: float
    p10: float
    p90: float
    rate: Optional[float]
    run_id: str


@dataclass
class Line:
    label: str
    pass_name: str
    points: List[Point] = field(default_factory=list)


@dataclass
class Sweep:
    op: str
    x_label: str
    rate_label: str
    lines: List[Line]
    log_x: bool = False
    scatter: bool = False  # points of a grid against their estimated work: no joining lines


def _rate(record: Dict[str, Any], pass_name: str, median_ms: float, kind: str
          ) -> Optional[float]:
    rates = pass_throughput(record, pass_name)
    if kind == "GFLOP/s":
        value = rates.get("tflops_per_s")
        return value * 1e3 if value is not None else None
    if kind == "GB/s":
        return rates.get("gb_per_s")
    return 1e3 / median_ms if median_ms > 0 else None  # calls/s


def _rate_kind(records: List[Dict[str, Any]]) -> str:
    def known(key: str) -> bool:
        return any(pass_throughput(r, name).get(key) not in (None, 0)
                   for r in records for name, _ in measured_passes(r))

    if known("tflops_per_s"):
        return "GFLOP/s"
    if known("gb_per_s"):
        return "GB/s"
    return "calls/s"


def _format_value(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _series_key(run_id: str) -> Tuple[str, ...]:
    """Runs of one sweep as the spec declares it: same config, build variant and input variant
    (``0|0|1_7`` -> ``("0", "0", "1")``; a plain index, as DefaultConfigIterator's, -> ``*``)."""
    parts = str(run_id).split("|")
    return tuple(p.split("_")[0] if "_" in p else ("*" if i > 0 else p)
                 for i, p in enumerate(parts))


def _pattern(key: Tuple[str, ...]) -> str:
    return "|".join(k if i == 0 else (f"{k}_*" if k != "*" else "*")
                    for i, k in enumerate(key))


@dataclass
class _Series:
    key: Tuple[str, ...]
    records: List[Dict[str, Any]]
    x_name: str = ""
    x_label: str = ""
    x_values: List[float] = field(default_factory=list)
    split: List[str] = field(default_factory=list)  # a line label part per record
    constants: Dict[str, Any] = field(default_factory=dict)
    scatter: bool = False


def _analyse(op: str, series: _Series) -> bool:
    """Choose the x axis of one series; False when it sweeps nothing numeric."""
    configs = [r.get("config") for r in series.records]
    columns, aliases = varying_features(configs)
    numeric = {name: numeric_column(values) for name, values in columns.items()}
    numeric = {name: values for name, values in numeric.items() if values is not None}
    if not numeric:
        return False
    first = features(configs[0])
    series.constants = {k: v for k, v in first.items()
                        if k not in columns and not any(k in a for a in aliases.values())}
    series.x_name = max(numeric, key=lambda name: len(set(numeric[name])))  # first wins ties
    others = [name for name in columns if name != series.x_name]
    series.split = [", ".join(f"{name}={_format_value(columns[name][i])}" for name in others)
                    for i in range(len(configs))]
    series.x_values = numeric[series.x_name]
    series.x_label = " = ".join([series.x_name, *aliases.get(series.x_name, [])])
    if len(set(series.split)) > MAX_LINES:  # a grid: against the estimated work instead
        series.x_values = [float(estimate_flops(op, c)) for c in configs]
        series.x_name = series.x_label = "estimated FLOPs per call"
        series.split = [""] * len(configs)
        series.scatter = True
    return True


def find_sweeps(op: str, records: List[Dict[str, Any]]) -> List[Sweep]:
    """The plots of one operator's measured runs: one per x axis (a spec variant sweeping
    another dimension gets its own plot); none when nothing numeric is swept."""
    records = [r for r in records if any(True for _ in measured_passes(r))]
    grouped: Dict[Tuple[str, ...], List[Dict[str, Any]]] = {}
    for record in records:
        grouped.setdefault(_series_key(str(record.get("id"))), []).append(record)
    by_axis: Dict[Tuple[str, bool], List[_Series]] = {}
    for key, members in grouped.items():
        series = _Series(key, members)
        if len(members) > 1 and _analyse(op, series):
            by_axis.setdefault((series.x_name, series.scatter), []).append(series)

    sweeps = []
    for (_, scatter), members in by_axis.items():
        rate_kind = _rate_kind([r for s in members for r in s.records])
        # what tells these series apart: constants that differ between them
        names = [n for n in dict.fromkeys(k for s in members for k in s.constants)
                 if len({repr(s.constants.get(n)) for s in members}) > 1][:3]
        lines: Dict[Tuple[str, str], Line] = {}
        for series in members:
            tag = ", ".join(f"{n}={_format_value(series.constants.get(n))}" for n in names)
            base = " ".join(p for p in (_pattern(series.key) if len(members) > 1 else "", tag)
                            if p)
            for index, record in enumerate(series.records):
                label = "; ".join(p for p in (base, series.split[index]) if p) or op
                for pass_name, stats in measured_passes(record):
                    if (label, pass_name) not in lines:
                        lines[(label, pass_name)] = Line(
                            label if pass_name == "forward" else f"{label} ({pass_name})",
                            pass_name)
                    median = stats["median"]
                    lines[(label, pass_name)].points.append(Point(
                        series.x_values[index], median, stats.get("p10", median),
                        stats.get("p90", median), _rate(record, pass_name, median, rate_kind),
                        str(record.get("id"))))
        for line in lines.values():
            line.points.sort(key=lambda p: p.x)
        xs = [p.x for line in lines.values() for p in line.points]
        log_x = min(xs) > 0 and max(xs) / min(xs) > 50
        sweeps.append(Sweep(op, members[0].x_label, rate_kind, list(lines.values()), log_x,
                            scatter))
    return sweeps


def plot_sweep(sweep: Sweep) -> bytes:
    """PNG of one sweep: latency (median, p10-p90 band) and throughput side by side."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(12, 4.3), dpi=100)
    FigureCanvasAgg(figure)
    latency, throughput = figure.subplots(1, 2)
    colors = {}
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
               "#17becf", "#7f7f7f", "#bcbd22"]
    for line in sweep.lines:
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
        if sweep.log_x:
            axis.set_xscale("log")
        elif integer_x:
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    if medians and max(medians) / min(medians) > 50:
        latency.set_yscale("log")
    handles, labels = latency.get_legend_handles_labels()
    if len(labels) > 1 or (labels and labels[0] != sweep.op):
        latency.legend(fontsize=7, loc="best")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


# --- HTML -----------------------------------------------------------------------------------

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px;
       color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f3f3f3; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.error td { background: #fdecea; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; font-size: 13px; }
dt { font-weight: 600; } dd { margin: 0; }
img { max-width: 100%; border: 1px solid #eee; }
.note { color: #666; font-size: 13px; }
"""



def _ms(value: Optional[float]) -> str:
    return format_ms(value, missing="")


def _num(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.4g}"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _about(results: ResultsFile) -> str:
    info, options = results.sys_info, results.run_options
    finish = results.finish or {}
    items = [("results", results.path), ("spec", options.get("config_file")),
             ("device", options.get("device") or info.get("device")),
             ("GPU", info.get("cuda_device_name")),
             ("host", f"{info.get('hostname', '')} ({info.get('platform', '')}, "
                      f"{info.get('cpu_count', '?')} CPUs)"),
             ("torch", info.get("pytorch_version")),
             ("iterations", f"warm-up {options.get('warmup')}, measured "
                            f"{options.get('iteration')} ({options.get('exec_mode')})"),
             ("started", results.header.get("start_time")),
             ("finished", finish.get("finish_time")),
             ("runs", f"{finish.get('runs_ok', '?')} measured, "
                      f"{finish.get('runs_failed', '?')} failed, "
                      f"{finish.get('runs_dry', 0)} planned"
              if finish else f"{len(results.records)} (no last line: the run did not finish)")]
    if results.header.get("merged_shards"):
        items.append(("shards", len(results.header["merged_shards"].get("shards", []))))
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items if v not in (None, ""))
    return f"<dl>{rows}</dl>"


def _table(records: Sequence[Dict[str, Any]]) -> str:
    head = ("op", "id", "pass", "status", "median", "p10", "p90", "n", "TFLOP/s", "GB/s",
            "shapes", "dtypes", "params")
    out = ["<table><thead><tr>", "".join(f"<th>{h}</th>" for h in head), "</tr></thead><tbody>"]
    rows = 0
    for record in records:
        config = record.get("config")
        common = (_e(shapes_summary(config)), _e(dtypes_summary(config)),
                  _e(params_summary(config)))
        passes = list(measured_passes(record))
        status = record.get("status")
        if not passes:
            error = record.get("error") or {}
            message = f"{error.get('type')}: {error.get('message')}" if error else ""
            out.append(f"<tr class=\"{'error' if status == 'error' else ''}\">"
                       f"<td>{_e(record.get('op_name'))}</td><td>{_e(record.get('id'))}</td>"
                       f"<td></td><td>{_e(status)}</td><td colspan=\"6\">{_e(message)}</td>"
                       f"<td>{common[0]}</td><td>{common[1]}</td><td>{common[2]}</td></tr>")
            rows += 1
        for name, stats in passes:
            rates = pass_throughput(record, name)
            cells = [_e(record.get("op_name")), _e(record.get("id")), _e(name), _e(status)]
            numbers = [_ms(stats.get("median")), _ms(stats.get("p10")), _ms(stats.get("p90")),
                       _e(stats.get("n")), _num(rates.get("tflops_per_s")),
                       _num(rates.get("gb_per_s"))]
            out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells)
                       + "".join(f"<td class=\"num\">{c}</td>" for c in numbers)
                       + "".join(f"<td>{c}</td>" for c in common) + "</tr>")
            rows += 1
        if rows >= TABLE_ROWS:
            break
    out.append("</tbody></table>")
    if rows >= TABLE_ROWS:
        out.append(f"<p class=\"note\">First {TABLE_ROWS} rows; the results file has them "
                   "all.</p>")
    return "".join(out)


def _sweep_html(sweep: Sweep, number: int, png_dir: Optional[Path]) -> str:
    png = plot_sweep(sweep)
    if png_dir is not None:
        png_dir.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in sweep.op)
        (png_dir / f"{number:02d}_{safe}.png").write_bytes(png)
    points = sum(len(line.points) for line in sweep.lines)
    return (f"<h3>{_e(sweep.op)}: against {_e(sweep.x_label)}</h3>"
            f"<p class=\"note\">{points} points, {len(sweep.lines)} line(s)"
            f"{'; a grid sweep, plotted against its estimated work' if sweep.scatter else ''}"
            f"</p><img alt=\"{_e(sweep.op)}: latency and throughput against "
            f"{_e(sweep.x_label)}\" src=\"data:image/png;base64,"
            f"{base64.b64encode(png).decode('ascii')}\">")


def build_report(results: ResultsFile, title: Optional[str] = None,
                 png_dir: Optional[Path] = None) -> Tuple[str, List[Sweep]]:
    """(the HTML text, the sweeps plotted)."""
    by_op: Dict[str, List[Dict[str, Any]]] = {}
    for record in results.records:
        by_op.setdefault(str(record.get("op_name")), []).append(record)
    title = title or f"param_compute report: {results.path.name}"
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>", _about(results), "<h2>Sweeps</h2>"]
    sweeps: List[Sweep] = []
    for op, records in by_op.items():
        for sweep in find_sweeps(op, records):
            sweeps.append(sweep)
            parts.append(_sweep_html(sweep, len(sweeps), png_dir))
    if not sweeps:
        parts.append("<p class=\"note\">No operator sweeps a numeric dimension over measured "
                     "runs (a dry run, or fixed configs only).</p>")
    parts.append("<h2>All runs</h2>")
    parts.append(_table(results.records))
    parts.append("</body></html>\n")
    return "".join(parts), sweeps


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m param_compute.report",
        description="Write a self-contained HTML report of a results file: latency and "
                    "throughput plots of each sweep, and a table of every run.")
    parser.add_argument("results", type=Path, help="a results file (JSON Lines)")
    parser.add_argument("-o", "--output", type=Path,
                        help="the HTML file (default: RESULTS with .html)")
    parser.add_argument("--title", help="the report's title")
    parser.add_argument("--png-dir", type=Path, help="also save each plot as a PNG file here")
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("error: the report needs matplotlib: pip install matplotlib", file=sys.stderr)
        return 2
    try:
        results = load_results(args.results)
    except ResultsFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    output = args.output or args.results.with_suffix(".html")
    text, sweeps = build_report(results, args.title, args.png_dir)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"{output}: {len(sweeps)} sweep plot(s), {len(results.records)} runs "
          f"({len(text) / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

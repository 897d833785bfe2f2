"""``python -m param_compute.report RESULTS -o report.html``: one self-contained HTML report.

The report holds what the run was (device, host, iterations, counts), a plot per sweep (see
:mod:`param_compute.results.sweeps`; drawn by :mod:`param_compute.results.plots`) and a table of
every run. The HTML file is self-contained: inline CSS, PNG images embedded as base64, no
scripts and no external assets, so it reads offline and can be attached to an issue. Damaged
lines of the results file are reported on stderr (file:line) and left out. Exit status: 0
written; 2 the results file is missing or invalid, or matplotlib is not installed.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from param_compute.formatting import format_ms
from param_compute.plan.summary import dtypes_summary, params_summary, shapes_summary
from param_compute.results.fields import measured_passes, pass_throughput
from param_compute.results.file import (ResultsFile, ResultsFileError, ResultsStream,
                                        stream_results)
from param_compute.results.plots import plot_sweep
from param_compute.results.roofline import roofline_section
from param_compute.results.workload_totals import WorkloadTotals, totals_section
from param_compute.results.sweeps import Sweep, find_sweeps

TABLE_ROWS = 5000


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


def _about(results: Union[ResultsFile, ResultsStream], runs: int) -> str:
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
              if finish else f"{runs} (no last line: the run did not finish)")]
    if results.header.get("merged_shards"):
        items.append(("shards", len(results.header["merged_shards"].get("shards", []))))
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items if v not in (None, ""))
    return f"<dl>{rows}</dl>"


def _table(records: Iterable[Dict[str, Any]]) -> str:
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


def _ledger_html(records: Iterable[Dict[str, Any]],
                 results: Union[ResultsFile, ResultsStream]) -> str:
    """The fidelity ledger of a captured workload, first (``results.ledger``; empty else)."""
    from param_compute.results.ledger import build_ledger, ledger_section

    return ledger_section(build_ledger(records, results.extras, results.run_options))


#: What the report reads of each pass's stats (the sweeps and the table).
_STATS_KEPT = ("n", "median", "p10", "p90")


def _compact(record: Dict[str, Any]) -> str:
    """What the report keeps of a record while the file is read, as compact JSON text: the
    stats it shows, the rates, a captured config's count and original time, the error of a
    run without any measured pass, and the config; the measured times are dropped. (Text: a
    few hundred bytes a run, where the parsed objects take several KB.)"""
    passes = {name: {key: stats.get(key) for key in _STATS_KEPT}
              for name, stats in measured_passes(record)}
    out = {"op_name": record.get("op_name"), "id": record.get("id"),
           "status": record.get("status"), "stats": passes}
    for key in ("throughput", "count", "original_us", "config"):
        out[key] = record.get(key)
    if not passes and record.get("error"):
        out["error"] = record["error"]
    return json.dumps(out, separators=(",", ":"), default=str)


def build_report(results: Union[ResultsFile, ResultsStream], title: Optional[str] = None,
                 png_dir: Optional[Path] = None) -> Tuple[str, List[Sweep]]:
    """(the HTML text, the sweeps plotted). A stream is read once; each run is kept compact
    (:func:`_compact`), its latest record where an appended file holds it twice, and decoded
    again one operator at a time (sweeps) or one record at a time (roofline, totals, table):
    memory grows with the runs, not with the records or samples."""
    records = results.records if isinstance(results, ResultsFile) else (r for _, r in results)
    kept: List[str] = []  # in file order; a later record of a run replaces it
    places: Dict[Tuple[str, str], int] = {}
    by_op: Dict[str, List[int]] = {}
    for record in records:
        key = (str(record.get("op_name")), str(record.get("id")))
        if key in places:
            kept[places[key]] = _compact(record)
            continue
        places[key] = len(kept)
        by_op.setdefault(key[0], []).append(len(kept))
        kept.append(_compact(record))
    del places

    def decoded(indexes: Iterable[int] = range(len(kept))) -> Iterator[Dict[str, Any]]:
        return (json.loads(kept[i]) for i in indexes)

    title = title or f"param_compute report: {results.path.name}"
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>", _about(results, len(kept)),
             _ledger_html(decoded(), results), "<h2>Sweeps</h2>"]
    sweeps: List[Sweep] = []
    for op, mine in by_op.items():
        for sweep in find_sweeps(op, list(decoded(mine))):  # one op's records at once
            sweeps.append(sweep)
            parts.append(_sweep_html(sweep, len(sweeps), png_dir))
    if not sweeps:
        parts.append("<p class=\"note\">No operator sweeps a numeric dimension over measured "
                     "runs (a dry run, or fixed configs only).</p>")
    parts.append(roofline_section(decoded()))
    totals = WorkloadTotals()  # captured workloads with original times
    for record in decoded():
        totals.add_json(record)
    parts.append(totals_section(totals))
    parts.append("<h2>All runs</h2>")
    parts.append(_table(decoded()))
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
    output = args.output or args.results.with_suffix(".html")
    if output.resolve() == args.results.resolve():
        print(f"error: the report {output} would overwrite the results file; give -o",
              file=sys.stderr)
        return 2
    try:  # one pass; unusable lines warned (file:line) as they are met and left out
        results = stream_results(args.results)
        text, sweeps = build_report(results, args.title, args.png_dir)
    except ResultsFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"{output}: {len(sweeps)} sweep plot(s), {results.records_read} runs "
          f"({len(text) / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

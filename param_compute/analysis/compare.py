"""``python -m param_compute.compare BASE.json NEW.json``: did NEW get faster or slower?

Runs are joined by (op, id, pass). For each pair the speedup is median(BASE) / median(NEW)
(above 1: NEW is faster) and the call is made from the two samples of measured times: a change
is *significant* when the Mann-Whitney U test gives p < alpha and the bootstrap interval of the
median ratio excludes 1 (see :mod:`param_compute.analysis.significance`); fewer than 4 samples a
side can never be. Per operator and overall, the geometric mean of the speedups summarizes.
Damaged lines of either file are reported on stderr (file:line) and left out.

Runs are only compared when they measured the same thing the same way: a pair whose ``config``
(shapes, dtypes, args) differs is listed as not compared, never reported as a speedup; files
whose settings differ (device, threads, timing mode, CUDA graphs, compilation, L2 cache) are not
compared at all unless ``--across-settings`` says that difference is the point. ``--strict``
turns any such mismatch into exit 2.

The gate fails closed: every pass measured in BASE must be judged in NEW. One that is not gets
one reason word: ``missing`` (no such run in NEW), ``failed`` (an error record), ``status`` (a
status other than ok; PARAM's records have none and count as ok; a run with the same status in
BASE, e.g. failed in both, is judged by its times), ``unmeasured`` (no measured time, e.g.
``-i 0``), ``non-finite`` (NaN or infinite times) or ``config`` (another config under the same
id). Those runs, a NEW without run records, files whose settings differ (without
``--across-settings``) and a comparison that judged nothing all fail ``--fail-on-regression``;
without it they are shown all the same.

Both files are read in one pass each, BASE first: memory grows with the number of runs, not
with records or bytes (see :mod:`param_compute.analysis.comparison`).

``--html OUT.html`` also writes the comparison as one self-contained page (see
:mod:`param_compute.analysis.compare_html`).

Exit status: 0; 1 with ``--fail-on-regression PCT`` when some run is significantly slower by
more than PCT percent or the gate fails closed as above; 2 when an input is missing or not a
results file, or with ``--strict`` when runs or settings do not match.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional

from param_compute.plan.runkey import key_of
from param_compute.analysis.comparison import (GATE_REASONS, CompareReport, PassKey, Row,
                                              compare_files, compare_streams, settings_diff)
from param_compute.errors import OptionsError
from param_compute.results.file import ResultsFileError
from param_compute.analysis.significance import Comparison
from param_compute.formatting import cell, format_ms
from param_compute import terminal
from param_compute.terminal import add_quiet

__all__ = ["GATE_REASONS", "CompareReport", "Row", "compare_files", "compare_streams",
           "settings_diff", "render", "write_csv", "main"]

EXIT_OK, EXIT_REGRESSION, EXIT_INVALID = 0, 1, 2

CSV_COLUMNS = ["op", "id", "pass", "base_median_ms", "new_median_ms", "base_n", "new_n",
               "speedup", "change_pct", "ratio_low", "ratio_high", "p_value", "verdict",
               "config"]
#: The narrowest the config column gets before it is left out (a console under 100 columns).
CONFIG_MIN_WIDTH = 100

# --- output ---------------------------------------------------------------------------------

def _speedup(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _interval(result: Comparison) -> str:
    if result.ratio_interval is None:
        return "-"
    low, high = result.ratio_interval
    # shown as a speedup interval, matching the speedup column (speedup = 1 / ratio)
    return f"{1 / high:.2f}–{1 / low:.2f}x" if low > 0 else "-"


def _key_text(key: PassKey) -> str:
    return key_of(key[0], key[1]) + (f" ({key[2]})" if key[2] != "-" else "")


def _listed(console, label: str, items: List[str]) -> None:
    if items:
        more = f", ... {len(items) - 10} more" if len(items) > 10 else ""
        console.print(cell(f"{label}: {len(items)}: {', '.join(items[:10])}{more}"),
                      highlight=False)


def render(report: CompareReport, base_path: Path, new_path: Path, console,
           max_rows: int = 60, alpha: float = 0.05) -> None:
    from rich.table import Table

    styles = {"faster": "green", "slower": "red", "same": "dim"}
    rows = report.rows
    if len(rows) > max_rows:  # the significant changes first, worst first
        rows = sorted(rows, key=lambda r: (r.result.verdict == "same", -r.result.change_pct))
    table = Table(title=f"{new_path} vs {base_path}", title_justify="left")
    with_config = (console.width or 0) >= CONFIG_MIN_WIDTH and any(r.config for r in rows)
    for column, justify in (("op", "left"), ("id", "left"), ("config", "left"),
                            ("pass", "left"), ("base", "right"), ("new", "right"),
                            ("speedup", "right"), (f"{1 - alpha:.0%} CI", "right"),
                            ("p", "right"), ("", "left")):
        if column == "config":
            if with_config:  # the column that gives way: cut with an ellipsis, never wrapped
                table.add_column(column, no_wrap=True, overflow="ellipsis",
                                 max_width=max(12, console.width - 110))
            continue
        table.add_column(column, justify=justify, no_wrap=True)
    for row in rows[:max_rows]:
        result = row.result
        verdict = result.verdict
        if verdict == "same" and min(row.base_n, row.new_n) < 4:
            verdict = "n<4"
        style = styles.get(result.verdict, "")
        config = [cell(row.config)] if with_config else []
        table.add_row(cell(row.op), cell(row.id), *config, cell(row.pass_name),
                      format_ms(result.base_median),
                      format_ms(result.new_median),
                      f"[{style}]{_speedup(result.speedup)}[/{style}]",
                      _interval(result), f"{result.p_value:.3g}",
                      f"[{style}]{verdict}[/{style}]")
    if rows:
        console.print(table)
    if len(rows) > max_rows:
        console.print(f"... {len(rows) - max_rows} more rows (--max-rows, or --csv for all)")

    by_op: Dict[str, Dict[str, int]] = {}
    for row in report.rows:
        counts = by_op.setdefault(row.op, {"faster": 0, "slower": 0, "same": 0})
        counts[row.result.verdict] += 1
    if by_op:
        summary = Table(title="geometric mean speedup (NEW vs BASE)", title_justify="left")
        for column, justify in (("op", "left"), ("passes", "right"), ("geomean", "right"),
                                ("faster", "right"), ("slower", "right"), ("same", "right")):
            summary.add_column(column, justify=justify)
        total = {v: sum(c[v] for c in by_op.values()) for v in ("faster", "slower", "same")}
        for op, counts in list(by_op.items()) + [(None, total)]:
            summary.add_row("[bold]overall[/bold]" if op is None else cell(op),
                            str(sum(counts.values())), _speedup(report.geomean(op)),
                            str(counts["faster"]), str(counts["slower"]), str(counts["same"]))
        console.print(summary)
    if report.gate:
        gate = Table(title="measured in BASE, not judged in NEW: fails the gate",
                     title_justify="left")
        for column, justify in (("op", "left"), ("id", "left"), ("pass", "left"),
                                ("base", "right"), ("reason", "left"), ("", "left")):
            gate.add_column(column, justify=justify)
        for miss in report.gate[:max_rows]:
            gate.add_row(cell(miss.key[0]), cell(miss.key[1]), cell(miss.key[2]),
                         format_ms(miss.base_median), f"[red]{miss.reason}[/red]",
                         cell(miss.detail))
        console.print(gate)
        if len(report.gate) > max_rows:
            console.print(f"... {len(report.gate) - max_rows} more (--csv lists them all)")
        console.print("not judged: " + ", ".join(f"{reason} {n}" for reason, n
                                                 in report.gate_counts().items()),
                      highlight=False)
    if report.settings_diff:
        console.print(cell("settings differ: " + "; ".join(report.settings_diff)),
                      highlight=False)
    if report.new_records == 0:
        console.print("NEW has no run records", highlight=False)
    _listed(console, "not compared (they measured different things)",
            [f"{_key_text(k)}: {why}" for k, why in report.mismatched])
    for label, keys in (("only in BASE (not measured there)", report.only_base),
                        ("only in NEW", report.only_new),
                        ("not measured in BASE", report.unmeasured)):
        _listed(console, label, [_key_text(k) for k in keys])


def write_csv(report: CompareReport, path: Path, inputs: Dict[str, Optional[Path]] = {}) -> None:
    """Every compared row, then every pass that failed the gate (its reason as the verdict).
    ``OptionsError`` where ``path`` is no place for an output (``files``)."""
    from param_compute.files import open_output

    with open_output("--csv", path, inputs) as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for row in report.rows:
            result = row.result
            low, high = result.ratio_interval or (None, None)
            writer.writerow([row.op, row.id, row.pass_name, result.base_median,
                             result.new_median, row.base_n, row.new_n, result.speedup,
                             result.change_pct, "" if low is None else low,
                             "" if high is None else high, result.p_value, result.verdict,
                             row.config])
        for miss in report.gate:
            writer.writerow([*miss.key, miss.base_median, "", miss.base_n, "", "", "", "", "",
                             "", miss.reason, ""])


def build_parser(prog: str = "python -m param_compute.compare") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Compare two results files run by run: speedup, significance, geometric "
                    "means; optionally fail on a significant regression.")
    p.add_argument("base", type=Path, help="the baseline results file")
    p.add_argument("new", type=Path, help="the results file to judge")
    p.add_argument("--fail-on-regression", type=float, metavar="PCT",
                   help="exit 1 when a run is significantly slower by more than PCT percent, "
                        "or a run measured in BASE is missing, failed, unmeasured, non-finite, "
                        "of another status or config in NEW, or NEW has no runs, or the "
                        "settings differ (fails closed)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="significance level (default 0.05; the interval is 1 - alpha)")
    p.add_argument("--resamples", type=int, default=2000,
                   help="bootstrap resamples for the median-ratio interval (default 2000; 0: "
                        "the Mann-Whitney test alone decides)")
    p.add_argument("--strict", action="store_true",
                   help="exit 2 when any run's config or the files' settings do not match "
                        "(by default mismatched runs are listed and left out)")
    p.add_argument("--across-settings", action="store_true",
                   help="compare files whose device, threads or timing mode differ (that "
                        "difference is what is being measured); configs must still match")
    p.add_argument("--csv", type=Path, help="also write every compared row to this CSV file")
    p.add_argument("--html", type=Path, metavar="OUT.html",
                   help="also write the comparison as a self-contained HTML page (speedup bars "
                        "with intervals, config labels, significance colours)")
    p.add_argument("--max-rows", type=int, default=60,
                   help="table rows to show (default 60; significant changes first when cut)")
    add_quiet(p)
    return p


def _write_output(flag: str, path: Path, report: CompareReport, args: argparse.Namespace,
                  inputs: Dict[str, Optional[Path]]) -> Optional[str]:
    """Write the ``--csv`` or ``--html`` output; what went wrong, or None."""
    try:
        if flag == "--csv":
            write_csv(report, path, inputs)
        else:
            from param_compute.analysis.compare_html import compare_html
            from param_compute.files import write_output

            write_output(flag, path, compare_html(report, args.base, args.new, args.alpha),
                         inputs)
    except OptionsError as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    return None


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m param_compute.compare") -> int:
    args = build_parser(prog).parse_args(argv)
    if not 0 < args.alpha < 1:
        print(f"error: --alpha must be between 0 and 1, got {args.alpha}", file=sys.stderr)
        return EXIT_INVALID
    if args.fail_on_regression is not None and not (0 <= args.fail_on_regression < math.inf):
        print("error: --fail-on-regression takes a percentage >= 0", file=sys.stderr)
        return EXIT_INVALID
    from param_compute.files import check_outputs

    inputs = {"BASE": args.base, "NEW": args.new}
    try:  # before anything is read: never a link, a directory, a FIFO or an input
        check_outputs({"--csv": args.csv, "--html": args.html}, inputs)
        report = compare_files(args.base, args.new, args.alpha, max(args.resamples, 0),
                               args.across_settings)
    except (OptionsError, ResultsFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    from rich.text import Text

    console = terminal.console(quiet=args.quiet)  # the tables: standard output
    if args.strict and (report.mismatched or (report.settings_diff
                                              and not args.across_settings)):
        for line in report.settings_diff:
            print(f"error: settings differ: {line}", file=sys.stderr)
        for key, why in report.mismatched[:20]:
            print(f"error: {_key_text(key)}: {why}", file=sys.stderr)
        print(f"error: --strict: {len(report.mismatched)} run(s) do not match; nothing "
              "compared", file=sys.stderr)
        return EXIT_INVALID
    render(report, args.base, args.new, console, args.max_rows, args.alpha)
    if not report.rows:
        console.print("no run measured in both files")
    for flag, path in (("--csv", args.csv), ("--html", args.html)):
        if path is not None:
            problem = _write_output(flag, path, report, args, inputs)
            if problem is not None:
                print(f"error: {problem}", file=sys.stderr)
                return EXIT_INVALID
            console.print(cell(f"{flag[2:]}: {path}"), highlight=False)
    if args.fail_on_regression is not None:
        regressions = report.regressions(args.fail_on_regression)
        parts = []
        if regressions:
            worst = max(regressions, key=lambda r: r.result.change_pct)
            parts.append(f"{len(regressions)} run(s) significantly slower by more than "
                         f"{args.fail_on_regression:g}% (worst {key_of(worst.op, worst.id)} "
                         f"{worst.pass_name}: +{worst.result.change_pct:.1f}%)")
        parts.extend(report.gate_failures(args.across_settings))
        if parts:  # said even when --quiet: an error, where errors go
            (terminal.console(stderr=True) if args.quiet else console).print(
                Text.assemble(("regression gate failed", "red"), cell(f": {'; '.join(parts)}")),
                highlight=False)
            return EXIT_REGRESSION
        console.print("regression gate passed", highlight=False)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

"""``python -m param_compute.compare BASE.json NEW.json``: did NEW get faster or slower?

Runs are joined by (op, id, pass). For each pair the speedup is median(BASE) / median(NEW)
(above 1: NEW is faster) and the call is made from the two samples of measured times: a change
is *significant* when the Mann-Whitney U test gives p < alpha and the bootstrap interval of the
median ratio excludes 1 (see :mod:`param_compute.results.significance`); fewer than 4 samples a
side can never be. Per operator and overall, the geometric mean of the speedups summarizes.
Damaged lines of either file are reported on stderr (file:line) and left out.

Runs are only compared when they measured the same thing the same way: a pair whose ``config``
(shapes, dtypes, args) differs is listed as not compared, never reported as a speedup; files
whose settings differ (device, threads, timing mode, CUDA graphs, compilation, L2 cache) are not
compared at all unless ``--across-settings`` says that difference is the point. ``--strict``
turns any such mismatch into exit 2.

Exit status: 0; 1 with ``--fail-on-regression PCT`` when some run is significantly slower by
more than PCT percent, or measured in BASE but failed in NEW; 2 when an input is missing or not a
results file, or with ``--strict`` when runs or settings do not match.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from param_compute.plan.runkey import key_of
from param_compute.results.fields import measured_passes, pass_samples, run_of
from param_compute.results.file import ResultsFile, ResultsFileError, read_results_warned
from param_compute.results.significance import Comparison, compare_samples
from param_compute.formatting import format_ms

EXIT_OK, EXIT_REGRESSION, EXIT_INVALID = 0, 1, 2

CSV_COLUMNS = ["op", "id", "pass", "base_median_ms", "new_median_ms", "base_n", "new_n",
               "speedup", "change_pct", "ratio_low", "ratio_high", "p_value", "verdict"]

PassKey = Tuple[str, str, str]  # (op, id, pass)


@dataclass
class Row:
    op: str
    id: str
    pass_name: str
    base_n: int
    new_n: int
    result: Comparison


@dataclass
class CompareReport:
    rows: List[Row]
    only_base: List[PassKey]
    only_new: List[PassKey]
    failed_new: List[PassKey]  # measured in BASE, an error record in NEW
    unmeasured: List[PassKey]  # in both files, measured in neither or one (dry runs...)
    #: Pairs not compared because they measured different things: (key, why).
    mismatched: List[Tuple[PassKey, str]] = field(default_factory=list)
    #: How the two files' settings differ ("device: cpu in BASE, cuda:0 in NEW"...).
    settings_diff: List[str] = field(default_factory=list)

    def geomean(self, op: Optional[str] = None) -> Optional[float]:
        speedups = [r.result.speedup for r in self.rows if op is None or r.op == op]
        speedups = [s for s in speedups if 0 < s < math.inf]
        if not speedups:
            return None
        return math.exp(sum(math.log(s) for s in speedups) / len(speedups))

    def regressions(self, threshold_pct: float) -> List[Row]:
        return [r for r in self.rows if r.result.verdict == "slower"
                and r.result.change_pct > threshold_pct]


def _passes(results: ResultsFile) -> Dict[PassKey, Tuple[dict, Optional[str]]]:
    """(op, id, pass) -> (record, pass or None): measured passes, plus one None entry for a
    record without any (failed or planned), keyed by pass ``-``."""
    out: Dict[PassKey, Tuple[dict, Optional[str]]] = {}
    for record in results.records:
        op, run_id = run_of(record)
        names = [name for name, _ in measured_passes(record)]
        for name in names:
            out[(op, run_id, name)] = (record, name)
        if not names:
            out[(op, run_id, "-")] = (record, None)
    return out


#: Run options that make times incomparable when they differ between two files.
SETTINGS_KEYS = ("device", "num_threads", "exec_mode", "cuda_graph", "pt2_model",
                 "cuda_l2_cache")


def settings_diff(base: ResultsFile, new: ResultsFile) -> List[str]:
    """How the measuring settings of two results files differ (empty: they agree). A key one
    file does not record (PARAM's files lack some) is not a difference; the ``cuda_*`` keys
    only count on a CUDA device."""
    out = []
    devices = (str(base.run_options.get("device")), str(new.run_options.get("device")))
    on_cuda = any(d.startswith("cuda") for d in devices)
    for key in SETTINGS_KEYS:
        a, b = base.run_options.get(key), new.run_options.get(key)
        if a is None or b is None or (key.startswith("cuda_") and not on_cuda):
            continue
        if a != b:
            out.append(f"{key}: {a!r} in BASE, {b!r} in NEW")
    return out


def _config_diff(a: object, b: object) -> Optional[str]:
    """Which part of two records' configs differs, or None when they are equal."""
    if a == b:
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        parts = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        return "config differs (" + ", ".join(str(p) for p in parts[:4]) + ")"
    return "config differs"


def compare_results(base: ResultsFile, new: ResultsFile, alpha: float = 0.05,
                    resamples: int = 2000, across_settings: bool = False) -> CompareReport:
    base_passes, new_passes = _passes(base), _passes(new)
    report = CompareReport([], [], [], [], [])
    report.settings_diff = settings_diff(base, new)
    settings_block = bool(report.settings_diff) and not across_settings
    new_status = {run_of(r): r.get("status") for r in new.records}
    base_runs = {key[:2] for key in base_passes}
    for key, (base_record, name) in base_passes.items():
        if key[:2] not in new_status:
            report.only_base.append(key)
            continue
        if key not in new_passes:
            # the run is in both files but NEW lacks this pass: failed, or not measured
            failed = name is not None and new_status[key[:2]] == "error"
            target = report.failed_new if failed else report.unmeasured
            target.append(key)
            continue
        new_record, new_name = new_passes[key]
        if name is None or new_name is None:
            report.unmeasured.append(key)
            continue
        why = _config_diff(base_record.get("config"), new_record.get("config"))
        if why is None and settings_block:
            why = "settings differ"
        if why is not None:
            report.mismatched.append((key, why))
            continue
        base_times, new_times = pass_samples(base_record, name), pass_samples(new_record, name)
        if not base_times or not new_times:
            report.unmeasured.append(key)
            continue
        report.rows.append(Row(key[0], key[1], name, len(base_times), len(new_times),
                               compare_samples(base_times, new_times, alpha, resamples)))
    for key in new_passes:
        if key[:2] not in base_runs:
            report.only_new.append(key)
    return report


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


def render(report: CompareReport, base_path: Path, new_path: Path, console,
           max_rows: int = 60, alpha: float = 0.05) -> None:
    from rich.table import Table

    styles = {"faster": "green", "slower": "red", "same": "dim"}
    rows = report.rows
    if len(rows) > max_rows:  # the significant changes first, worst first
        rows = sorted(rows, key=lambda r: (r.result.verdict == "same", -r.result.change_pct))
    table = Table(title=f"{new_path} vs {base_path}", title_justify="left")
    for column, justify in (("op", "left"), ("id", "left"), ("pass", "left"),
                            ("base", "right"), ("new", "right"), ("speedup", "right"),
                            (f"{1 - alpha:.0%} CI", "right"), ("p", "right"),
                            ("", "left")):
        table.add_column(column, justify=justify)
    for row in rows[:max_rows]:
        result = row.result
        verdict = result.verdict
        if verdict == "same" and min(row.base_n, row.new_n) < 4:
            verdict = "n<4"
        style = styles.get(result.verdict, "")
        table.add_row(row.op, row.id, row.pass_name, format_ms(result.base_median),
                      format_ms(result.new_median),
                      f"[{style}]{_speedup(result.speedup)}[/{style}]",
                      _interval(result), f"{result.p_value:.3g}",
                      f"[{style}]{verdict}[/{style}]")
    if rows:
        console.print(table)
    if len(rows) > max_rows:
        console.print(f"... {len(rows) - max_rows} more rows (--max-rows, or --csv for all)")

    ops = list(dict.fromkeys(r.op for r in report.rows))
    if ops:
        summary = Table(title="geometric mean speedup (NEW vs BASE)", title_justify="left")
        for column, justify in (("op", "left"), ("passes", "right"), ("geomean", "right"),
                                ("faster", "right"), ("slower", "right"), ("same", "right")):
            summary.add_column(column, justify=justify)
        for op in ops + [None]:
            mine = [r for r in report.rows if op is None or r.op == op]
            counts = {v: sum(1 for r in mine if r.result.verdict == v)
                      for v in ("faster", "slower", "same")}
            summary.add_row("[bold]overall[/bold]" if op is None else op, str(len(mine)),
                            _speedup(report.geomean(op)), str(counts["faster"]),
                            str(counts["slower"]), str(counts["same"]))
        console.print(summary)
    if report.settings_diff:
        console.print("settings differ: " + "; ".join(report.settings_diff), soft_wrap=True,
                      highlight=False)
    if report.mismatched:
        shown = ", ".join(f"{_key_text(k)}: {why}" for k, why in report.mismatched[:10])
        more = f", ... {len(report.mismatched) - 10} more" if len(report.mismatched) > 10 else ""
        console.print(f"not compared (they measured different things): "
                      f"{len(report.mismatched)}: {shown}{more}", soft_wrap=True,
                      highlight=False)
    for label, keys in (("only in BASE", report.only_base), ("only in NEW", report.only_new),
                        ("failed in NEW (measured in BASE)", report.failed_new),
                        ("not measured in both", report.unmeasured)):
        if keys:
            shown = ", ".join(_key_text(k) for k in keys[:10])
            more = f", ... {len(keys) - 10} more" if len(keys) > 10 else ""
            console.print(f"{label}: {len(keys)}: {shown}{more}", soft_wrap=True,
                          highlight=False)


def write_csv(report: CompareReport, path: Path) -> None:
    with open(path, "w", encoding="utf-8", newline="") as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for row in report.rows:
            result = row.result
            low, high = result.ratio_interval or (None, None)
            writer.writerow([row.op, row.id, row.pass_name, result.base_median,
                             result.new_median, row.base_n, row.new_n, result.speedup,
                             result.change_pct, "" if low is None else low,
                             "" if high is None else high, result.p_value, result.verdict])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m param_compute.compare",
        description="Compare two results files run by run: speedup, significance, geometric "
                    "means; optionally fail on a significant regression.")
    p.add_argument("base", type=Path, help="the baseline results file")
    p.add_argument("new", type=Path, help="the results file to judge")
    p.add_argument("--fail-on-regression", type=float, metavar="PCT",
                   help="exit 1 when a run is significantly slower by more than PCT percent "
                        "(or failed in NEW after being measured in BASE)")
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
    p.add_argument("--max-rows", type=int, default=60,
                   help="table rows to show (default 60; significant changes first when cut)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.alpha < 1:
        print(f"error: --alpha must be between 0 and 1, got {args.alpha}", file=sys.stderr)
        return EXIT_INVALID
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        print("error: --fail-on-regression takes a percentage >= 0", file=sys.stderr)
        return EXIT_INVALID
    try:
        base = read_results_warned(args.base)
        new = read_results_warned(args.new)
    except ResultsFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
    report = compare_results(base, new, args.alpha, max(args.resamples, 0),
                             args.across_settings)
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
    if args.csv is not None:
        try:
            write_csv(report, args.csv)
        except OSError as exc:
            print(f"error: cannot write {args.csv}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_INVALID
        console.print(f"csv: {args.csv}", highlight=False)
    if args.fail_on_regression is not None:
        regressions = report.regressions(args.fail_on_regression)
        if regressions or report.failed_new:
            worst = max(regressions, key=lambda r: r.result.change_pct, default=None)
            parts = []
            if regressions:
                parts.append(f"{len(regressions)} run(s) significantly slower by more than "
                             f"{args.fail_on_regression:g}% (worst {key_of(worst.op, worst.id)} "
                             f"{worst.pass_name}: +{worst.result.change_pct:.1f}%)")
            if report.failed_new:
                parts.append(f"{len(report.failed_new)} run(s) failed in NEW")
            console.print(f"[red]regression[/red]: {'; '.join(parts)}", highlight=False)
            return EXIT_REGRESSION
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

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

The gate fails closed: every pass measured in BASE must be judged in NEW. One that is not gets
one reason word: ``missing`` (no such run in NEW), ``failed`` (an error record), ``status`` (a
status other than ok; a run with the same status in BASE, e.g. failed in both, is judged by its
times), ``unmeasured`` (no measured time, e.g. ``-i 0``), ``non-finite`` (NaN or
infinite times) or ``config`` (another config under the same id). Those runs, a NEW without
run records, files whose settings differ (without ``--across-settings``) and a comparison that
judged nothing all fail ``--fail-on-regression``; without it they are shown all the same.

Both files are read in one pass each, BASE first: memory grows with the number of runs, not
with records or bytes (BASE keeps each pass's sorted times, at most :data:`MAX_KEPT_SAMPLES`;
NEW's are compared as they are read and dropped).

Exit status: 0; 1 with ``--fail-on-regression PCT`` when some run is significantly slower by
more than PCT percent or the gate fails closed as above; 2 when an input is missing or not a
results file, or with ``--strict`` when runs or settings do not match.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import sys
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from param_compute.plan.runkey import key_of
from param_compute.results.fields import run_of
from param_compute.results.file import ResultsFileError, ResultsStream, stream_results
from param_compute.results.significance import Comparison, compare_samples
from param_compute.results.stats import quantile
from param_compute.formatting import format_ms

EXIT_OK, EXIT_REGRESSION, EXIT_INVALID = 0, 1, 2

CSV_COLUMNS = ["op", "id", "pass", "base_median_ms", "new_median_ms", "base_n", "new_n",
               "speedup", "change_pct", "ratio_low", "ratio_high", "p_value", "verdict"]

PassKey = Tuple[str, str, str]  # (op, id, pass); pass "-" for a record without any

#: Why a pass measured in BASE was not judged in NEW (each fails the gate).
MISSING, FAILED, STATUS, UNMEASURED, NON_FINITE, CONFIG = (
    "missing", "failed", "status", "unmeasured", "non-finite", "config")
GATE_REASONS = (MISSING, FAILED, STATUS, UNMEASURED, NON_FINITE, CONFIG)

#: The most measured times kept per BASE pass; a pass with more keeps this many evenly spaced
#: order statistics (its median and spread stay; the test then sees this many values).
MAX_KEPT_SAMPLES = 4096


@dataclass(slots=True)
class Row:
    op: str
    id: str
    pass_name: str
    base_n: int
    new_n: int
    result: Comparison


@dataclass(slots=True)
class GateMiss:
    """A pass measured in BASE and not judged in NEW, and why (one of :data:`GATE_REASONS`)."""

    key: PassKey
    reason: str
    base_median: Optional[float]
    base_n: int
    detail: str = ""


@dataclass
class CompareReport:
    rows: List[Row]
    only_base: List[PassKey]  # in BASE only, and not measured there either
    only_new: List[PassKey]
    failed_new: List[PassKey]  # measured in BASE, an error record in NEW (also in ``gate``)
    unmeasured: List[PassKey]  # in both files, not measured in BASE
    #: Pairs not compared because they measured different things: (key, why).
    mismatched: List[Tuple[PassKey, str]] = field(default_factory=list)
    #: How the two files' settings differ ("device: cpu in BASE, cuda:0 in NEW"...).
    settings_diff: List[str] = field(default_factory=list)
    #: Passes measured in BASE and not judged in NEW, with the reason.
    gate: List[GateMiss] = field(default_factory=list)
    base_records: int = 0
    new_records: int = 0

    def geomean(self, op: Optional[str] = None) -> Optional[float]:
        speedups = [r.result.speedup for r in self.rows if op is None or r.op == op]
        speedups = [s for s in speedups if 0 < s < math.inf]
        if not speedups:
            return None
        return math.exp(sum(math.log(s) for s in speedups) / len(speedups))

    def regressions(self, threshold_pct: float) -> List[Row]:
        return [r for r in self.rows if r.result.verdict == "slower"
                and r.result.change_pct > threshold_pct]

    def gate_counts(self) -> Dict[str, int]:
        """How many passes failed the gate for each reason (in :data:`GATE_REASONS` order)."""
        counts = {reason: 0 for reason in GATE_REASONS}
        for miss in self.gate:
            counts[miss.reason] += 1
        return {reason: n for reason, n in counts.items() if n}

    def gate_failures(self, across_settings: bool = False) -> List[str]:
        """Why ``--fail-on-regression`` fails closed, regressions aside (empty: it holds)."""
        out = []
        if self.gate:
            counts = ", ".join(f"{reason} {n}" for reason, n in self.gate_counts().items())
            out.append(f"{len(self.gate)} run(s) measured in BASE not judged in NEW ({counts})")
        if self.settings_diff and not across_settings:
            out.append("settings differ (" + "; ".join(self.settings_diff)
                       + "; --across-settings to compare anyway)")
        if self.new_records == 0:
            out.append("NEW has no run records")
        if not self.rows and not out:
            out.append("no run measured in both files: nothing was judged")
        return out


# --- reading: one pass per file, per-pass summaries kept ------------------------------------

def _times(entry: Any) -> Tuple[Optional[List[float]], Optional[str]]:
    """(finite times, None), or (None, why not): UNMEASURED or NON_FINITE."""
    values = entry.get("measure.time") if isinstance(entry, dict) else None
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        values = [values]
    if not isinstance(values, list) or not values:
        return None, UNMEASURED
    times = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(times) != len(values) or not all(map(math.isfinite, times)):
        return None, NON_FINITE
    return times, None


def _record_passes(record: Dict[str, Any]) -> List[Tuple[str, Optional[List[float]],
                                                         Optional[str]]]:
    """(pass, times or None, why not measured) of each pass of a record; one ``-`` entry for
    a record without any (a planned run)."""
    metric = record.get("metric")
    names = [name for name, entry in metric.items() if entry is None or isinstance(entry, dict)] \
        if isinstance(metric, dict) else []
    if not names:
        return [("-", None, UNMEASURED)]
    return [(sys.intern(name), *_times(metric[name])) for name in names]


class _Shared:
    """One copy of the small values many runs repeat (pass-name tuples, config key tuples)."""

    def __init__(self) -> None:
        self._values: Dict[Any, Any] = {}

    def __call__(self, value: Any) -> Any:
        return self._values.setdefault(value, value)


def _fingerprint(config: Any, shared: _Shared) -> Tuple[Tuple[str, ...], bytes]:
    """A config's identity in little memory: its top-level keys and an 8-byte digest of each
    part's canonical JSON (enough to say whether two configs are equal, and which part
    differs)."""
    parts = sorted(config.items()) if isinstance(config, dict) else [("", config)]
    digests = b"".join(hashlib.blake2b(json.dumps(value, sort_keys=True, default=str).encode(
        "utf-8", "surrogatepass"), digest_size=8).digest() for _, value in parts)
    return shared(tuple(str(key) for key, _ in parts)), digests


def _fingerprint_diff(a: Tuple[Tuple[str, ...], bytes],
                      b: Tuple[Tuple[str, ...], bytes]) -> Optional[str]:
    """Which part of two records' configs differs, or None when they are equal."""
    if a == b:
        return None
    parts_a = {key: a[1][8 * i:8 * i + 8] for i, key in enumerate(a[0])}
    parts_b = {key: b[1][8 * i:8 * i + 8] for i, key in enumerate(b[0])}
    if "" in parts_a or "" in parts_b:
        return "config differs"
    parts = sorted(k for k in set(parts_a) | set(parts_b) if parts_a.get(k) != parts_b.get(k))
    return "config differs (" + ", ".join(parts[:4]) + ")"


def _kept(times: List[float]) -> Sequence[float]:
    """Sorted times, thinned to :data:`MAX_KEPT_SAMPLES` evenly spaced order statistics."""
    times.sort()
    n = len(times)
    if n > MAX_KEPT_SAMPLES:
        last = MAX_KEPT_SAMPLES - 1
        times = [times[round(i * (n - 1) / last)] for i in range(MAX_KEPT_SAMPLES)]
    return array("d", times)


#: What became of a BASE pass in NEW: a Row, or (kind, detail): kind a gate reason or
#: "mismatch" (settings differ) or "unmeasured" (not measured in BASE).
_Outcome = Any


@dataclass(slots=True)
class _BaseRun:
    """What compare keeps of one BASE run: its config's fingerprint, status, each pass's
    sorted times (None: not measured) and, once NEW is read, each pass's outcome."""

    config: Tuple[Tuple[str, ...], bytes]
    status: str
    names: Tuple[str, ...]
    times: Tuple[Optional[Sequence[float]], ...]
    outcomes: Optional[List[_Outcome]] = None  # None: the run is not in NEW

    def median(self, index: int) -> Optional[float]:
        times = self.times[index]
        return quantile(times, 0.5) if times else None


def _read_base(stream: ResultsStream, shared: _Shared) -> Dict[Tuple[str, str], _BaseRun]:
    """BASE's runs (a later record of the same run replaces an earlier one)."""
    runs: Dict[Tuple[str, str], _BaseRun] = {}
    for _, record in stream:
        op, run_id = run_of(record)
        passes = _record_passes(record)
        runs[(sys.intern(op), run_id)] = _BaseRun(
            _fingerprint(record.get("config"), shared),
            sys.intern(str(record.get("status"))[:40]),
            shared(tuple(name for name, _, _ in passes)),
            tuple(_kept(times) if times else None for _, times, _ in passes))
    return runs


def _judge(base: _BaseRun, index: int, status: str, passes: Dict[str, Tuple[Any, Any]],
           config: Tuple[Tuple[str, ...], bytes], settings_block: bool, alpha: float,
           resamples: int, key: PassKey) -> _Outcome:
    """The outcome of BASE pass ``index`` against NEW's record of the run (``passes``: name ->
    (times, why not measured))."""
    base_times = base.times[index]
    if base_times is None:
        return ("unmeasured", "")
    if status != "ok" and status != base.status:  # a run that failed in BASE too is judged
        return (FAILED, "") if status == "error" else (STATUS, f"status {status!r}")
    if key[2] not in passes:
        return (UNMEASURED, "no such pass in NEW")
    times, why = passes[key[2]]
    if times is None:
        return (why, "")
    mismatch = _fingerprint_diff(base.config, config)
    if mismatch is not None:
        return (CONFIG, mismatch)
    if settings_block:
        return ("mismatch", "settings differ")
    return Row(key[0], key[1], key[2], len(base_times), len(times),
               compare_samples(base_times, times, alpha, resamples))


def settings_diff(base: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
    """How the measuring settings of two results files (their ``run_options``) differ (empty:
    they agree). A key one file does not record (PARAM's files lack some) is not a difference;
    the ``cuda_*`` keys only count on a CUDA device."""
    out = []
    devices = (str(base.get("device")), str(new.get("device")))
    on_cuda = any(d.startswith("cuda") for d in devices)
    for key in SETTINGS_KEYS:
        a, b = base.get(key), new.get(key)
        if a is None or b is None or (key.startswith("cuda_") and not on_cuda):
            continue
        if a != b:
            out.append(f"{key}: {a!r} in BASE, {b!r} in NEW")
    return out


#: Run options that make times incomparable when they differ between two files.
SETTINGS_KEYS = ("device", "num_threads", "exec_mode", "cuda_graph", "pt2_model",
                 "cuda_l2_cache")


def compare_streams(base: ResultsStream, new: ResultsStream, alpha: float = 0.05,
                    resamples: int = 2000, across_settings: bool = False) -> CompareReport:
    """Compare two results files, each read once: BASE first (its runs kept as
    :class:`_BaseRun`), then NEW record by record, each judged as it is read and its times
    dropped. A later record of a run in NEW replaces an earlier one (appended files)."""
    report = CompareReport([], [], [], [], [])
    report.settings_diff = settings_diff(base.run_options, new.run_options)
    settings_block = bool(report.settings_diff) and not across_settings
    shared = _Shared()
    base_runs = _read_base(base, shared)
    report.base_records = base.records_read
    only_new: Dict[PassKey, None] = {}
    for _, record in new:
        op, run_id = run_of(record)
        status = str(record.get("status"))[:40]
        passes = {name: (times, why) for name, times, why in _record_passes(record)}
        run = base_runs.get((op, run_id))
        for name in passes:
            if run is None or name not in run.names:
                only_new[(op, run_id, name)] = None
        if run is None:
            continue
        config = _fingerprint(record.get("config"), shared)
        run.outcomes = [_judge(run, index, status, passes, config, settings_block, alpha,
                               resamples, (op, run_id, name))
                        for index, name in enumerate(run.names)]
    report.new_records = new.records_read

    for (op, run_id), run in base_runs.items():
        for index, name in enumerate(run.names):
            key = (op, run_id, name)
            if run.times[index] is None:  # not measured in BASE: nothing to judge
                (report.only_base if run.outcomes is None else report.unmeasured).append(key)
                continue
            outcome = (MISSING, "") if run.outcomes is None else run.outcomes[index]
            if isinstance(outcome, Row):
                report.rows.append(outcome)
                continue
            kind, detail = outcome
            if kind == "mismatch" or kind == CONFIG:
                report.mismatched.append((key, detail))
            if kind == "mismatch":
                continue
            report.gate.append(GateMiss(key, kind, run.median(index), len(run.times[index]),
                                        detail))
            if kind == FAILED:
                report.failed_new.append(key)
    report.only_new = list(only_new)
    return report


def compare_files(base_path: Path, new_path: Path, alpha: float = 0.05, resamples: int = 2000,
                  across_settings: bool = False, warn: bool = True) -> CompareReport:
    """:func:`compare_streams` of two results files (``ResultsFileError`` if either is not
    one; unusable lines warned on stderr as they are met)."""
    base = stream_results(base_path, warn)
    new = stream_results(new_path, warn)
    return compare_streams(base, new, alpha, resamples, across_settings)


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
        console.print(f"{label}: {len(items)}: {', '.join(items[:10])}{more}", soft_wrap=True,
                      highlight=False)


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
            summary.add_row("[bold]overall[/bold]" if op is None else op,
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
            gate.add_row(miss.key[0], miss.key[1], miss.key[2], format_ms(miss.base_median),
                         f"[red]{miss.reason}[/red]", miss.detail)
        console.print(gate)
        if len(report.gate) > max_rows:
            console.print(f"... {len(report.gate) - max_rows} more (--csv lists them all)")
        console.print("not judged: " + ", ".join(f"{reason} {n}" for reason, n
                                                 in report.gate_counts().items()),
                      highlight=False)
    if report.settings_diff:
        console.print("settings differ: " + "; ".join(report.settings_diff), soft_wrap=True,
                      highlight=False)
    if report.new_records == 0:
        console.print("NEW has no run records", highlight=False)
    _listed(console, "not compared (they measured different things)",
            [f"{_key_text(k)}: {why}" for k, why in report.mismatched])
    for label, keys in (("only in BASE (not measured there)", report.only_base),
                        ("only in NEW", report.only_new),
                        ("not measured in BASE", report.unmeasured)):
        _listed(console, label, [_key_text(k) for k in keys])


def write_csv(report: CompareReport, path: Path) -> None:
    """Every compared row, then every pass that failed the gate (its reason as the verdict)."""
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
        for miss in report.gate:
            writer.writerow([*miss.key, miss.base_median, "", miss.base_n, "", "", "", "", "",
                             "", miss.reason])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m param_compute.compare",
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
    p.add_argument("--max-rows", type=int, default=60,
                   help="table rows to show (default 60; significant changes first when cut)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.alpha < 1:
        print(f"error: --alpha must be between 0 and 1, got {args.alpha}", file=sys.stderr)
        return EXIT_INVALID
    if args.fail_on_regression is not None and not (0 <= args.fail_on_regression < math.inf):
        print("error: --fail-on-regression takes a percentage >= 0", file=sys.stderr)
        return EXIT_INVALID
    try:
        report = compare_files(args.base, args.new, args.alpha, max(args.resamples, 0),
                               args.across_settings)
    except ResultsFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
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
        parts = []
        if regressions:
            worst = max(regressions, key=lambda r: r.result.change_pct)
            parts.append(f"{len(regressions)} run(s) significantly slower by more than "
                         f"{args.fail_on_regression:g}% (worst {key_of(worst.op, worst.id)} "
                         f"{worst.pass_name}: +{worst.result.change_pct:.1f}%)")
        parts.extend(report.gate_failures(args.across_settings))
        if parts:
            console.print(f"[red]regression gate failed[/red]: {'; '.join(parts)}",
                          highlight=False, soft_wrap=True)
            return EXIT_REGRESSION
        console.print("regression gate passed", highlight=False)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

"""What ``ncu_report`` and ``nsys_report`` share: the profiler batch records of a results file,
the per-iteration NVTX range names, and kernel statistics joined back to run ids.

A ``--ncu``/``--nsys`` run writes one record per profiled batch between its run records
(``{"ncu_file": ..., "ncu_cmd_str": ..., "config": ..., "start_run_id": ..., "end_run_id": ...,
"status": ...}``). In the profiled child every measured iteration is an NVTX range
``param_compute|OP|ID|iteration|PASS``; a kernel launched inside one belongs to that run and pass.
"""

from __future__ import annotations

import csv
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from param_compute.errors import OptionsError
from param_compute.formatting import cell
from param_compute.plan.runkey import RunKeyError, RunKey, key_of
from param_compute.results.file import ResultsFileError, read_results_warned

EXIT_OK, EXIT_PROBLEMS, EXIT_INVALID = 0, 1, 2

#: An iteration range name: op, run id (config|build|input) and pass.
ITERATION_RANGE = re.compile(
    r"param_compute\|(?P<op>[^|]+)\|(?P<id>[^|]+\|[^|]+\|[^|]+)\|iteration\|"
    r"(?P<pass>forward|backward)")

RunPass = Tuple[str, str, str]  # (op, run id, pass)

_TIME_TO_NS = {"ns": 1.0, "nsecond": 1.0, "nsec": 1.0, "us": 1e3, "usecond": 1e3, "usec": 1e3,
               "ms": 1e6, "msecond": 1e6, "msec": 1e6, "s": 1e9, "second": 1e9, "sec": 1e9}


def parse_iteration_range(text: str) -> Optional[RunPass]:
    """(op, run id, pass) of the first iteration range named in ``text``, else None."""
    match = ITERATION_RANGE.search(text or "")
    return (match["op"], match["id"], match["pass"]) if match else None


def to_ns(value: float, unit: str) -> Optional[float]:
    factor = _TIME_TO_NS.get((unit or "").strip().lower())
    return None if factor is None else value * factor


def number(text: Any) -> Optional[float]:
    """A metric cell as a float (``"1,234.5"`` too), None if it is not a number."""
    if isinstance(text, (int, float)):
        return float(text)
    try:
        value = float(str(text).replace(",", "").strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclass
class BatchRecord:
    """One profiled batch of a results file."""

    kind: str  # "ncu" or "nsys"
    recorded_file: str
    file: Path  # where the profile is found now (see ``locate``)
    status: str
    error: Optional[str]
    op_name: Optional[str]
    start_run_id: Optional[str]
    end_run_id: Optional[str]
    run_ids: List[str]
    iterations: Optional[int]
    command: str

    @property
    def label(self) -> str:
        return f"{self.kind} batch {key_of(self.op_name, self.start_run_id)} .. {self.end_run_id}"


def locate(recorded: str, results: Path) -> Path:
    """A profile named in a results file: as recorded (relative to the current directory), else
    beside the results file (the run was made elsewhere and both files moved together)."""
    path = Path(recorded)
    if path.exists():
        return path
    beside = results.parent / path.name
    return beside if beside.exists() else path


def _batch_record(kind: str, line: Dict[str, Any], results: Path) -> BatchRecord:
    config = line.get("config") if isinstance(line.get("config"), dict) else {}
    run_ids: List[str] = []
    op_info = config.get("op_info") if isinstance(config.get("op_info"), dict) else {}
    entries = op_info.get("config") if isinstance(op_info.get("config"), list) else []
    build_id = config.get("config_build_id")
    op_name = str(config.get("op_name") or "?")
    for entry in entries[:1]:
        for item in (entry.get("input") or []) if isinstance(entry, dict) else []:
            if isinstance(item, dict) and "id" in item and build_id is not None:
                try:
                    run_ids.append(RunKey.from_config_build(op_name, build_id, item["id"]).id)
                except RunKeyError:  # not an id this tool can join: left out
                    continue
    options = config.get("run_options") if isinstance(config.get("run_options"), dict) else {}
    iterations = options.get("iteration")
    recorded = str(line.get(f"{kind}_file"))
    status = line.get("status") or ("ok" if line.get("exit_status") in (0, None) else "error")
    return BatchRecord(kind, recorded, locate(recorded, results), status, line.get("error"),
                       config.get("op_name"), line.get("start_run_id"), line.get("end_run_id"),
                       run_ids, iterations if isinstance(iterations, int) else None,
                       str(line.get(f"{kind}_cmd_str") or ""))


def read_batch_records(results: Path, kind: str) -> List[BatchRecord]:
    """The ``kind`` batch lines of a results file, in order (read with ``results.file``;
    damaged lines are printed as warnings). Raises ``ResultsFileError``."""
    read = read_results_warned(results)
    return [_batch_record(kind, value, read.path) for _, value in read.batches
            if f"{kind}_file" in value]


@dataclass
class KernelStats:
    """The launches of one kernel inside the iterations of one run and pass."""

    op: str
    run_id: str
    pass_name: str
    kernel: str
    launches: int = 0
    durations_ns: List[float] = field(default_factory=list)
    metrics: Dict[str, List[float]] = field(default_factory=dict)
    units: Dict[str, str] = field(default_factory=dict)

    def add(self, duration_ns: Optional[float], metrics: Dict[str, Tuple[str, Optional[float]]]
            ) -> None:
        self.launches += 1
        if duration_ns is not None:
            self.durations_ns.append(duration_ns)
        for name, (unit, value) in metrics.items():
            if value is not None:
                self.metrics.setdefault(name, []).append(value)
                self.units.setdefault(name, unit)

    @property
    def mean_duration_ns(self) -> Optional[float]:
        return sum(self.durations_ns) / len(self.durations_ns) if self.durations_ns else None

    def mean(self, metric: str) -> Optional[float]:
        values = self.metrics.get(metric)
        return sum(values) / len(values) if values else None


class KernelTable:
    """Kernel statistics by (op, run id, pass, kernel), in order of first appearance."""

    def __init__(self) -> None:
        self.rows: Dict[Tuple[str, str, str, str], KernelStats] = {}
        self.unattributed = 0  # launches outside every iteration range
        self.metric_names: List[str] = []

    def add(self, where: Optional[RunPass], kernel: str, duration_ns: Optional[float],
            metrics: Optional[Dict[str, Tuple[str, Optional[float]]]] = None) -> None:
        if where is None:
            self.unattributed += 1
            return
        key = (*where, kernel)
        stats = self.rows.get(key)
        if stats is None:
            stats = self.rows[key] = KernelStats(*key)
        stats.add(duration_ns, metrics or {})
        for name in metrics or {}:
            if name not in self.metric_names:
                self.metric_names.append(name)

    def runs(self) -> List[RunPass]:
        seen: Dict[RunPass, None] = {}
        for stats in self.rows.values():
            seen.setdefault((stats.op, stats.run_id, stats.pass_name), None)
        return list(seen)


def _duration(ns: Optional[float]) -> str:
    if ns is None:
        return "-"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.0f} ns"


def _value(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4g}"


def _short(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[:width - 1] + "…"


def render(table: KernelTable, console, title: str, max_rows: int = 200) -> None:
    """The joined kernels as one rich table (per run, pass and kernel)."""
    from rich.table import Table

    out = Table(title=title, title_justify="left")
    for column, justify in (("op", "left"), ("id", "left"), ("pass", "left"),
                            ("kernel", "left"), ("launches", "right"), ("duration", "right")):
        out.add_column(column, justify=justify)
    for name in table.metric_names:
        unit = next((s.units[name] for s in table.rows.values() if name in s.units), "")
        out.add_column(f"{name} ({unit})" if unit else name, justify="right")
    for index, stats in enumerate(table.rows.values()):
        if index >= max_rows:
            break
        out.add_row(cell(stats.op), cell(stats.run_id), cell(stats.pass_name),
                    cell(_short(stats.kernel)),
                    str(stats.launches), _duration(stats.mean_duration_ns),
                    *[_value(stats.mean(name)) for name in table.metric_names])
    console.print(out)
    if len(table.rows) > max_rows:
        console.print(f"... {len(table.rows) - max_rows} more rows (--max-rows, or --csv for all)")


def write_csv(table: KernelTable, path: Path) -> None:
    """Every row: op, id, pass, kernel, launches, mean and total duration (ns), metric means."""
    from param_compute.files import open_output

    with open_output("--csv", path) as stream:  # never through a link (OptionsError)
        writer = csv.writer(stream)
        writer.writerow(["op", "id", "pass", "kernel", "launches", "duration_ns_mean",
                         "duration_ns_total", *table.metric_names])
        for stats in table.rows.values():
            mean = stats.mean_duration_ns
            writer.writerow([stats.op, stats.run_id, stats.pass_name, stats.kernel,
                             stats.launches, "" if mean is None else f"{mean:.6g}",
                             f"{sum(stats.durations_ns):.6g}" if stats.durations_ns else "",
                             *["" if stats.mean(n) is None else f"{stats.mean(n):.6g}"
                               for n in table.metric_names]])


def missing_runs(batches: Sequence[BatchRecord], table: KernelTable) -> List[str]:
    """Run ids of successful batches that got no kernel at all (a CPU run, a filter that
    matched nothing...)."""
    joined = {(op, run_id) for op, run_id, _ in table.runs()}
    return [key_of(b.op_name, run_id) for b in batches if b.status == "ok"
            for run_id in b.run_ids if (b.op_name, run_id) not in joined]


def summary_lines(batches: Sequence[BatchRecord], table: KernelTable,
                  problems: Iterable[str]) -> List[str]:
    launches = sum(s.launches for s in table.rows.values())
    lines = [f"{len(batches)} batches, {launches} kernel launches joined to "
             f"{len(table.runs())} run passes"]
    if table.unattributed:
        lines.append(f"{table.unattributed} launches outside any iteration range (not joined)")
    missing = missing_runs(batches, table)
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        lines.append(f"{len(missing)} profiled runs without kernels: {shown}")
    lines.extend(problems)
    return lines


def run_report(results: Path, kind: str, join_batch: Callable[[BatchRecord, KernelTable,
                                                                List[str]], None],
               csv_path: Optional[Path], max_rows: int, quiet: bool = False) -> int:
    """The common body of the ncu and nsys reports.

    Reads the ``kind`` batch records of ``results``, lets ``join_batch`` add each batch's
    kernels to one table (noting problems), prints the table and a summary (``quiet``: the
    problems alone, on standard error), optionally writes CSV. Exit status: 0, 1 when a batch
    had a problem, 2 for unusable input.
    """
    try:
        batches = read_batch_records(results, kind)
    except ResultsFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if not batches:
        print(f"error: {results} holds no {kind} batch records (was it run with --{kind}?)",
              file=sys.stderr)
        return EXIT_INVALID
    table = KernelTable()
    problems: List[str] = []
    for batch in batches:
        if batch.status != "ok":
            problems.append(f"{batch.label}: failed ({batch.error or 'no reason recorded'})")
        join_batch(batch, table, problems)
    from param_compute import terminal

    console = terminal.console(quiet=quiet)
    if table.rows:
        render(table, console, f"{kind} kernels per run: {results}", max_rows)
    for line in summary_lines(batches, table, problems):
        console.print(line, highlight=False)
    for problem in problems if quiet else ():
        print(f"warning: {problem}", file=sys.stderr)
    if csv_path is not None:
        try:
            write_csv(table, csv_path)
        except OptionsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_INVALID
        except OSError as exc:
            print(f"error: cannot write {csv_path}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_INVALID
        console.print(f"csv: {csv_path}", highlight=False)
    return EXIT_PROBLEMS if problems else EXIT_OK

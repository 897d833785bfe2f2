"""Console output: a rich progress bar (when stderr is a terminal) and the summary table."""

from __future__ import annotations

import sys
from typing import List, Optional

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.table import Table

from param_compute.results.sinks.base import RecordSink, RunSummary
from param_compute.plan.runplan import PlannedRun
from param_compute.plan.runkey import key_of
from param_compute.results.records import STATUS_OK, RunRecord
from param_compute.results.stats import MIN_TRUSTED_N, is_noisy
from param_compute.results.utilization import percent_of_peak
from param_compute.results.workload_totals import WorkloadTotals
from param_compute.formatting import format_ms

#: The summary table shows at most this many runs (memory stays flat for huge runs).
SUMMARY_ROWS = 40


def _rate(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}"




class ConsoleReporter(RecordSink):
    """Progress while running, then one summary table of measured runs and failures."""

    def __init__(self, results_path: Optional[str] = None, progress: Optional[bool] = None,
                 console: Optional[Console] = None):
        # Off a terminal (a log, a pipe), wide enough for every column rather than 80 characters.
        self.console = console or Console(stderr=True,
                                          width=None if sys.stderr.isatty() else 200)
        self.show_progress = sys.stderr.isatty() if progress is None else progress
        self.results_path = results_path
        self.rows: List[RunRecord] = []
        self.hidden_rows = 0
        self.too_few = 0  # runs with a pass of fewer than MIN_TRUSTED_N measured values
        self.workload = WorkloadTotals()  # records with a count: a captured workload
        self.progress: Optional[Progress] = None
        self.task = None

    def start(self, total: Optional[int]) -> None:
        if not self.show_progress:
            return
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 TimeRemainingColumn(), console=self.console, transient=True)
        self.progress.start()
        self.task = self.progress.add_task("starting", total=total)

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        if self.progress is not None:
            self.progress.update(self.task, advance=1, description=f"{run.op_name} {run.id}")
        if record is None:
            return
        self.workload.add(record)
        self.too_few += any(0 < len(p.measure_ms) < MIN_TRUSTED_N for p in record.passes)
        if len(self.rows) < SUMMARY_ROWS:
            self.rows.append(record)
        else:
            self.hidden_rows += 1

    def finish(self, summary: RunSummary) -> None:
        if self.progress is not None:
            self.progress.stop()
        table = Table(title="param_compute results", title_justify="left")
        for column, justify in (("op", "left"), ("id", "left"), ("pass", "left"),
                                ("median", "right"), ("95% CI", "right"),
                                ("p10 – p90", "right"), ("n", "right"),
                                ("TFLOP/s", "right"), ("GB/s", "right"), ("% peak", "right")):
            names = [r.op_name for r in self.rows] if column == "op" else (
                [r.id for r in self.rows] if column == "id" else None)
            if names:  # run names are never cut short; the numbers wrap instead
                table.add_column(column, justify=justify, no_wrap=True,
                                 min_width=min(40, max(len(str(n)) for n in names)))
            else:
                table.add_column(column, justify=justify)
        for record in self.rows:
            if record.status != STATUS_OK:
                table.add_row(record.op_name, record.id, "-", f"[red]{record.status}[/red]",
                              record.error.message[:60] if record.error else "", "")
                continue
            stats_by_pass = record.stats()
            for measured in record.passes:
                stats = stats_by_pass[measured.name]
                if stats is None:
                    continue
                rates = measured.throughput(stats["median"]) or {}
                noisy = " [yellow]noisy[/yellow]" if is_noisy(stats) else ""
                table.add_row(record.op_name, record.id, measured.name,
                              format_ms(stats["median"]) + noisy,
                              f"±{stats['ci_rel_width'] / 2:.1%}",
                              f"{format_ms(stats['p10'])} – {format_ms(stats['p90'])}",
                              str(stats["n"]),
                              _rate(rates.get("tflops_per_s")), _rate(rates.get("gb_per_s")),
                              percent_of_peak(rates))
        if self.rows:
            self.console.print(table)
        if self.hidden_rows:
            self.console.print(f"... {self.hidden_rows} more runs in the results file")
        if self.workload.configs or self.workload.failed_configs:
            print_workload_totals(self.console, self.workload)
        parts = [f"{summary.ok} measured"]
        if summary.dry_run:
            parts.append(f"{summary.dry_run} planned (dry run)")
        if summary.failed:
            parts.append(f"[red]{len(summary.failed)} failed[/red]")
        if summary.skipped:
            parts.append(f"{summary.skipped} skipped")
        self.console.print(", ".join(parts))
        if self.too_few:
            self.console.print(
                f"[yellow]{self.too_few} run(s) have fewer than {MIN_TRUSTED_N} measured values: "
                "too few to trust[/yellow] (recommended: --warmup-time 0.2 --min-time 0.5)",
                soft_wrap=True, highlight=False)
        for note in getattr(summary, "notes", ()):  # what other sinks declared
            self.console.print(note, soft_wrap=True, highlight=False)
        for record in summary.failed[:SUMMARY_ROWS]:
            self.console.print(f"  [red]failed[/red] {key_of(record.op_name, record.id)} "
                               f"({record.error.phase}): {record.error.type}: "
                               f"{record.error.message}", soft_wrap=True, highlight=False)
        if self.results_path:
            self.console.print(f"results: {self.results_path}", soft_wrap=True, highlight=False)


def print_workload_totals(console: Console, totals: WorkloadTotals, top_ops: int = 10) -> None:
    """Where a captured workload's time goes: configs by median x count, operators by share."""
    configs = Table(title="where the time goes: largest configs (median × count)",
                    title_justify="left")
    for column, justify in (("op", "left"), ("id", "left"), ("median", "right"),
                            ("count", "right"), ("total", "right"), ("share", "right")):
        configs.add_column(column, justify=justify)
    for op, run_id, median, count, total in totals.top_configs():
        configs.add_row(op, run_id, format_ms(median), str(count), format_ms(total),
                        f"{totals.share(total):.1%}")
    ops = Table(title="top operators by total time", title_justify="left")
    for column, justify in (("op", "left"), ("configs", "right"), ("calls", "right"),
                            ("total", "right"), ("share", "right")):
        ops.add_column(column, justify=justify)
    for op in totals.top_ops(top_ops):
        ops.add_row(op.op_name, str(op.configs), str(op.calls), format_ms(op.total_ms),
                    f"{totals.share(op.total_ms):.1%}")
    if totals.configs:
        console.print(configs)
        console.print(ops)
    line = (f"replayed workload: {format_ms(totals.total_ms)} (Σ median × count) over "
            f"{totals.calls} "
            f"calls in {totals.configs} configs")
    if totals.failed_configs:
        line += (f"; [red]{totals.failed_configs} configs ({totals.failed_calls} calls) not "
                 "measured[/red]")
    console.print(line, soft_wrap=True, highlight=False)

"""Console output: progress (a rich bar on a terminal, INFO log lines elsewhere) and the summary
table.

The table, the counts, the failed runs and the other sinks' summary lines are results: standard
output. Progress, the results file's name and warnings (too few values, disturbed runs) go to
standard error. Both are as wide as ``terminal.width`` says (``COLUMNS``, else the terminal's,
else 120), and no line printed on standard output is wider. ``quiet``: no progress, no table, no
counts; failed runs and warnings only (standard error).

The table shows each run's config (``results.config_label``) and fits the console's width: at
120 columns and less the p10–p90 and rate columns go, at 100 and less the id too, and the config
column takes what is left (cut with ``…``); rows never wrap. ``max_rows`` bounds the rows shown
(memory stays flat for huge runs: with ``sort`` only the first ``max_rows`` by that column are
kept, in a heap); ``None`` shows them all.
"""

from __future__ import annotations

import heapq
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from rich.console import Console
from rich.table import Table
from rich.text import Text

from param_compute.plan.summary import config_label
from param_compute.results.sinks.base import RecordSink, RunSummary
from param_compute.plan.runplan import PlannedRun
from param_compute.plan.runkey import key_of
from param_compute.results.records import STATUS_DRY_RUN, STATUS_OK, RunRecord
from param_compute.results.stats import DISTURBED_FRACTION, MIN_TRUSTED_N, is_noisy
from param_compute.results.utilization import percent_of_peak
from param_compute.results.totals import WorkloadTotals
from param_compute.formatting import cell, format_ms
from param_compute import terminal

if TYPE_CHECKING:
    from rich.progress import Progress

log = logging.getLogger("param_compute")

#: The summary table shows at most this many runs by default (``--max-rows N|all``).
SUMMARY_ROWS = 40
#: Off a terminal, a progress line at most this often (seconds), at INFO.
PROGRESS_EVERY_S = 10.0

#: ``--sort`` columns: how a record sorts (larger first for numbers, A-Z for text).
SORT_COLUMNS = ("median", "op", "id", "config", "n", "tflops", "gbps")


def max_rows(text: str) -> Optional[int]:
    """``--max-rows``: a number of rows >= 0, or ``all`` (None)."""
    if text == "all":
        return None
    if not text.isdigit():
        import argparse

        raise argparse.ArgumentTypeError(f"expected a number of rows >= 0 or 'all', got {text!r}")
    return int(text)


def protocol_advice(protocol: str, warmup: int, iteration: int, warmup_time: float,
                    min_time: float) -> str:
    """What to do about runs with too few values, given the protocol they ran with."""
    if min_time:
        used = " ".join(f"--{flag} {value:g}" for flag, value in (
            ("warmup-time", warmup_time), ("min-time", min_time)) if value)
        return f"they ran with {used}: a longer --min-time gives more"
    if protocol == "param":
        return (f"they ran with PARAM's counts, -w {warmup} -i {iteration}: without -w/-i "
                "the default protocol measures by time until the median is sure")
    return "the protocol's time cap ended them: a larger --max-time gives more"


def _rate(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}"


def _first_stats(record: RunRecord) -> Tuple[Optional[Dict[str, float]], Dict[str, Any]]:
    """The first measured pass's statistics and rates (what a sort looks at)."""
    stats_by_pass = record.stats() if record.passes else {}
    for measured in record.passes:
        stats = stats_by_pass.get(measured.name)
        if stats is not None:
            return stats, measured.throughput(stats["median"]) or {}
    return None, {}


def sort_key(column: str) -> Callable[[RunRecord], Any]:
    """A key for ``heapq``/``sorted`` that puts the record a reader wants first lowest."""
    if column in ("op", "id"):
        return lambda r: (r.op_name, r.id) if column == "op" else r.id
    if column == "config":
        return lambda r: config_label(r.config)

    def numeric(record: RunRecord) -> float:
        stats, rates = _first_stats(record)
        value = {"median": (stats or {}).get("median"), "n": (stats or {}).get("n"),
                 "tflops": rates.get("tflops_per_s"), "gbps": rates.get("gb_per_s")}[column]
        return -value if value is not None else float("inf")  # largest first, unmeasured last

    return numeric


#: (column, justify, the narrowest console that still shows it)
_COLUMNS = (("op", "left", 0), ("id", "left", 101), ("config", "left", 0), ("pass", "left", 0),
            ("median", "right", 0), ("95% CI", "right", 0), ("p10 – p90", "right", 121),
            ("n", "right", 0), ("TFLOP/s", "right", 121), ("GB/s", "right", 121),
            ("% peak", "right", 81))


class ConsoleReporter(RecordSink):
    """Progress while running, then one summary table of measured runs and failures."""

    def __init__(self, results_path: Optional[str] = None, progress: Optional[bool] = None,
                 console: Optional[Console] = None, max_rows: Optional[int] = SUMMARY_ROWS,
                 sort: Optional[str] = None, protocol: Optional[str] = None,
                 errors: Optional[Console] = None, quiet: bool = False):
        #: Results (standard output); ``errors``: progress and warnings (standard error). A
        #: ``console`` given alone takes both.
        self.console = console or terminal.console(quiet=quiet)
        self.errors = errors or console or terminal.console(stderr=True)
        self.quiet = quiet
        if quiet:
            progress = False
        self.show_progress = self.errors.is_terminal if progress is None else progress
        #: Off a terminal (and not asked to be quiet): progress as INFO log lines.
        self.log_progress = progress is None and not self.show_progress
        self.results_path = results_path
        #: What to do about runs with too few values, for the protocol the run used
        #: (``protocol_advice``).
        self.protocol = protocol
        self.max_rows = max_rows
        self.sort = sort
        self._key = sort_key(sort) if sort else None
        self._kept: List[Tuple[Any, int, RunRecord]] = []  # (key, order, record); a heap by -key
        self.seen = 0
        self.too_few = 0  # runs with a pass of fewer than MIN_TRUSTED_N measured values
        self.disturbed = 0  # runs descheduled too often or measured while the canary drifted
        self.workload = WorkloadTotals()  # records with a count: a captured workload
        self.progress: Optional[Progress] = None
        self.task = None
        self.total: Optional[int] = None
        self.done = 0
        self._started = self._last_line = time.monotonic()
        self._logged = False

    @property
    def rows(self) -> List[RunRecord]:
        """The records the table shows, in table order."""
        if self._key is not None and self.max_rows is not None:  # the heap: best key last
            ordered = sorted(self._kept, key=lambda kept: kept[:2], reverse=True)
        else:
            ordered = sorted(self._kept, key=lambda kept: kept[:2])
        return [record for _, _, record in ordered]

    @property
    def hidden_rows(self) -> int:
        return self.seen - len(self._kept)

    def start(self, total: Optional[int]) -> None:
        self.total = total
        if not self.show_progress:
            return
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)  # a bar's only

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 TimeRemainingColumn(), console=self.errors, transient=True)
        self.progress.start()
        self.task = self.progress.add_task("starting", total=total)

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress.update(self.task, advance=1, description=self._describe(run))
        elif self.log_progress:
            self._progress_line(run)
        if record is None:
            return
        if record.count is not None:  # a captured config's: part of a workload
            self.workload.add(record)
        if record.passes:  # a planned or failed-before-measuring run has no statistics
            self.too_few += any(0 < (stats or {}).get("n", 0) < MIN_TRUSTED_N
                                for stats in record.stats().values())
        self.disturbed += record.status == STATUS_OK and record.disturbed()
        self._keep(record)

    def _describe(self, run: PlannedRun) -> str:
        return f"{run.op_name} {run.id} {config_label(run.config(), 40)}".rstrip()

    def _progress_line(self, run: PlannedRun) -> None:
        now = time.monotonic()
        last = self.done == self.total and self._logged  # the end, once progress was shown
        if now - self._last_line < PROGRESS_EVERY_S and not last:
            return  # a short run shows no progress lines at all
        self._last_line, self._logged = now, True
        elapsed = now - self._started
        of = f"/{self.total}" if self.total else ""
        left = (f", about {elapsed / self.done * (self.total - self.done):.0f} s left"
                if self.total else "")
        log.info("progress: %d%s runs in %.0f s%s (now %s)", self.done, of, elapsed, left,
                 self._describe(run))

    def _keep(self, record: RunRecord) -> None:
        order = self.seen
        self.seen += 1
        if self.max_rows is None:
            self._kept.append((self._key(record) if self._key else order, order, record))
            return
        if self._key is None:  # run order: the first max_rows
            if len(self._kept) < self.max_rows:
                self._kept.append((order, order, record))
            return
        entry = (_Reverse(self._key(record)), -order, record)  # heap top: the worst kept
        if len(self._kept) < self.max_rows:
            heapq.heappush(self._kept, entry)
        elif entry[:2] > self._kept[0][:2]:
            heapq.heapreplace(self._kept, entry)

    def finish(self, summary: RunSummary) -> None:
        if self.progress is not None:
            self.progress.stop()
        out = self.console
        if not self.quiet:
            rows = self.rows
            if rows:
                out.print(self._table(rows))
            if self.hidden_rows:
                out.print(f"... {self.hidden_rows} more runs in the results file "
                          "(--max-rows all shows every one)")
            if self.workload.configs or self.workload.failed_configs:
                print_workload_totals(out, self.workload)
            parts = [f"{summary.ok} measured"]
            if summary.dry_run:
                parts.append(f"{summary.dry_run} planned (dry run)")
            if summary.failed:
                parts.append(f"[red]{len(summary.failed)} failed[/red]")
            if summary.skipped:
                parts.append(f"{summary.skipped} skipped")
            out.print(", ".join(parts))
            for note in getattr(summary, "notes", ()):  # what other sinks declared
                out.print(note, highlight=False)
        if self.too_few:
            advice = self.protocol or "without -w/-i the default protocol measures by time"
            self.errors.print(
                f"[yellow]{self.too_few} run(s) have fewer than {MIN_TRUSTED_N} measured values: "
                f"too few to trust[/yellow] ({advice})", soft_wrap=True, highlight=False)
        if self.disturbed:
            self.errors.print(
                f"[yellow]{self.disturbed} run(s) disturbed[/yellow]: over "
                f"{DISTURBED_FRACTION:.0%} of their samples waited for a core, or the canary "
                "drifted around them (the record's disturbed, stats.PASS.descheduled, "
                "canary_drift); a quieter machine, --timer cpu or --discard-disturbed",
                soft_wrap=True, highlight=False)
        for record in summary.failed[:SUMMARY_ROWS]:
            line = Text.assemble("  ", ("failed", "red"), cell(
                f" {key_of(record.op_name, record.id)} ({record.error.phase}): "
                f"{record.error.type}: {record.error.message}"))
            if self.quiet:  # errors only, where errors go: whole
                self.errors.print(line, soft_wrap=True, highlight=False)
            else:  # a row of the summary: one line, cut at the width (whole in the results)
                out.print(line, no_wrap=True, overflow="ellipsis", highlight=False)
        if self.results_path and not self.quiet:
            self.errors.print(f"results: {self.results_path}", soft_wrap=True, highlight=False)

    def _table(self, rows: List[RunRecord]) -> Table:
        width = self.console.width
        columns = [(name, justify) for name, justify, narrowest in _COLUMNS
                   if width >= narrowest]
        shown = [name for name, _ in columns]
        cells = [self._cells(record, shown) for record in rows]
        cells = [row for rows_of_record in cells for row in rows_of_record]
        table = Table(title="param_compute results", title_justify="left")
        # Every column but the config keeps its natural width; the config gets the rest.
        natural = {name: max([len(name)] + [len(_plain(row[i])) for row in cells])
                   for i, name in enumerate(shown)}
        borders = 3 * len(shown) + 1
        room = width - borders - sum(w for name, w in natural.items() if name != "config")
        for i, (name, justify) in enumerate(columns):
            if name == "config":
                fit = max(8, min(natural[name], room))
                table.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis",
                                 max_width=fit, min_width=min(fit, natural[name]))
            else:
                table.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis",
                                 min_width=natural[name])
        for row in cells:
            table.add_row(*row)
        return table

    def _cells(self, record: RunRecord, shown: List[str]) -> List[List[str]]:
        label = config_label(record.config)
        base = {"op": cell(record.op_name), "id": cell(record.id), "config": cell(label)}
        if record.status == STATUS_DRY_RUN:
            return [[base.get(c, "planned" if c == "pass" else "") for c in shown]]
        if record.status != STATUS_OK:
            message = record.error.message[:60] if record.error else ""
            values = {**base, "pass": "-", "median": f"[red]{record.status}[/red]",
                      "95% CI": cell(message)}
            return [[values.get(c, "") for c in shown]]
        out = []
        stats_by_pass = record.stats()
        for measured in record.passes:
            stats = stats_by_pass[measured.name]
            if stats is None:
                continue
            rates = measured.throughput(stats["median"]) or {}
            noisy = " [yellow]noisy[/yellow]" if is_noisy(stats) else ""
            if record.disturbed():
                noisy += " [yellow]disturbed[/yellow]"
            values = {**base, "pass": measured.name,
                      "median": format_ms(stats["median"]) + noisy,
                      "95% CI": ("-" if stats["n"] < 2
                                 else f"±{stats['ci_rel_width'] / 2:.1%}"),
                      "p10 – p90": f"{format_ms(stats['p10'])} – {format_ms(stats['p90'])}",
                      "n": str(stats["n"]),
                      "TFLOP/s": _rate(rates.get("tflops_per_s")),
                      "GB/s": _rate(rates.get("gb_per_s")),
                      "% peak": percent_of_peak(rates)}
            out.append([values[c] for c in shown])
        return out


class _Reverse:
    """Inverts an ordering, so a min-heap keeps the ``max_rows`` smallest keys at its bottom."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __lt__(self, other: "_Reverse") -> bool:
        return other.key < self.key

    def __gt__(self, other: "_Reverse") -> bool:
        return other.key > self.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reverse) and self.key == other.key


def _plain(value: Any) -> str:
    """A cell's text without rich markup (for its width); data cells are ``Text`` already."""
    return value.plain if isinstance(value, Text) else Text.from_markup(value).plain


def print_workload_totals(console: Console, totals: WorkloadTotals, top_ops: int = 10) -> None:
    """Where a captured workload's time goes: configs by median x count, operators by share."""
    configs = Table(title="where the time goes: largest configs (median × count)",
                    title_justify="left")
    room = max(12, (console.width or 80) - 75)  # what the other columns leave the config
    for column, justify in (("op", "left"), ("id", "left"), ("config", "left"),
                            ("median", "right"), ("count", "right"), ("total", "right"),
                            ("share", "right")):
        if column == "config" and (console.width or 0) < 90:
            continue  # too narrow: left out rather than wrapped
        configs.add_column(column, justify=justify, no_wrap=True, overflow="ellipsis",
                           max_width=room if column == "config" else None)
    for top in totals.top_configs():
        config = [cell(top.config)] if (console.width or 0) >= 90 else []
        configs.add_row(cell(top.op), cell(top.id), *config, format_ms(top.median_ms),
                        str(top.count),
                        format_ms(top.total_ms), f"{totals.share(top.total_ms):.1%}")
    ops = Table(title="top operators by total time", title_justify="left")
    for column, justify in (("op", "left"), ("configs", "right"), ("calls", "right"),
                            ("total", "right"), ("share", "right")):
        ops.add_column(column, justify=justify)
    for op in totals.top_ops(top_ops):
        ops.add_row(cell(op.op_name), str(op.configs), str(op.calls), format_ms(op.total_ms),
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

"""``python -m param_compute.tools.ncu_report RESULTS``: Nsight Compute metrics per run id.

Reads the ``--ncu`` batch records of a results file, parses each batch's ncu CSV log (``--csv``:
the default details page, one row per kernel launch and metric, or ``--page raw``, one row per
launch), and joins every kernel launch to its run and pass through the NVTX range it ran in
(``param_compute|OP|ID|iteration|PASS``). Prints kernels, launches, mean duration and the
metrics asked for (``--metric NAME``, repeatable: a ``Metric Name`` of the details page, e.g.
``"DRAM Throughput"``, or a raw metric such as ``dram__bytes.sum`` collected with ``--metrics``
in ``--ncu-args-file``) as a table; ``--csv PATH`` writes every row.

Exit status: 0; 1 when a batch failed or its log is missing or unreadable (the others are
still reported); 2 when RESULTS is not a results file or holds no ncu batch.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from param_compute.files import read_bounded
from param_compute.profiling.profiles import (KernelTable, number, parse_iteration_range,
                                              run_report, to_ns)
from param_compute.terminal import add_quiet

#: Columns of a ``--page raw`` CSV that describe the launch rather than measure it.
IDENTITY_COLUMNS = frozenset(("ID", "Process ID", "Process Name", "Host Name", "Kernel Name",
                              "Context", "Stream", "Block Size", "Grid Size", "Device", "CC"))
DURATION_METRICS = ("Duration", "gpu__time_duration.sum")
#: The largest ncu log read (a CSV row per kernel launch and metric: a long batch is some MB).
MAX_LOG_BYTES = 1 << 30


class NcuLogError(Exception):
    pass


@dataclass
class Launch:
    """One profiled kernel launch: its name, NVTX state and metrics (name -> (unit, text))."""

    id: str
    kernel: str
    nvtx: str
    metrics: Dict[str, Tuple[str, str]] = field(default_factory=dict)

    def duration_ns(self) -> Optional[float]:
        for name in DURATION_METRICS:
            if name in self.metrics:
                unit, text = self.metrics[name]
                value = number(text)
                if value is not None:
                    return to_ns(value, unit or "ns")
        return None


def _is_nvtx_column(name: str) -> bool:
    lowered = name.lower()
    return "nvtx" in lowered or "_range" in lowered


def parse_ncu_csv(text: str) -> List[Launch]:
    """The launches of an ncu ``--csv`` log. Lines ncu writes around the table (``==PROF==``,
    ``==WARNING==``) are skipped; a log without a table (no kernel was profiled) has none."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("==")]
    start = next((i for i, line in enumerate(lines)
                  if line.startswith('"ID"') or line.startswith("ID,")), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    if "Kernel Name" not in header:
        raise NcuLogError("no 'Kernel Name' column: not an ncu --csv log")
    nvtx_columns = [i for i, name in enumerate(header) if _is_nvtx_column(name)]
    index = {name: i for i, name in enumerate(header)}

    def cell(row: List[str], name: str) -> str:
        i = index.get(name)
        return row[i] if i is not None and i < len(row) else ""

    def nvtx(row: List[str]) -> str:
        return " ".join(row[i] for i in nvtx_columns if i < len(row))

    launches: Dict[Tuple[str, str], Launch] = {}
    if "Metric Name" in index:  # details page: a row per launch and metric
        for row in rows[1:]:
            key = (cell(row, "Process ID"), cell(row, "ID"))
            launch = launches.get(key)
            if launch is None:
                launch = launches[key] = Launch(key[1], cell(row, "Kernel Name"), nvtx(row))
            name = cell(row, "Metric Name")
            if name:
                launch.metrics[name] = (cell(row, "Metric Unit"), cell(row, "Metric Value"))
        return list(launches.values())
    body = rows[1:]  # raw page: a row per launch, a column per metric, units on the 2nd row
    units = [""] * len(header)
    if body and not cell(body[0], "ID"):
        units, body = body[0], body[1:]
    out = []
    for row in body:
        launch = Launch(cell(row, "ID"), cell(row, "Kernel Name"), nvtx(row))
        for i, name in enumerate(header):
            if name not in IDENTITY_COLUMNS and i not in nvtx_columns and i < len(row):
                launch.metrics[name] = (units[i] if i < len(units) else "", row[i])
        out.append(launch)
    return out


def join(launches: Sequence[Launch], table: KernelTable, metrics: Sequence[str]) -> None:
    """Add each launch to ``table`` under the run and pass of its iteration range."""
    for launch in launches:
        wanted: Dict[str, Tuple[str, Optional[float]]] = {}
        for name in metrics:
            found = launch.metrics.get(name)
            if found is None:  # metric names are matched case-insensitively too
                found = next((v for k, v in launch.metrics.items() if k.lower() == name.lower()),
                             None)
            if found is not None:
                wanted[name] = (found[0], number(found[1]))
        table.add(parse_iteration_range(launch.nvtx), launch.kernel, launch.duration_ns(), wanted)


def build_parser(prog: str = "python -m param_compute.tools.ncu_report") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Join the Nsight Compute logs of a --ncu run back to its run ids.")
    p.add_argument("results", type=Path, help="a results file written with --ncu")
    p.add_argument("-m", "--metric", action="append", default=[], metavar="NAME",
                   help="a metric to show (repeatable): a details-page Metric Name such as "
                        "'DRAM Throughput', or a raw metric collected with --metrics")
    p.add_argument("--csv", type=Path, metavar="PATH", help="also write every row as CSV")
    p.add_argument("--max-rows", type=int, default=200, help="table rows shown (default 200)")
    add_quiet(p)
    return p


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m param_compute.tools.ncu_report") -> int:
    args = build_parser(prog).parse_args(argv)

    def join_batch(batch, table, problems: List[str]) -> None:
        try:
            text = read_bounded(batch.file, MAX_LOG_BYTES).decode("utf-8", "replace")
        except OSError as exc:
            if batch.status == "ok":
                problems.append(f"{batch.label}: cannot read {batch.recorded_file}: "
                                f"{exc.strerror or exc}")
            return
        try:
            join(parse_ncu_csv(text), table, args.metric)
        except (NcuLogError, csv.Error) as exc:
            problems.append(f"{batch.label}: {batch.file}: {exc}")

    return run_report(args.results, "ncu", join_batch, args.csv, args.max_rows, args.quiet)


if __name__ == "__main__":
    sys.exit(main())

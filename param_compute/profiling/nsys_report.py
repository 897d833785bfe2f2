"""``python -m param_compute.tools.nsys_report RESULTS``: Nsight Systems kernels per run id.

Reads the ``--nsys`` batch records of a results file and, for each batch report
(``.nsys-rep``), its SQLite export: ``REPORT.sqlite`` beside it when present, else made with
``nsys export --type sqlite`` (the ``nsys`` on PATH, the usual install locations, or
``--nsys-bin``). Each kernel is joined to the CUDA API call that launched it (correlation id,
same process) and that call to the NVTX range it was made in
(``param_compute|OP|ID|iteration|PASS``): kernels, launches and mean duration per run and pass
as a table; ``--csv PATH`` writes every row.

Exit status: 0; 1 when a batch failed or its report can't be read or exported; 2 when RESULTS
is not a results file or holds no nsys batch.
"""

from __future__ import annotations

import argparse
import bisect
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from param_compute.errors import OptionsError
from param_compute.profiling.profiles import (BatchRecord, KernelTable, RunPass,
                                              parse_iteration_range, run_report)
from param_compute.terminal import add_quiet

#: NVTX event types of Nsight Systems' export: push/pop and start/end ranges.
NVTX_PUSH_POP, NVTX_START_END = 59, 60


class ExportError(Exception):
    pass


def sqlite_for(batch: BatchRecord, nsys_bin: Optional[str],
               results_dir: Optional[Path] = None) -> Path:
    """The SQLite export of a batch's report, made with ``nsys export`` when missing.

    The path comes from a results file (untrusted): an export is only ever written into
    ``results_dir`` (beside the results), never over an existing file or through a link."""
    report = batch.file
    database = report.with_suffix(".sqlite")
    if database.is_file() and not database.is_symlink():
        return database
    if not report.is_file():
        raise ExportError(f"{batch.recorded_file}: no such report")
    if results_dir is not None:
        database = Path(results_dir) / f"{report.stem}.sqlite"
        if database.is_file() and not database.is_symlink():
            return database
    if os.path.lexists(database):
        raise ExportError(f"{database}: exists and is not a SQLite export; not overwritten")
    from param_compute.profiling.nsight import find_binary

    try:
        binary = find_binary("nsys", nsys_bin)
    except OptionsError as exc:
        raise ExportError(f"{report}: no SQLite export beside it and {exc}") from None
    command = [binary, "export", "--type", "sqlite", "--force-overwrite", "true", "--output",
               str(database), str(report)]
    done = subprocess.run(command, capture_output=True, text=True, errors="replace")
    if done.returncode != 0 or not database.exists():
        why = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ExportError(f"{report}: nsys export failed (status {done.returncode}): {why[0]}")
    return database


def _columns(db: sqlite3.Connection, table: str) -> List[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


Ranges = Tuple[List[int], List[Tuple[int, int, RunPass]]]  # starts, (start, end, where)


def iteration_ranges(db: sqlite3.Connection) -> Dict[int, Ranges]:
    """Per process (``globalTid >> 24``): the iteration ranges, sorted by start."""
    columns = _columns(db, "NVTX_EVENTS")
    if not columns:
        return {}
    text = "COALESCE(n.text, s.value)" if "textId" in columns else "n.text"
    join = "LEFT JOIN StringIds AS s ON s.id = n.textId" if "textId" in columns else ""
    query = (f"SELECT n.start, n.end, {text}, n.globalTid FROM NVTX_EVENTS AS n {join} "
             f"WHERE n.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}) AND n.end IS NOT NULL")
    by_process: Dict[int, List[Tuple[int, int, RunPass]]] = {}
    for start, end, name, tid in db.execute(query):
        where = parse_iteration_range(name or "")
        if where is not None:
            by_process.setdefault(int(tid or 0) >> 24, []).append((start, end, where))
    out = {}
    for process, ranges in by_process.items():
        ranges.sort()
        out[process] = ([r[0] for r in ranges], ranges)
    return out


def _containing(ranges: Ranges, when: int) -> Optional[RunPass]:
    """The iteration range (one at a time: they never overlap) that holds ``when``."""
    starts, items = ranges
    i = bisect.bisect_right(starts, when) - 1
    if i >= 0:
        start, end, where = items[i]
        if start <= when < end:
            return where
    return None


def join_sqlite(database: Path, table: KernelTable) -> None:
    """Add every kernel of an export to ``table`` under the run and pass it was launched in."""
    db = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        ranges = iteration_ranges(db)
        kernel_columns = _columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")
        if not kernel_columns:
            return  # no kernel ran (a CPU batch)
        name_column = next((c for c in ("demangledName", "shortName", "mangledName")
                            if c in kernel_columns), None)
        name = f"COALESCE(s.value, k.{name_column})" if name_column else "''"
        names = f"LEFT JOIN StringIds AS s ON s.id = k.{name_column}" if name_column else ""
        query = (f"SELECT k.start, k.end, {name}, r.start, r.globalTid "
                 "FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
                 "JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.correlationId = k.correlationId "
                 "AND (r.globalTid >> 24) = (k.globalPid >> 24) "
                 f"{names} ORDER BY k.start")
        for start, end, kernel, launched, tid in db.execute(query):
            process_ranges = ranges.get(int(tid or 0) >> 24)
            where = _containing(process_ranges, launched) if process_ranges else None
            table.add(where, str(kernel), float(end - start) if end is not None else None)
    except sqlite3.DatabaseError as exc:
        raise ExportError(f"{database}: {exc}") from None
    finally:
        db.close()


def build_parser(prog: str = "python -m param_compute.tools.nsys_report") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Join the Nsight Systems reports of a --nsys run back to its run ids.")
    p.add_argument("results", type=Path, help="a results file written with --nsys")
    p.add_argument("--nsys-bin", metavar="PATH",
                   help="nsys, to export reports that have no SQLite file beside them")
    p.add_argument("--csv", type=Path, metavar="PATH", help="also write every row as CSV")
    p.add_argument("--max-rows", type=int, default=200, help="table rows shown (default 200)")
    add_quiet(p)
    return p


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m param_compute.tools.nsys_report") -> int:
    args = build_parser(prog).parse_args(argv)

    def join_batch(batch, table, problems: List[str]) -> None:
        if batch.status != "ok" and not batch.file.exists():
            return
        try:
            join_sqlite(sqlite_for(batch, args.nsys_bin, Path(args.results).parent), table)
        except ExportError as exc:
            problems.append(f"{batch.label}: {exc}")

    return run_report(args.results, "nsys", join_batch, args.csv, args.max_rows, args.quiet)


if __name__ == "__main__":
    sys.exit(main())

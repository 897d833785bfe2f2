"""``python -m param_compute.history add|show|check|report``: the results history's command line.

Exit status: 0 done (``check``: no regression), 1 ``check`` found a regression, 2 unusable
input (a results file, a database that is not a history database, a bad option), with a
message naming it; no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from pathlib import Path
from typing import List, Optional

from param_compute.formatting import printable
from param_compute.history.backends import (DEFAULT_DB, HistoryError, driver_errors, explained,
                                            shown)

PROG = "python -m param_compute.history"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=DEFAULT_DB, metavar="DB",
                        help=f"the history: an SQLite file (default ./{DEFAULT_DB}), or a "
                             "postgresql://USER@HOST/NAME URL or libpq connection string "
                             "('host=H dbname=N'; needs psycopg)")
    common.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing on standard output: warnings, errors and check's "
                             "regressions only (on standard error)")
    chosen = argparse.ArgumentParser(add_help=False)
    chosen.add_argument("--only", metavar="GLOB", help="series whose op or run key matches")
    chosen.add_argument("-k", dest="keyword", metavar="EXPR", action="append",
                        help="series whose op, run key, config or name match EXPR: globs or "
                             "words joined by and, or, not, parentheses, as run -k "
                             "(repeatable: all must match)")
    chosen.add_argument("--machine", metavar="GLOB", help="series of the machines matching")
    chosen.add_argument("--mix-machines", action="store_true",
                        help="one series per op, config and pass across machines (never by "
                             "default: machines differ)")
    chosen.add_argument("--min-change", type=float, default=2.0, metavar="PCT",
                        help="smallest step reported, in percent (default 2)")
    parser = argparse.ArgumentParser(
        prog=prog, description="Every run kept in a database: series per machine, op, config "
                               "and pass over labels, their steps, a gate and a dashboard.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add = commands.add_parser("add", parents=[common], help="ingest results files",
                              description="Ingest results files (the same file twice adds "
                                          "nothing; damaged lines are skipped and listed).")
    add.add_argument("results", nargs="+", type=Path, help="run_benchmark results files")
    add.add_argument("--label", help="the label of these runs (default: the results' git "
                                     "commit, else torch's version)")
    commands.add_parser("show", parents=[common, chosen], help="print series with sparklines")
    check = commands.add_parser("check", parents=[common, chosen],
                                help="exit 1 when a series regressed")
    check.add_argument("--fail-on-regression", type=float, default=10.0, metavar="PCT",
                       help="a step slower by at least PCT percent fails (default 10)")
    check.add_argument("--since", metavar="LABEL", help="judge only steps at LABEL or later")
    report = commands.add_parser("report", parents=[common, chosen],
                                 help="write a static HTML dashboard")
    report.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                        help="the folder to write index.html into")
    report.add_argument("--title", default="param_compute results history")
    report.add_argument("--max-plots", type=int, default=500, metavar="N",
                        help="plots at most N series (those with steps first; default 500)")
    return parser


def _usable(paths) -> None:
    """Every results file opens as one (its header read) before the database is made or
    written: a mistyped path leaves no empty history behind."""
    from param_compute.results.file import ResultsFileError, ResultsStream

    for path in paths:
        try:
            ResultsStream(path)
        except ResultsFileError as exc:
            raise HistoryError(str(exc)) from None


def _add(args) -> int:
    from param_compute.history.ingest import add_results
    from param_compute.history.show import plain
    from param_compute.history.store import open_store
    from param_compute.results.file import warn_problem

    from param_compute.history.ingest import add_job_totals

    _usable(args.results)
    reports = []
    with open_store(args.db, create=True) as store:
        for path in args.results:
            try:
                report = add_results(store, path, args.label, on_problem=warn_problem)
            except driver_errors() as exc:  # a full disk, a lost server: rolled back
                raise HistoryError(f"{store.where}: {explained(exc, args.db)}; {printable(path)} "
                                   "not added (its add was rolled back: the history is as it "
                                   "was before it)") from None
            reports.append(report)
            skipped = (f"; {report.problem_count} damaged line(s) skipped (listed above)"
                       if report.problem_count else "")
            if report.duplicate_of is not None:
                label, where = report.duplicate_of
                print(f"{path}: already in the history (label {plain(label)}, from "
                      f"{plain(where)}): "
                      f"nothing added{skipped}")
                continue
            unmeasured = (f", {report.not_measured} without a measured pass"
                          if report.not_measured else "")
            steps = f", {report.step_series} step total(s)" if report.step_series else ""
            print(f"{path}: added as {plain(report.label)} on {plain(report.machine)}: "
                  f"{report.points} "
                  f"point(s) from {report.records} record(s){unmeasured}{steps}{skipped}")
        for line in add_job_totals(store, reports):  # a job's ranks, added together
            print(plain(line))
    return 0


def _series(args, store):
    from param_compute.history.select import Selector
    from param_compute.history.series import iter_series

    if not (math.isfinite(args.min_change) and args.min_change >= 0):
        raise HistoryError(f"--min-change {args.min_change:g}: a percentage >= 0")
    selector = Selector(args.only, args.keyword, args.machine)
    return iter_series(store, selector, args.mix_machines)


def _show(args) -> int:
    from param_compute.history.show import show
    from param_compute.history.store import open_store

    from param_compute import terminal

    with open_store(args.db) as store:
        count = show(_series(args, store), sys.stdout, args.min_change / 100, terminal.width())
    if not count:
        print("no series (nothing added yet, or nothing matches)", file=sys.stderr)
    return 0


def _check(args) -> int:
    from param_compute.history.check import judge
    from param_compute.history.show import describe_step, plain
    from param_compute.history.store import open_store

    if not (math.isfinite(args.fail_on_regression) and args.fail_on_regression > 0):
        raise HistoryError("--fail-on-regression: a percentage above 0")
    if args.since is not None:  # as add keeps a label: without surrounding spaces
        args.since = args.since.strip()
    with open_store(args.db) as store:
        order = {name: i for i, name in store.labels()}
        if args.since is not None and args.since not in order:
            known = plain(", ".join(list(order)[-5:]))
            raise HistoryError(f"--since {args.since!r}: no such label (latest: {known})")
        verdict = judge(_series(args, store), args.fail_on_regression / 100,
                        args.min_change / 100, args.since, order)
    if not verdict.series:  # a gate that judged nothing must not pass
        raise HistoryError("nothing to judge: no series (nothing added yet, or nothing "
                           "matches --only/-k/--machine)")
    for finding in verdict.regressions:  # errors, where errors go when --quiet
        print(f"regression: {plain(finding.series.name)}: {describe_step(finding.step)}",
              file=sys.stderr if args.quiet else sys.stdout)
    for finding in verdict.improvements:
        print(f"improvement: {plain(finding.series.name)}: {describe_step(finding.step)}")
    since = f" since {args.since}" if args.since else ""
    print(f"{len(verdict.regressions)} regression(s) of at least {args.fail_on_regression:g}%"
          f"{since} in {verdict.series} series; {len(verdict.improvements)} improvement(s)")
    return 1 if verdict.regressions else 0


def _report(args) -> int:
    from param_compute.history.report import write_report
    from param_compute.history.store import open_store

    if args.max_plots < 0:
        raise HistoryError("--max-plots: a number >= 0")
    with open_store(args.db) as store:
        index = write_report(store, _series(args, store), args.output, args.title,
                             args.min_change / 100, args.max_plots)
    print(f"report: {index}")
    return 0


def main(argv: Optional[List[str]] = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    command = {"add": _add, "show": _show, "check": _check, "report": _report}[args.command]
    try:
        if args.quiet:
            with open(os.devnull, "w") as nowhere, contextlib.redirect_stdout(nowhere):
                return command(args)
        return command(args)
    except HistoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except driver_errors() as exc:
        print(f"error: {shown(args.db)}: {explained(exc, args.db)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of standard output left: process.entry's to say
        raise
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130

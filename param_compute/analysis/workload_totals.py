"""Where a captured workload's time goes: each config's median times its ``count``, by operator.

A captured spec (``python -m param_compute.capture``) carries, per input config, how often the
config occurred in the captured step. Replaying it measures each config once; the workload's time
is then the sum over configs of median x count. The sums are kept by
``results.totals``; this module prints them.

Where the capture joined a Kineto trace (``capture --kineto``), each record also carries its
config's ``original_us`` (mean CPU and device time per call in the captured run): the original
time of each op (x count) is summed beside the replayed one, so that where a replay differs from
production shows at a glance (``comparison_rows``; ``python -m param_compute.workload_totals
RESULTS.json`` prints the table).

``--trace OUT.json`` also writes the step replay beside its original as a Chrome trace, from
the step record's timeline and the step file it names (``analysis.step_trace``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from param_compute import terminal
from param_compute.plan.summary import cut
from param_compute.results.totals import WorkloadTotals
from param_compute.terminal import add_quiet, fit_lines

def comparison_rows(totals: WorkloadTotals) -> List[Dict[str, Any]]:
    """Per op with an original time: replayed Σ median x count beside the original Σ time x
    count (CPU and device, ms) and replayed / original (device time where recorded, else CPU),
    largest original first."""
    rows = []
    for op in totals.by_op.values():
        if not op.original_calls:
            continue
        original = op.original_device_ms or op.original_cpu_ms
        rows.append({"op": op.op_name, "configs": op.configs, "calls": op.calls,
                     "replayed_ms": op.total_ms, "original_cpu_ms": op.original_cpu_ms,
                     "original_device_ms": op.original_device_ms,
                     "ratio": op.total_ms / original if original and op.calls else None})
    return sorted(rows, key=lambda r: -(r["original_device_ms"] or r["original_cpu_ms"]))


def format_comparison(rows: List[Dict[str, Any]], width: Optional[int] = None) -> str:
    """The comparison as a plain-text table; ``width``: the op column narrows to fit."""
    op = 40 if width is None else max(8, min(40, width - 59))
    header = (f"{'op':<{op}} {'calls':>7} {'replayed ms':>12} {'orig cpu ms':>12} "
              f"{'orig dev ms':>12} {'replay/orig':>11}")
    lines = [header, "-" * len(header)]
    for row in rows:
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] is not None else "-"
        lines.append(f"{cut(row['op'], op):<{op}} {row['calls']:>7} "
                     f"{row['replayed_ms']:>12.3f} {row['original_cpu_ms']:>12.3f} "
                     f"{row['original_device_ms']:>12.3f} {ratio:>11}")
    return "\n".join(lines if width is None else fit_lines(lines, width, range(len(lines))))


def format_top_configs(totals: WorkloadTotals, width: Optional[int] = None) -> str:
    """The largest configs (median x count) as a plain-text table, with their config labels;
    ``width``: the op and config columns narrow to fit."""
    op, config = 28, 36
    if width is not None:  # the room the id and numbers leave, 2 parts op to 3 parts config
        room = max(16, width - 39 - 2)
        op = min(28, max(8, room * 2 // 5))
        config = min(36, max(8, room - op))
    header = (f"{'op':<{op}} {'id':<12} {'config':<{config}} {'median ms':>10} {'count':>6} "
              f"{'share':>6}")
    lines = [header, "-" * len(header)]
    for top in totals.top_configs():
        lines.append(f"{cut(top.op, op):<{op}} {cut(top.id, 12):<12} "
                     f"{cut(top.config, config):<{config}} {top.median_ms:>10.4f} "
                     f"{top.count:>6} {totals.share(top.total_ms):>6.1%}")
    return "\n".join(lines if width is None else fit_lines(lines, width, range(len(lines))))


def build_parser(prog: str = "python -m param_compute.workload_totals"
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Replayed median x count per op of a captured workload, beside the "
                    "original time recorded in production (capture --kineto).")
    parser.add_argument("results", nargs="+",
                        help="a run_benchmark results file; a job's: every rank's file "
                             "(out.rank0of2.json out.rank1of2.json), read together")
    parser.add_argument("--json", action="store_true",
                        help="print the fidelity ledger as one JSON object (analysis.ledger)")
    parser.add_argument("--trace", type=Path, metavar="OUT.json",
                        help="also write the step replay beside its original as a Chrome "
                             "trace (opens in Perfetto): one track each, a complete event "
                             "per call, named by its op")
    parser.add_argument("--step", type=Path, metavar="FILE",
                        help="with --trace: the step file to lay the original out from "
                             "(default: the one the step record names)")
    add_quiet(parser)
    return parser


def write_trace(results, path: Path, step_file: Optional[Path]) -> int:
    """``--trace``: the results' last step record (and its step file) as a Chrome trace at
    ``path``; what is left out warned. Exit status: 0 written, 2 no replay track to draw or
    the file cannot be written."""
    from param_compute.analysis.step_trace import trace_text
    from param_compute.analysis.step_tracks import StepTracksError, read_tracks
    from param_compute.files import write_new
    from param_compute.formatting import printable

    try:
        tracks = read_tracks(Path(results.path), results.steps, step_file)
    except StepTracksError as exc:
        print(f"error: {exc}: no trace written", file=sys.stderr)
        return 2
    for note in tracks.notes:
        print(f"warning: {note}", file=sys.stderr)
    try:
        write_new(path, trace_text(tracks))
    except OSError as exc:
        print(f"error: cannot write {printable(path)}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    said = ", ".join(f"{len(track.calls)} calls on the {track.name}'s track"
                     for track in tracks.tracks())
    print(f"trace: {printable(path)} ({said})", file=sys.stderr)
    return 0


#: The collectives' records of each ledger ``read_ledger`` made (by the ledger's id).
ledger_comms: Dict[int, List[Dict[str, Any]]] = {}


def read_ledger(path: str):
    """(totals, ledger, the file's stream) of one results file, read once; unusable lines
    (a count that is no number...) warned with file and line. Raises ``OSError`` or
    ``ResultsFileError``."""
    from param_compute.analysis.ledger import build_ledger, ledger_fields
    from param_compute.results.file import RUN, stream_results

    totals = WorkloadTotals()
    kept = {}  # what the ledger reads of each run (its latest record): a few numbers
    comms = []
    results = stream_results(path)
    for line in results.lines():  # the step record is kept as it passes (results.step)
        if line.kind == RUN:
            record = line.value
            totals.add_json(record)
            kept[(record.get("op_name"), record.get("id"))] = ledger_fields(record)
            if isinstance(record.get("comms"), dict):
                comms.append(record)
    if results.problem_count:
        print(f"warning: {results.problem_count} line(s) of {path} not used (listed "
              "above)", file=sys.stderr)
    ledger = build_ledger(kept.values(), results.step, results.run_options)
    ledger_comms[id(ledger)] = comms
    return totals, ledger, results


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m param_compute.workload_totals") -> int:
    """``python -m param_compute.workload_totals RESULTS.json``: a captured workload's replayed
    time per op beside the original time (from ``original_us``), the file read once; a job's
    rank files together (``analysis.job``). Exit 2: unreadable file, or files that are not
    the ranks of one job; lines of wrong types are warned (file, line, field) and left out."""
    from param_compute.analysis.job import JobFilesError, check_ranks, job_ledger, job_of
    from param_compute.results.file import ResultsFileError

    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.step is not None and args.trace is None:
        parser.error("--step goes with --trace (the step file the trace's original comes from)")
    if args.trace is not None:  # before anything is read: never a link, a FIFO or the input
        from param_compute.errors import OptionsError
        from param_compute.files import check_outputs

        if len(args.results) > 1:
            parser.error("--trace draws one results file's step: give one rank's file")
        try:
            check_outputs({"--trace": args.trace}, {"results": Path(args.results[0]),
                                                    "step": args.step})
        except OptionsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    read = []
    try:
        for path in args.results:
            read.append(read_ledger(path))
        headers = [results.header for _, _, results in read]
        is_job = len(args.results) > 1 or job_of(headers[0]) is not None
        ranks = check_ranks(args.results, headers) if is_job and (
            len(args.results) > 1 or job_of(headers[0])["world_size"] == 1) else None
    except (OSError, ResultsFileError, JobFilesError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if is_job and ranks is None:
        job = job_of(headers[0])
        print(f"warning: {args.results[0]} is rank {job['rank']} of a job of "
              f"{job['world_size']}: give every rank's file for the job's totals",
              file=sys.stderr)
    if ranks is not None:
        return _print_job(args, read, ranks)
    totals, ledger, results = read[0]
    traced = 0 if args.trace is None else write_trace(results, args.trace, args.step)
    if args.json:
        import json

        print(json.dumps(ledger, indent=1))
        return traced
    if args.quiet:
        return traced
    _print_one(totals, ledger)
    return traced


def _print_one(totals: WorkloadTotals, ledger, width: Optional[int] = None) -> None:
    from param_compute.analysis.ledger import format_ledger

    width = width or terminal.width()
    print("\n".join(fit_lines([
        f"replayed: {totals.total_ms:.3f} ms (Σ median × count) over {totals.calls} calls in "
        f"{totals.configs} configs" + (f"; {totals.failed_configs} configs "
                                       f"({totals.failed_calls} calls) not measured"
                                       if totals.failed_configs else "")], width)))
    if totals.configs:
        print("largest configs (median × count):")
        print(format_top_configs(totals, width))
        print()
    rows = comparison_rows(totals)
    if rows:
        print(format_comparison(rows, width))
    else:
        print("no original times: capture with --kineto to compare with production")
    if ledger["ops"] and (ledger["in_step_ms"] is not None or ledger["original_ms"]):
        print()
        print(format_ledger(ledger, width))
    comms = ledger_comms.get(id(ledger))
    if comms:
        from param_compute.results.comms import comms_rows, format_comms

        print()
        print(format_comms(comms_rows(comms), width))


def _print_job(args, read, ranks) -> int:
    """Every rank of one job: the job's ledger (``analysis.job``)."""
    from param_compute.analysis.job import format_job, job_ledger

    job = job_ledger([ledger for _, ledger, _ in read], ranks)
    if args.json:
        import json

        print(json.dumps(job, indent=1))
        return 0
    if args.quiet:
        return 0
    for (totals, ledger, _), rank in sorted(zip(read, ranks), key=lambda p: p[1]):
        print(f"== rank {rank} ==")
        _print_one(totals, ledger)
        print()
    print(format_job(job))
    return 0

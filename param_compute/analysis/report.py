"""``python -m param_compute.report RESULTS -o report.html``: one self-contained HTML report.

The report leads with what matters. Its header says what the run was and the protocol it
actually used (time-based warm-up and measurement where the run asked for them, the counts of
measured calls seen). For a captured workload (records with a ``count``) the step totals and
where the time goes come next (:mod:`param_compute.analysis.report_workload`), then, for a step
replay, the step call by call beside its original (:mod:`param_compute.analysis.step_timeline`),
then the table of configs. Other results get a plot per sweep (see
:mod:`param_compute.analysis.sweeps`; drawn by :mod:`param_compute.analysis.plots`): only
dimensions the spec ranged, categories as grouped bars. A roofline and the table of every run, each with its config label, follow. The HTML file
is self-contained (:mod:`param_compute.analysis.html_page`). The results file is streamed once
and what is kept is bounded: the table keeps ``TABLE_ROWS`` runs, the sweeps ``SWEEP_RUNS`` per
operator, the roofline ``ROOF_POINTS``; a captured workload keeps a few numbers per run for its
totals. Damaged lines of the results file are reported on stderr (file:line) and left out. Exit
status: 0 written; 2 the results file is missing or invalid, or matplotlib is not installed.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from param_compute.errors import OptionsError
from param_compute.formatting import format_ms
from param_compute.plan.summary import config_label
from param_compute.results.fields import measured_passes, pass_throughput
from param_compute.results.file import (STEP, ResultsFile, ResultsFileError, ResultsStream,
                                        stream_results)
from param_compute.analysis.html_page import definitions, e as _e, page
from param_compute.analysis.ledger import build_ledger, ledger_fields
from param_compute.files import check_outputs, write_new
from param_compute.analysis.plots import plot_sweep
from param_compute.analysis.report_workload import workload_html
from param_compute.analysis.roofline import roofline_section
from param_compute.analysis.step_timeline import timeline_section
from param_compute.analysis.step_tracks import StepTracksError, read_tracks
from param_compute.analysis.sweeps import Sweep, find_sweeps
from param_compute.results.utilization import percent_of_peak
from param_compute.results.totals import WorkloadTotals
from param_compute.results.comms import comms_row

TABLE_ROWS = 5000
#: Runs of one operator the sweeps look at, and of all operators together.
SWEEP_RUNS, SWEEP_RUNS_ALL = 2000, 20000
#: Points on the roofline.
ROOF_POINTS = 3000


def _ms(value: Optional[float]) -> str:
    return format_ms(value, missing="")


def _num(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.4g}"


def _seconds(value: Any) -> str:
    return f"{value:g} s"


#: The named measuring protocols (``measure.protocol``), as the report says them.
PROTOCOL_NAMES = {"auto": "by time and noise (the default protocol)",
                  "param": "PARAM's counts"}


def protocol_text(options: Dict[str, Any], n_seen: Tuple[Optional[int], Optional[int]]) -> str:
    """How the runs were measured, as the run options and the records say: time-based warm-up
    and measurement where asked for (never "warm-up 1, measured 1" for such a run)."""
    warmup, iterations = options.get("warmup"), options.get("iteration")
    warmup_time, min_time = options.get("warmup_time") or 0, options.get("min_time") or 0
    parts = []
    if options.get("protocol") in PROTOCOL_NAMES:
        parts.append(PROTOCOL_NAMES[options["protocol"]])
    if warmup_time:
        parts.append(f"warm-up at least {warmup} call(s) and {_seconds(warmup_time)}"
                     + (", until the per-block median settled" if min_time else ""))
    elif warmup is not None:
        parts.append(f"warm-up {warmup} call(s)")
    if min_time:
        parts.append(f"measured at least {iterations} call(s) and {_seconds(min_time)} "
                     f"(at most {options.get('max_iteration')} calls)")
    elif iterations is not None:
        parts.append(f"measured {'at least ' if options.get('max_noise') else ''}"
                     f"{iterations} call(s)")
    if options.get("max_noise"):
        parts.append(f"until the median's 95% interval was within ±{options['max_noise']:g}% "
                     f"(at most {_seconds(options.get('max_time') or 0)})")
    if options.get("timer") not in (None, "wall"):
        parts.append(f"{options['timer']} timer")
    if options.get("discard_disturbed"):
        parts.append("disturbed samples dropped")
    low, high = n_seen
    if low is not None:
        parts.append(f"{low} calls measured per pass" if low == high
                     else f"{low}–{high} calls measured per pass")
    how = [str(options.get("exec_mode") or "")]
    if options.get("num_threads") is not None:
        how.append(f"{options['num_threads']} thread(s)")
    for key, label in (("backward", "backward timed"), ("cuda_graph", "CUDA graphs"),
                       ("pt2_model", "torch.compile"), ("cuda_l2_cache", "L2 kept warm")):
        if options.get(key):
            how.append(label)
    if options.get("cold"):
        how.append(f"cold: {options['cold']}")
    parts.append(", ".join(h for h in how if h))
    return "; ".join(p for p in parts if p)


def _host(info: Dict[str, Any]) -> str:
    about = [str(info[k]) for k in ("platform",) if info.get(k)]
    if info.get("cpu_count"):
        about.append(f"{info['cpu_count']} CPUs")
    return f"{info.get('hostname') or ''}" + (f" ({', '.join(about)})" if about else "")


def _about(results: Union[ResultsFile, ResultsStream], runs: int,
           n_seen: Tuple[Optional[int], Optional[int]]) -> str:
    info, options = results.sys_info, results.run_options
    finish = results.finish or {}
    items = [("results", results.path), ("spec", options.get("config_file")),
             ("device", options.get("device") or info.get("device")),
             ("GPU", info.get("cuda_device_name")),
             ("host", _host(info)),
             ("torch", info.get("pytorch_version")),
             ("protocol", protocol_text(options, n_seen)),
             ("peaks", options.get("peaks")),
             ("started", results.header.get("start_time")),
             ("finished", finish.get("finish_time")),
             ("runs", f"{finish.get('runs_ok', '?')} measured, "
                      f"{finish.get('runs_failed', '?')} failed, "
                      f"{finish.get('runs_dry', 0)} planned"
              if finish else f"{runs} (no last line: the run did not finish)")]
    if results.header.get("merged_shards"):
        items.append(("shards", len(results.header["merged_shards"].get("shards", []))))
    return definitions(items)


def _table(records: List[Dict[str, Any]], hidden: int) -> str:
    counted = any(r.get("count") is not None for r in records)  # a captured workload's
    head = ("op", "config", "pass", "status", "median", "p10", "p90", "n",
            *(("count",) if counted else ()), "TFLOP/s", "GB/s", "% peak", "id")
    out = ["<table><thead><tr>", "".join(f"<th>{h}</th>" for h in head), "</tr></thead><tbody>"]
    for record in records:
        config = record.get("config")
        label = (f"<td class=\"config\">{_e(config_label(config))}</td>")
        tail = f"<td>{_e(record.get('id'))}</td>"
        passes = list(measured_passes(record))
        status = record.get("status")
        count = [_e(record.get("count"))] if counted else []
        if not passes:
            error = record.get("error") or {}
            message = f"{error.get('type')}: {error.get('message')}" if error else ""
            out.append(f"<tr class=\"{'error' if status == 'error' else ''}\">"
                       f"<td>{_e(record.get('op_name'))}</td>{label}"
                       f"<td></td><td>{_e(status)}</td><td colspan=\"4\">{_e(message)}</td>"
                       + "".join(f"<td class=\"num\">{c}</td>" for c in count)
                       + f"<td colspan=\"3\"></td>{tail}</tr>")
        for name, stats in passes:
            rates = pass_throughput(record, name)
            numbers = [_ms(stats.get("median")), _ms(stats.get("p10")), _ms(stats.get("p90")),
                       _e(stats.get("n")), *count, _num(rates.get("tflops_per_s")),
                       _num(rates.get("gb_per_s")), _e(percent_of_peak(rates))]
            out.append(f"<tr><td>{_e(record.get('op_name'))}</td>{label}<td>{_e(name)}</td>"
                       f"<td>{_e(status)}</td>"
                       + "".join(f"<td class=\"num\">{c}</td>" for c in numbers)
                       + tail + "</tr>")
    out.append("</tbody></table>")
    if hidden:
        out.append(f"<p class=\"note\">{TABLE_ROWS} runs shown; {hidden} more are in the "
                   "results file.</p>")
    return "".join(out)


def _sweep_html(sweep: Sweep, number: int, png_dir: Optional[Path]) -> str:
    png = plot_sweep(sweep)
    if png_dir is not None:
        png_dir.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in sweep.op)
        write_new(png_dir / f"{number:02d}_{safe}.png", png)  # never through a planted link
    points = sum(len(line.points) for line in sweep.lines)
    kind = ("grouped bars, a group per value" if sweep.categories
            else "a grid sweep, plotted against its estimated work" if sweep.scatter else "")
    return (f"<h3>{_e(sweep.op)}: against {_e(sweep.x_label)}</h3>"
            f"<p class=\"note\">{points} points, {len(sweep.lines)} "
            f"{'series' if sweep.categories else 'line(s)'}{'; ' + kind if kind else ''}"
            f"</p><img alt=\"{_e(sweep.op)}: latency and throughput against "
            f"{_e(sweep.x_label)}\" src=\"data:image/png;base64,"
            f"{base64.b64encode(png).decode('ascii')}\">")


#: What the report reads of each pass's stats (the sweeps and the table).
_STATS_KEPT = ("n", "median", "p10", "p90")


def _compact(record: Dict[str, Any]) -> str:
    """What the report keeps of a record it shows, as compact JSON text: the stats it shows,
    the rates, a captured config's count, the error of a run without any measured pass, and
    the config; the measured times are dropped."""
    passes = {name: {key: stats.get(key) for key in _STATS_KEPT}
              for name, stats in measured_passes(record)}
    out = {"op_name": record.get("op_name"), "id": record.get("id"),
           "status": record.get("status"), "stats": passes}
    for key in ("throughput", "count", "config"):
        out[key] = record.get(key)
    if not passes and record.get("error"):
        out["error"] = record["error"]
    return json.dumps(out, separators=(",", ":"), default=str)


class _Kept:
    """Up to ``limit`` compact records, a later record of a run replacing its earlier one;
    ``dropped`` counts the runs that did not fit."""

    def __init__(self, limit: int) -> None:
        self.limit, self.items, self.places, self.dropped = limit, [], {}, 0

    def offer(self, key: Tuple[str, str], text: str) -> None:
        if key in self.places:
            self.items[self.places[key]] = text
        elif len(self.items) < self.limit:
            self.places[key] = len(self.items)
            self.items.append(text)
        else:
            self.dropped += 1

    def decoded(self) -> Iterator[Dict[str, Any]]:
        return (json.loads(text) for text in self.items)


def _captured(record: Dict[str, Any]) -> str:
    """What a captured workload's totals and ledger read of a run (``ledger_fields`` and the
    config label), as compact JSON text: ~150 bytes a run."""
    kept = ledger_fields(record)
    kept["config"] = config_label(record.get("config"))
    return json.dumps(kept, separators=(",", ":"), default=str)


def _uncaptured(text: str) -> Dict[str, Any]:
    return json.loads(text)


def _weight(record: Dict[str, Any]) -> float:
    """A captured config's share of the step: median x count (0 when not measured)."""
    median = ((record.get("stats") or {}).get("forward") or {}).get("median")
    count = record.get("count")
    ok = isinstance(median, (int, float)) and isinstance(count, int)
    return float(median) * count if ok else 0.0


def _step_section(results: Union[ResultsFile, ResultsStream], step_file: Optional[Path],
                  warn: Callable[[str], None]) -> str:
    """The step replay's timeline beside its original (``analysis.step_timeline``), or why
    there is none; each thing left out is also passed to ``warn``."""
    try:
        tracks = read_tracks(Path(results.path), results.steps, step_file)
    except StepTracksError as exc:
        warn(f"{exc}: the step's timeline is left out of the report")
        return timeline_section(None, str(exc))
    for note in tracks.notes:
        warn(note)
    return timeline_section(tracks)


def build_report(results: Union[ResultsFile, ResultsStream], title: Optional[str] = None,
                 png_dir: Optional[Path] = None, step_file: Optional[Path] = None,
                 warn: Optional[Callable[[str], None]] = None,
                 job: Optional[Dict[str, Any]] = None) -> Tuple[str, List[Sweep]]:
    """(the HTML text, the sweeps plotted). A stream is read once and what is kept is bounded
    (module docstring); a captured workload's totals keep a few numbers per run. A step
    replay's timeline takes its original from ``step_file``, else the step file its record
    names; ``warn`` is given each thing the timeline leaves out (default: dropped). ``job``: a
    job's ledger (``analysis.job``), its section first."""
    # the run records (a stream keeps its step record as it passes them: ``results.step``)
    records = results.records if isinstance(results, ResultsFile) else (r for _, r in results)
    table, roof = _Kept(TABLE_ROWS), _Kept(ROOF_POINTS)
    by_op: Dict[str, _Kept] = {}
    captured: Dict[Tuple[str, str], str] = {}  # per run: what the totals read
    runs: Dict[str, int] = {"n": 0, "sweep": 0}
    comms: List[Dict[str, Any]] = []  # collectives measured across ranks
    n_low: Optional[int] = None
    n_high: Optional[int] = None
    for record in records:
        key = (str(record.get("op_name")), str(record.get("id")))
        runs["n"] += 1
        for _, stats in measured_passes(record):
            n = stats.get("n")
            if isinstance(n, int):
                n_low = n if n_low is None else min(n_low, n)
                n_high = n if n_high is None else max(n_high, n)
        if record.get("count") is not None:
            captured[key] = _captured(record)
        row = comms_row(record)
        if row is not None:
            comms.append(row)
        text = _compact(record)
        table.offer(key, text)
        if record.get("throughput"):
            roof.offer(key, text)
        # captured configs are observed, not ranged; the step replay's record is no sweep
        if record.get("count") is None and record.get("kind") != STEP:
            mine = by_op.get(key[0])
            if mine is None and runs["sweep"] < SWEEP_RUNS_ALL:
                mine = by_op[key[0]] = _Kept(SWEEP_RUNS)
            if mine is not None and (key in mine.places or runs["sweep"] < SWEEP_RUNS_ALL):
                runs["sweep"] += key not in mine.places and len(mine.items) < mine.limit
                mine.offer(key, text)

    title = title or f"param_compute report: {results.path.name}"
    parts = [_about(results, runs["n"], (n_low, n_high))]
    if job is not None:
        from param_compute.analysis.job import job_html

        parts.append(job_html(job))
    if comms:
        parts.append(_comms_html(comms))
    if captured:
        totals = WorkloadTotals()
        for kept in captured.values():
            totals.add_json(_uncaptured(kept))
        parts.append(workload_html(totals, build_ledger(
            (_uncaptured(kept) for kept in captured.values()), results.step,
            results.run_options)))
        del captured
    if results.steps:
        parts.append(_step_section(results, step_file, warn or (lambda text: None)))
    sweeps: List[Sweep] = []
    sweep_parts: List[str] = []
    for op, mine in by_op.items():
        for sweep in find_sweeps(op, list(mine.decoded())):  # one op's records at once
            sweeps.append(sweep)
            sweep_parts.append(_sweep_html(sweep, len(sweeps), png_dir))
    if sweep_parts:
        parts.append("<h2>Sweeps</h2>")
        parts.extend(sweep_parts)
    elif by_op:
        parts.append("<h2>Sweeps</h2><p class=\"note\">No operator ranges a dimension over "
                     "measured runs (a dry run, or configs listed one by one): the table "
                     "below has them all.</p>")
    parts.append(roofline_section(list(roof.decoded())))
    rows = list(table.decoded())
    if any(r.get("count") is not None for r in rows):  # a captured workload: largest first
        rows.sort(key=_weight, reverse=True)
        parts.append("<h2>Configs, largest share of the step first</h2>")
    else:
        parts.append("<h2>All runs</h2>")
    parts.append(_table(rows, table.dropped))
    return page(title, parts), sweeps


def _comms_html(rows: List[Dict[str, Any]]) -> str:
    """The collectives measured across a job's ranks: time, algbw and busbw (nccl-tests)."""
    head = ("collective", "config", "group", "ranks", "bytes", "time", "algbw GB/s",
            "busbw GB/s")
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(str(cell))}</td>" for cell in (
            row["op"], row["config"], row["group"], row["ranks"], row["bytes"],
            _ms(row["median_ms"]), _num(row["algbw_gbps"]), _num(row["busbw_gbps"])))
        + "</tr>" for row in rows)
    return ("<h2>Collectives</h2><p class=\"note\">Each measured across the ranks: a barrier "
            "before each sample, the slowest rank's time; bandwidth as nccl-tests defines "
            "it.</p><table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head)
            + f"</tr></thead><tbody>{body}</tbody></table>")


def build_parser(prog: str = "python -m param_compute.report") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write a self-contained HTML report of a results file: for a captured "
                    "workload the step totals and where the time goes first, for a step "
                    "replay the step call by call beside its original; plots of each sweep, a "
                    "roofline, and a table of every run with its config.")
    parser.add_argument("results", type=Path, nargs="+",
                        help="a results file (JSON Lines); a job's: every rank's file, read "
                             "together (the job's ledger first, then rank 0's report)")
    parser.add_argument("-o", "--output", type=Path,
                        help="the HTML file (default: RESULTS with .html)")
    parser.add_argument("--title", help="the report's title")
    parser.add_argument("--png-dir", type=Path, help="also save each plot as a PNG file here")
    parser.add_argument("--step", type=Path, metavar="FILE",
                        help="the step file the step replay's timeline lays the original out "
                             "from (default: the one the step record names)")
    return parser


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m param_compute.report") -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("error: the report needs matplotlib: pip install matplotlib", file=sys.stderr)
        return 2
    files = list(args.results)
    output = args.output or files[0].with_suffix(".html")
    if any(output.resolve() == path.resolve() for path in files):
        print(f"error: the report {output} would overwrite a results file; give -o",
              file=sys.stderr)
        return 2
    try:  # before anything is read: never a link, a directory, a FIFO or the input
        check_outputs({"-o/--output": output},
                      {**{f"results {i + 1}": path for i, path in enumerate(files)},
                       "step": args.step})
    except OptionsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:  # one pass; unusable lines warned (file:line) as they are met and left out
        job, first = _job(files) if len(files) > 1 else (None, files[0])
        results = stream_results(first)
        text, sweeps = build_report(results, args.title, args.png_dir, args.step,
                                    lambda note: print(f"warning: {note}", file=sys.stderr),
                                    job)
    except (ResultsFileError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        write_new(output, text)
    except OSError as exc:
        print(f"error: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"{output}: {len(sweeps)} sweep plot(s), {results.records_read} runs "
          f"({len(text) / 1024:.0f} KiB)")
    return 0


def _job(files: List[Path]) -> Tuple[Dict[str, Any], Path]:
    """Every rank's file of one job read (``analysis.job``): its ledger, and rank 0's file."""
    from param_compute.analysis.job import check_ranks, job_ledger
    from param_compute.analysis.workload_totals import read_ledger

    read = [read_ledger(str(path)) for path in files]
    ranks = check_ranks(files, [results.header for _, _, results in read])
    return job_ledger([ledger for _, ledger, _ in read], ranks), files[ranks.index(0)]


if __name__ == "__main__":
    sys.exit(main())

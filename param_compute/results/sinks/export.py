"""More outputs from the same records: CSV rows and the PyTorch OSS benchmark-database format.

Both are record sinks (``start(total)`` / ``run_done(run, record)`` / ``finish(summary)``, as
:class:`~param_compute.results.sinks.jsonl.JsonlResultWriter`), wired to ``run_benchmark --csv`` and
``--oss-json``, and both are built from a record's JSON form, so an existing results file (a
merged one, a resumed one) converts too::

    python -m param_compute.results.sinks.export RESULTS.json --csv out.csv --oss-json out_oss.json

CSV: one row per run and pass (a run without a measured pass, failed or planned, gets one row
with an empty ``pass``); times in milliseconds.

OSS JSON: a JSON list with one entry per run, pass and metric, in the layout of the PyTorch OSS
benchmark database (``benchmark{name, mode, dtype, extra_info{device, arch}}``,
``model{name, type, backend, origins}``, ``metric{name, benchmark_values, target_value}``,
``runners``, ``dependencies``) that the torchao and gpt-fast benchmark runners write. Metrics:
``latency(ms)`` (the median; p10/p90/n in its ``extra_info``), ``throughput(TFLOP/s)``,
``memory_bandwidth(GB/s)``, ``peak_memory(MB)``, ``flops_utilization`` and
``bandwidth_utilization`` (fractions of the calibrated peaks) where known. ``target_value`` is
the config's target for the metric it names (``"target"``), else 0.0, as in torchao's runner.
Only measured passes are exported.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import logging
import platform
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, TextIO

from param_compute.plan.runkey import key_of
from param_compute.plan.summary import dtypes_summary, params_summary, shapes_summary
from param_compute.results.fields import measured_passes, pass_throughput, peak_memory_mb
from param_compute.results.file import ResultsFileError, ResultsStream, stream_results
from param_compute.files import open_new
from param_compute.results.sinks.base import RecordSink

log = logging.getLogger("param_compute")

CSV_COLUMNS = ["op", "id", "status", "pass", "n", "median_ms", "p10_ms", "p90_ms", "mean_ms",
               "stdev_ms", "min_ms", "max_ms", "tflops_per_s", "gb_per_s", "flops", "bytes",
               "peak_memory_mb", "shapes", "dtypes", "params", "error"]

OSS_BENCHMARK_NAME = "param_compute"
OSS_ORIGIN = "param_compute"


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"  # microsecond resolution on millisecond times, no float noise
    return "" if value is None else value


def csv_rows(record: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    """CSV rows (dicts keyed by :data:`CSV_COLUMNS`) of one record in JSON form."""
    config = record.get("config")
    error = record.get("error") or {}
    base = {"op": record.get("op_name"), "id": record.get("id"), "status": record.get("status"),
            "shapes": shapes_summary(config), "dtypes": dtypes_summary(config),
            "params": params_summary(config),
            "error": f"{error.get('type')} ({error.get('phase')}): {error.get('message')}"
            if error else ""}
    any_pass = False
    for name, stats in measured_passes(record):
        any_pass = True
        rates = pass_throughput(record, name)
        row = dict(base, **{
            "pass": name, "n": stats.get("n"), "median_ms": stats.get("median"),
            "p10_ms": stats.get("p10"), "p90_ms": stats.get("p90"), "mean_ms": stats.get("mean"),
            "stdev_ms": stats.get("stdev"), "min_ms": stats.get("min"),
            "max_ms": stats.get("max"), "tflops_per_s": rates.get("tflops_per_s"),
            "gb_per_s": rates.get("gb_per_s"), "flops": rates.get("flops"),
            "bytes": rates.get("bytes"), "peak_memory_mb": peak_memory_mb(record, name)})
        yield {column: _cell(row.get(column)) for column in CSV_COLUMNS}
    if not any_pass:
        yield {column: _cell(base.get(column)) for column in CSV_COLUMNS}


def arch_name(sys_info: Dict[str, Any]) -> str:
    """GPU name for CUDA runs, else the CPU (as the torchao and gpt-fast runners report it)."""
    return (sys_info.get("cuda_device_name") if str(sys_info.get("device", "")).startswith("cuda")
            else None) or sys_info.get("processor") or sys_info.get("machine") \
        or platform.machine() or "unknown"


class OssContext:
    """What every OSS entry of one results file shares: device, arch, runner, dependencies."""

    def __init__(self, header: Dict[str, Any]):
        sys_info = header.get("sys_info") or {}
        options = header.get("run_options") or {}
        self.device = str(options.get("device") or sys_info.get("device") or "cpu")
        self.arch = arch_name(sys_info)
        self.backend = "torch.compile" if options.get("pt2_model") else "eager"
        self.benchmark_extra = {"device": self.device, "arch": self.arch,
                                "exec_mode": options.get("exec_mode"),
                                "cuda_graph": bool(options.get("cuda_graph")),
                                "config_file": options.get("config_file")}
        shard = header.get("shard")
        if shard:
            self.benchmark_extra["shard"] = f"{shard.get('index')}/{shard.get('count')}"
        cuda = self.device.startswith("cuda")
        self.runners = [{
            "name": sys_info.get("hostname", ""),
            "type": self.device,
            "cpu_info": sys_info.get("processor") or sys_info.get("machine") or "",
            "cpu_count": sys_info.get("cpu_count"),
            "gpu_info": sys_info.get("cuda_device_name", "") if cuda else "",
            "gpu_count": 1 if cuda else 0,
            "avail_gpu_mem_in_gb": round(sys_info["cuda_device_memory_bytes"] / 2**30, 2)
            if cuda and sys_info.get("cuda_device_memory_bytes") else None,
            "extra_info": {"platform": sys_info.get("platform"),
                           "python_version": sys_info.get("python_version")},
        }]
        self.dependencies = {"pytorch": {"repo": "pytorch/pytorch",
                                         "version": sys_info.get("pytorch_version"),
                                         "extra_info": {"cuda_version":
                                                        sys_info.get("cuda_version")}},
                             "param_compute": {"version": sys_info.get("param_compute_version")}}


#: A config target's metric -> the OSS metric it sets ``target_value`` of.
OSS_TARGET_METRICS = {"latency_ms": "latency(ms)", "tflops": "throughput(TFLOP/s)",
                      "gbps": "memory_bandwidth(GB/s)", "flops_util": "flops_utilization",
                      "bw_util": "bandwidth_utilization"}


def target_value(record: Dict[str, Any], pass_name: str, metric_name: str) -> float:
    """The record's target value where it targets this pass and metric, else 0.0."""
    target = record.get("target") or {}
    value = target.get("value")
    if OSS_TARGET_METRICS.get(str(target.get("metric"))) != metric_name \
            or target.get("pass", "forward") != pass_name \
            or not isinstance(value, (int, float)) or isinstance(value, bool):
        return 0.0
    return float(value)


def oss_entries(record: Dict[str, Any], context: OssContext) -> List[Dict[str, Any]]:
    """OSS benchmark-database entries of one record in JSON form (none unless measured)."""
    config = record.get("config")
    op, run_id = record.get("op_name"), record.get("id")
    shapes, dtypes, params = shapes_summary(config), dtypes_summary(config), params_summary(config)
    out = []
    for name, stats in measured_passes(record):
        rates = pass_throughput(record, name)
        metrics = [("latency(ms)", stats.get("median"),
                    {"statistic": "median", "p10": stats.get("p10"), "p90": stats.get("p90"),
                     "mean": stats.get("mean"), "stdev": stats.get("stdev"),
                     "n": stats.get("n")}),
                   ("throughput(TFLOP/s)",  # not where no FLOPs were counted (softmax...)
                    rates.get("tflops_per_s") if rates.get("flops") else None,
                    {"flops": rates.get("flops")}),
                   ("memory_bandwidth(GB/s)", rates.get("gb_per_s"),
                    {"bytes": rates.get("bytes")}),
                   ("peak_memory(MB)", peak_memory_mb(record, name), {}),
                   ("flops_utilization", rates.get("flops_util") if rates.get("flops") else None,
                    {"bound": rates.get("bound")}),
                   ("bandwidth_utilization", rates.get("bw_util"), {"bound": rates.get("bound")})]
        for metric_name, value, metric_extra in metrics:
            if value is None:
                continue
            out.append({
                "benchmark": {
                    "name": OSS_BENCHMARK_NAME,
                    "mode": "training" if name == "backward" else "inference",
                    "dtype": dtypes or "unknown",
                    "extra_info": dict(context.benchmark_extra, **{"pass": name}),
                },
                "model": {
                    "name": key_of(op, run_id),
                    "type": "operator",
                    "backend": context.backend,
                    "origins": [OSS_ORIGIN],
                    "extra_info": {"operator": op, "id": run_id, "shapes": shapes,
                                   "params": params},
                },
                "metric": {
                    "name": metric_name,
                    "benchmark_values": [value],
                    "target_value": target_value(record, name, metric_name),
                    "extra_info": metric_extra,
                },
                "runners": context.runners,
                "dependencies": context.dependencies,
            })
    return out


# --- sinks ----------------------------------------------------------------------------------

class CsvExporter(RecordSink):
    """Record sink: a CSV file, one row per run and pass, flushed as each run ends.

    ``rebuild_from`` (the results file, given on ``--resume`` and ``-a``): at the end the CSV is
    rewritten from every record in that file, so it holds the runs of earlier attempts too and
    agrees with the results. A write that fails mid-run (a full disk) is reported once and the
    run goes on; the file is rebuilt from the results at the end where possible.
    """

    def __init__(self, path: Path, rebuild_from: Optional[Path] = None):
        self.path = Path(path)
        self.rebuild_from = rebuild_from
        self.stream: Optional[TextIO] = None
        self.writer = None
        self.failed: Optional[str] = None

    def start(self, total: Optional[int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.stream = open_new(self.path)
        self.writer = csv.DictWriter(self.stream, fieldnames=CSV_COLUMNS, lineterminator="\n")
        self._guarded(self.writer.writeheader)

    def _guarded(self, action) -> None:
        if self.failed is not None:
            return
        try:
            action()
            self.stream.flush()
        except OSError as exc:
            self.failed = exc.strerror or str(exc)
            log.warning("--csv %s: cannot write (%s); the run goes on, the CSV is rebuilt from "
                        "the results at the end", self.path, self.failed)

    def run_done(self, run, record) -> None:
        if record is None:
            return
        self._guarded(lambda: self.writer.writerows(csv_rows(record.to_json())))

    def finish(self, summary) -> None:
        try:
            self.stream.close()
        except OSError:
            pass
        if self.rebuild_from is not None or self.failed is not None:
            rebuild_exports(self.rebuild_from, csv_path=self.path)


class OssJsonExporter(RecordSink):
    """Record sink: the OSS benchmark-database JSON list, written when the run ends (from every
    record of the results file ``rebuild_from`` on ``--resume`` and ``-a``)."""

    def __init__(self, path: Path, header: Dict[str, Any], rebuild_from: Optional[Path] = None):
        self.path = Path(path)
        self.context = OssContext(header)
        self.rebuild_from = rebuild_from
        self.entries: List[Dict[str, Any]] = []

    def start(self, total: Optional[int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.entries.clear()

    def run_done(self, run, record) -> None:
        if record is not None and record.passes:
            self.entries.extend(oss_entries(record.to_json(), self.context))

    def finish(self, summary) -> None:
        if self.rebuild_from is not None:
            rebuild_exports(self.rebuild_from, oss_path=self.path)
            return
        try:
            write_oss_json(self.path, self.entries)
        except OSError as exc:
            log.error("--oss-json %s: cannot write: %s", self.path, exc.strerror or exc)


def rebuild_exports(results: Optional[Path], csv_path: Optional[Path] = None,
                    oss_path: Optional[Path] = None) -> None:
    """Rewrite the CSV and/or OSS JSON from every record of a results file (after a resume or
    an append, or a failed write): the exports then agree with the results."""
    if results is None:
        log.error("--csv %s: incomplete (a write failed)", csv_path)
        return
    try:
        export_stream(ResultsStream(results), csv_path, oss_path)
    except (OSError, ResultsFileError) as exc:
        log.error("%s: cannot rebuild from %s: %s", csv_path or oss_path, results,
                  getattr(exc, "strerror", None) or exc)


class OssJsonWriter:
    """Writes the OSS JSON list one entry at a time, an entry per line (the C JSON encoder: an
    indented dump is several times slower on big files), without holding the list."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.entries = 0

    def write(self, entry: Dict[str, Any]) -> None:
        self.stream.write(("[\n" if not self.entries else ",\n") + json.dumps(entry))
        self.entries += 1

    def close(self) -> None:
        self.stream.write("\n]\n" if self.entries else "[]\n")


def write_oss_json(path: Path, entries: Iterable[Dict[str, Any]]) -> int:
    """Write OSS entries as a JSON list; the number written."""
    with open_new(Path(path)) as stream:
        writer = OssJsonWriter(stream)
        for entry in entries:
            writer.write(entry)
        writer.close()
    return writer.entries


def write_csv(path: Path, records: Iterable[Dict[str, Any]]) -> int:
    with open_new(Path(path)) as stream:
        writer = csv.DictWriter(stream, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        rows = 0
        for record in records:
            for row in csv_rows(record):
                writer.writerow(row)
                rows += 1
    return rows


def export_stream(results: ResultsStream, csv_path: Optional[Path] = None,
                  oss_path: Optional[Path] = None) -> Dict[str, int]:
    """CSV and/or OSS JSON of a results file in one pass, a record at a time (memory flat in
    the file's size): ``{"rows": CSV rows, "entries": OSS entries}``."""
    context = OssContext(results.header)
    with contextlib.ExitStack() as outputs:
        table = oss = None
        if csv_path is not None:
            table = csv.DictWriter(outputs.enter_context(open_new(Path(csv_path))),
                                   fieldnames=CSV_COLUMNS, lineterminator="\n")
            table.writeheader()
        if oss_path is not None:
            oss = OssJsonWriter(outputs.enter_context(open_new(Path(oss_path))))
        rows = 0
        for _, record in results:
            if table is not None:
                for row in csv_rows(record):
                    table.writerow(row)
                    rows += 1
            if oss is not None:
                for entry in oss_entries(record, context):
                    oss.write(entry)
        if oss is not None:
            oss.close()
    return {"rows": rows, "entries": oss.entries if oss is not None else 0}


# --- command line: convert a results file ---------------------------------------------------

def build_parser(prog: str = "python -m param_compute.exporters") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Convert a results file to CSV and/or the PyTorch OSS benchmark-database "
                    "JSON format.")
    parser.add_argument("results", type=Path, help="a results file (JSON Lines)")
    parser.add_argument("--csv", type=Path, help="write one row per run and pass here")
    parser.add_argument("--oss-json", type=Path, help="write OSS benchmark-database JSON here")
    return parser


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m param_compute.exporters") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.csv is None and args.oss_json is None:
        parser.error("nothing to write: give --csv and/or --oss-json")
    try:
        counts = export_stream(stream_results(args.results), args.csv, args.oss_json)
    except ResultsFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write: {exc}", file=sys.stderr)
        return 2
    if args.csv is not None:
        print(f"{args.csv}: {counts['rows']} rows")
    if args.oss_json is not None:
        print(f"{args.oss_json}: {counts['entries']} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())

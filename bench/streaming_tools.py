#!/usr/bin/env python
"""Streaming results tools: peak memory and time of each tool on a big results file.

Target (issue 20): every tool that reads results reads them in one pass with memory bounded by
the number of runs, not records or bytes; on a results file of 300,000 records (about 300 MB),
``compare`` and ``exporters`` peak below 500 MB RSS (before: compare ran out of 4 GB, exporters
took 2.2 GB). ``merge``, ``workload_totals`` and ``report`` are measured on the same file and held
to their own limits (``LIMITS_MB``).

The file is generated in a temporary folder: a shard header (shard 0 of 1, so ``merge`` takes
it), records of 10 operators with 16 measured times each, stats, throughput, a captured
``count`` and ``original_us``, and a finish line. Each tool is a fresh ``python -m`` child; its
peak RSS and CPU time come from ``os.wait4`` (that child alone), wall time around it. Every
output is checked (the CSV's rows, the merged file's runs, the compare verdicts...).

    python bench/streaming_tools.py                      # 300,000 records (a few minutes)
    python bench/streaming_tools.py --records 30000 --tools compare exporters

``compare`` runs with ``--resamples 0`` (the Mann-Whitney test alone decides): the bootstrap
interval costs a few ms per run, about 15 minutes for 300,000 runs on the reference machine,
and changes nothing about memory. Exit status: 0 every limit met, 1 a limit missed, 2 a tool
failed or wrote a wrong output.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parent.parent

#: Peak RSS limits (MB) at the default 300,000 records.
LIMITS_MB = {"compare": 500, "exporters": 500, "merge": 500, "workload_totals": 500,
             "report": 500}
OPS = [f"torch.op{k}" for k in range(10)]
SAMPLES = 16


def _record(i: int) -> Dict:
    op = OPS[i % len(OPS)]
    factor = 1 + (i % 97) / 100
    times = [round(0.01 * factor * (1 + 0.01 * k), 6) for k in range(SAMPLES)]
    ordered = sorted(times)
    median = (ordered[SAMPLES // 2 - 1] + ordered[SAMPLES // 2]) / 2
    width = 16 * (i // len(OPS) % 64 + 1)
    return {
        "op_name": op, "id": f"0|0|0_{i // len(OPS)}", "status": "ok", "count": 1 + i % 7,
        "original_us": {"cpu": 12.5, "device": 9.75},
        "metric": {"forward": {"warmup.time": times[:4], "measure.time": times,
                               "warmup.gpu.memory": [0] * 4,
                               "measure.gpu.memory": [0] * SAMPLES,
                               "measure.iterations": [SAMPLES]}},
        "stats": {"forward": {"n": SAMPLES, "mean": sum(times) / SAMPLES, "median": median,
                              "min": ordered[0], "max": ordered[-1], "stdev": 0.0005,
                              "p10": ordered[1], "p90": ordered[-2], "iqr": 0.0008,
                              "cv": 0.05, "ci_low": ordered[3], "ci_high": ordered[-4],
                              "ci_rel_width": 0.06}},
        "throughput": {"forward": {"flops": 64 * width, "bytes": 8 * 64 * width,
                                   "tflops_per_s": 1e-6, "gb_per_s": 0.4}},
        "config": {"build": None, "input": {
            "args": [{"type": "tensor", "dtype": "float", "shape": [64, width]},
                     {"type": "tensor", "dtype": "float", "shape": [64, width]}],
            "count": 1 + i % 7, "original_us": {"cpu": 12.5, "device": 9.75}}},
    }


def generate(path: Path, records: int) -> int:
    header = {"run_options": {"device": "cpu", "num_threads": 1, "exec_mode": "discrete",
                              "warmup": 4, "iteration": SAMPLES},
              "sys_info": {"hostname": "bench", "device": "cpu"},
              "start_time": "2026-11-25T00:00:00",
              "shard": {"index": 0, "count": 1, "plan_digest": "bench", "total_runs": records,
                        "ops": OPS}}
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n")
        for i in range(records):
            out.write(json.dumps(_record(i)) + "\n")
        out.write(json.dumps({"finish_time": "2026-11-25T01:00:00", "runs_ok": records,
                              "runs_failed": 0, "runs_dry": 0}) + "\n")
    return path.stat().st_size


def _run(argv: List[str]) -> Tuple[int, float, float, float, str]:
    """(exit status, wall s, CPU s, peak RSS MB, output head) of one child process: its output
    goes to a file, ``os.wait4`` reaps it and gives that child's own resource usage. (A child
    starts from a copy of this process, whose peak it inherits: this process stays small, and
    reads the tools' outputs a line at a time.)"""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, *argv], env=env, stdout=log, stderr=log,
                                 cwd=REPO)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    return (child.returncode, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
            text[:4000])


def _lines(path: Path, prefix: bytes = b"") -> int:
    """How many lines of a file start with ``prefix``, read a line at a time."""
    with open(path, "rb") as stream:
        return sum(1 for line in stream if line.startswith(prefix))


def _check(tool: str, work: Path, records: int, output: str) -> str:
    """What is wrong with a tool's output, or ''."""
    if tool == "compare":
        rows = _lines(work / "compare.csv") - 1
        if "regression gate passed" not in output:
            return "the gate did not pass a file compared with itself"
        return "" if rows == records else f"{rows} CSV rows, expected {records}"
    if tool == "exporters":
        rows = _lines(work / "runs.csv") - 1
        # latency, throughput, bandwidth and peak memory of each record's forward pass
        entries = _lines(work / "oss.json", b"{\"benchmark\": {")
        if rows != records:
            return f"{rows} CSV rows, expected {records}"
        return "" if entries == 4 * records else f"{entries} OSS entries"
    if tool == "merge":
        lines = _lines(work / "merged.json")
        return "" if lines == records + 2 else f"{lines - 2} merged runs"
    if tool == "workload_totals":
        return "" if f"in {records} configs" in output else "wrong totals"
    if tool == "report":
        size = (work / "report.html").stat().st_size
        return "" if size > 0 and "sweep plot(s)" in output else "no report"
    return ""


def commands(work: Path, results: Path) -> Dict[str, List[str]]:
    return {
        "compare": ["-m", "param_compute.compare", str(results), str(results),
                    "--resamples", "0", "--csv", str(work / "compare.csv"),
                    "--fail-on-regression", "20", "--max-rows", "20"],
        "exporters": ["-m", "param_compute.exporters", str(results),
                      "--csv", str(work / "runs.csv"), "--oss-json", str(work / "oss.json")],
        "merge": ["-m", "param_compute.merge", "-o", str(work / "merged.json"),
                  str(results)],
        "workload_totals": ["-m", "param_compute.workload_totals", str(results)],
        "report": ["-m", "param_compute.report", str(results), "-o",
                   str(work / "report.html")],
    }


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--tools", nargs="+", choices=sorted(LIMITS_MB),
                        default=list(LIMITS_MB))
    args = parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    failed = missed = False
    with tempfile.TemporaryDirectory(prefix="streaming_tools_") as tmp:
        work = Path(tmp)
        results = work / "results.json"
        start = time.perf_counter()
        size = generate(results, args.records)
        console.print(f"{results.name}: {args.records} records, {size / 1e6:.0f} MB, "
                      f"generated in {time.perf_counter() - start:.0f} s", highlight=False)
        table = Table(title=f"streaming tools on {args.records} records ({size / 1e6:.0f} MB)",
                      title_justify="left")
        for column in ("tool", "exit", "wall s", "CPU s", "peak RSS MB", "limit MB", ""):
            table.add_column(column, justify="left" if column in ("tool", "") else "right")
        for tool in args.tools:
            code, wall, cpu, rss, output = _run(commands(work, results)[tool])
            wrong = f"exit {code}: {output.strip()[-300:]}" if code != 0 else \
                _check(tool, work, args.records, output)
            limit = LIMITS_MB[tool]
            over = rss > limit
            failed |= bool(wrong)
            missed |= over
            table.add_row(tool, str(code), f"{wall:.1f}", f"{cpu:.1f}", f"{rss:.0f}",
                          str(limit), wrong or ("MISSED" if over else "ok"))
        console.print(table)
    return 2 if failed else 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

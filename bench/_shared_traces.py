"""Capture fidelity over real traces recorded by others (``../shared/traces``): one row per trace.

Columns: trace nodes; calls at the replay level (of the captured step); calls captured; configs
replayed on the running device (every config, one timed call each, or with ``sample`` the
smallest config of each op); coverage by count (captured / calls) and by original time (captured
/ total, CPU and device, where a Kineto trace of the same run is beside it). With a GPU and a
Kineto trace, also the replayed time per op beside the original (``workload_totals``).
Used by ``capture_fidelity.py --traces DIR``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from rich.table import Table

import param_compute
from param_compute.capture import capture_execution_trace
from param_compute.capture.sample import smallest_per_op
from param_compute.capture.trace.files import read_execution_trace
from param_compute.analysis.workload_totals import comparison_rows, format_comparison
from param_compute.results.totals import WorkloadTotals

#: trace file -> its Kineto trace, where one was recorded in the same process.
TRACES = {"resnet_et.json.gz": None, "resnet_1gpu_et.json.tar.gz": None,
          "linear_et.json.gz": "linear_kineto.json.gz", "pt2_et.json.tar.gz": None}


def trace_row(folder: Path, name: str, device: str, sample: bool) -> Dict[str, Any]:
    kineto = TRACES.get(name)
    kineto_path = folder / kineto if kineto and (folder / kineto).exists() else None
    start = time.perf_counter()
    nodes = len(read_execution_trace(folder / name)["nodes"])
    workload = capture_execution_trace(folder / name, kineto=kineto_path,
                                       target_device=device)
    capture_s = time.perf_counter() - start
    spec = workload.spec()
    to_run = smallest_per_op(spec) if sample else spec
    result = param_compute.run(to_run, device=device, warmup=1 if kineto_path else 0,
                               iteration=5 if kineto_path else 1, throughput=False)
    ok = sum(1 for r in result.records if r["status"] == "ok")
    failures = sorted({f"{r['op_name']}: {(r.get('error') or {}).get('type')}"
                       for r in result.records if r["status"] != "ok"})
    row = {"trace": name, "nodes": nodes, "calls": workload.calls,
           "captured": workload.captured_calls, "configs": workload.configs,
           "replayed": ok, "replay_runs": len(result.records), "failures": failures,
           "capture_s": round(capture_s, 1),
           "not_captured": workload.groups(), "strides": workload.strides,
           "steps": workload.steps.to_json() if workload.steps else None}
    if workload.kineto is not None:
        coverage = workload.time_coverage()
        row["time"] = {side: (coverage["captured_us"][side] / coverage["total_us"][side]
                              if coverage["total_us"][side] else None)
                       for side in ("cpu", "device")}
        totals = WorkloadTotals()
        for record in result.records:
            totals.add_json(record)
        if not sample:  # a sample's replayed totals would not cover the original's calls
            row["per_op"] = comparison_rows(totals)
    return row


def shared_traces_table(console, folder: Path, device: str, sample: bool
                        ) -> List[Dict[str, Any]]:
    table = Table(title=f"capture of real traces ({folder}), replayed on {device}"
                        + (" (smallest config per op)" if sample else " (every config)"),
                  title_justify="left")
    for column in ("trace", "nodes", "calls", "captured", "replayed on " + device,
                   "coverage by count", "by original time (cpu / device)"):
        table.add_column(column, justify="left" if column == "trace" else "right")
    rows = []
    for name in TRACES:
        if not (folder / name).exists():
            continue
        row = trace_row(folder, name, device, sample)
        rows.append(row)
        by_time = "-"
        if "time" in row:
            by_time = " / ".join(f"{v:.1%}" if v is not None else "-"
                                 for v in row["time"].values())
        table.add_row(name, str(row["nodes"]), str(row["calls"]), str(row["captured"]),
                      f"{row['replayed']}/{row['replay_runs']}",
                      f"{row['captured'] / row['calls']:.1%}" if row["calls"] else "-",
                      by_time)
    console.print(table)
    for row in rows:
        lost = "; ".join(f"{g['calls']} {g['kind']} ({', '.join(g['ops'])})"
                         for g in row["not_captured"]) or "nothing"
        console.print(f"{row['trace']}: not captured: {lost}; failed replays: "
                      f"{row['failures'] or 'none'}", highlight=False, soft_wrap=True)
        if row.get("per_op"):
            console.print(format_comparison(row["per_op"]), highlight=False)
    return rows


def default_folder() -> Optional[Path]:
    folder = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
    return folder if folder.is_dir() else None

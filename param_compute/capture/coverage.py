"""A capture's summary: one short line per thing a user must know, and original time covered.

Steps captured, how input layouts were obtained, each group of calls not captured (its kind,
calls and first ops), configs without a kernel on the target device, and, with a Kineto trace
joined, the share of the original CPU and device time the captured calls account for; the
step's compiled regions (``torch.compile``): captured as graphs live, or, from a trace, the
time inside them no captured call accounts for, counted as not covered.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from param_compute.capture.accounting import OriginalTimes
from param_compute.capture.portable import can_check, missing_kernels
from param_compute.formatting import printable


def time_coverage(captured: List[Tuple[str, OriginalTimes]],
                  skipped: List[Tuple[str, OriginalTimes]]) -> Dict[str, Any]:
    """Original time (µs, from a Kineto join) captured vs not, in all and per op."""
    per_op: Dict[str, Dict[str, float]] = {}

    def add(op: str, times: OriginalTimes, is_captured: bool) -> None:
        row = per_op.setdefault(op, {"cpu_captured": 0.0, "cpu_total": 0.0,
                                     "device_captured": 0.0, "device_total": 0.0})
        row["cpu_total"] += times.cpu
        row["device_total"] += times.device
        if is_captured:
            row["cpu_captured"] += times.cpu
            row["device_captured"] += times.device

    for op, times in captured:
        add(op, times, True)
    for op, times in skipped:
        add(op, times, False)
    totals = {key: sum(row[key] for row in per_op.values())
              for key in ("cpu_captured", "cpu_total", "device_captured", "device_total")}
    ranked = sorted(per_op.items(), key=lambda kv: -(kv[1]["device_total"]
                                                     or kv[1]["cpu_total"]))
    return {"captured_us": {"cpu": round(totals["cpu_captured"], 1),
                            "device": round(totals["device_captured"], 1)},
            "total_us": {"cpu": round(totals["cpu_total"], 1),
                         "device": round(totals["device_total"], 1)},
            "per_op": {op: {k: round(v, 1) for k, v in row.items()} for op, row in ranked}}



def region_rows(regions, ops: Dict[str, Any], skipped: Dict[str, OriginalTimes],
                skipped_calls: Dict[str, int]) -> Dict[str, Any]:
    """A live capture's compiled regions (``regions``: its ``capture.live.compiled``
    recorder): every graph Inductor compiled, with the calls the captured steps made of it
    (``ops``: the workload's ``graph::NAME`` configs; ``skipped``: the original times of
    calls not captured, by op), their original time, and whether it was captured as a graph
    or why not."""
    rows = []
    for record in regions.graphs:
        entries = list((ops.get(record.op) or {}).get(record.name, {}).values())
        times = OriginalTimes()
        for entry in entries:
            times.cpu += entry["original"].cpu
            times.device += entry["original"].device
        left = skipped.get(record.op)
        if left is not None:
            times.cpu += left.cpu
            times.device += left.device
        captured = sum(entry["count"] for entry in entries)
        row = {**record.to_json(), "calls": captured + skipped_calls.get(record.op, 0),
               "captured_calls": captured,
               "time_us": {"cpu": round(times.cpu, 1), "device": round(times.device, 1)}}
        rows.append(row)
    ran = [row for row in rows if row["calls"]]
    return {"count": len(ran), "captured_as_graphs": sum(1 for r in ran if r["captured_calls"]),
            "calls": sum(r["calls"] for r in ran),
            "time_us": {side: round(sum(r["time_us"][side] for r in ran), 1)
                        for side in ("cpu", "device")},
            "graphs": rows, "graph_breaks": regions.graph_breaks(),
            "other_backend_graphs": regions.other_backend_graphs(),
            "replay": "each captured graph is the config graph::NAME (its graph in the spec's "
                      "__graphs__), compiled with Inductor when the replay starts; "
                      "--eager-regions runs the region as PyTorch runs it uncompiled "
                      "instead (each graph's 'eager' says how)"}


def _live_region_lines(regions: Dict[str, Any]) -> List[str]:
    """The summary's lines for a live capture's compiled regions."""
    lines = []
    if regions["count"]:
        names = ", ".join(f"graph::{r['graph']}" for r in regions["graphs"]
                          if r["captured_calls"])[:300]
        lines.append(f"  compiled regions: {regions['count']} graphs ran "
                     f"({regions['calls']} calls, {regions['time_us']['cpu'] / 1e3:.3f} ms "
                     f"original), {regions['captured_as_graphs']} captured as graphs"
                     + (f", replayed compiled by Inductor (--eager-regions: as PyTorch runs "
                        f"them uncompiled): {names}" if names else ""))
    for row in regions["graphs"]:
        if row["calls"] and not row["captured_calls"]:
            lines.append(f"  not captured as a graph: {row['graph']} ({row['pass']} of region "
                         f"{printable(row['region'], 40)}, {row['calls']} calls): "
                         f"{printable(row.get('reason'), 200)}: not covered")
    if regions["graph_breaks"]:
        first = regions["graph_breaks"][0]
        lines.append(f"  graph breaks: {sum(b['count'] for b in regions['graph_breaks'])} "
                     f"(the code between regions captured op by op): {first['reason'][:160]}"
                     + (" ..." if len(regions["graph_breaks"]) > 1 else ""))
    if regions["other_backend_graphs"]:
        lines.append(f"  {regions['other_backend_graphs']} compiled graphs of another backend "
                     "than Inductor: their aten ops captured as that backend ran them")
    return lines


def values_unknown_lines(workload) -> List[str]:
    """One line for the calls that read an optimizer's state without its values: what a
    replay will not know, and the remedy (``capture.trace.value_blind``)."""
    unknown = getattr(workload, "values_unknown", None) or {}
    if not unknown:
        return []
    calls = sum(entry["calls"] for entry in unknown.values())
    ops = ", ".join(f"{printable(op, 60)} x{entry['calls']}"
                    for op, entry in list(sorted(unknown.items(),
                                                 key=lambda item: -item[1]["calls"]))[:4])
    optimizers = ", ".join(sorted({printable(e["optimizer"], 40) for e in unknown.values()}))
    given = getattr(workload, "subnormal_state", None)
    if given:
        return [f"  values: {calls} calls read {optimizers}'s state ({ops}); its values are "
                f"not in the trace: --subnormal-state {given['fraction']:g} made "
                f"{given['tensors']} of its {given['of']} tensors subnormal (whole tensors)"]
    return [f"  values unknown: {calls} calls read {optimizers}'s state ({ops}); the trace has "
            "no values, and subnormal state makes them several times slower on a CPU: the "
            "replay generates ordinary values. Capture live (capture --run) for the measured "
            "value profile, or give one (--subnormal-state FRACTION)"]


def summary_lines(workload) -> List[str]:
    """The summary, then one short line per thing a user must know (steps, layouts, each
    group of calls not captured, configs without a kernel on the target, original time)."""
    lines = [workload.summary()]
    if workload.steps is not None:
        lines.append(f"  steps: {workload.steps.describe()}")
    if workload.nesting is not None:
        lines.append(f"  nesting: {workload.nesting['links']} parent links rebuilt (a "
                     "collective's backend span shifted the trace observer's stack; "
                     "nesting_repaired in the report says how)")
    if workload.strides is not None and not workload.strides.get("recorded"):
        lines.append(f"  layouts: the trace records no strides; recovered from its views "
                     f"on meta tensors: {workload.strides.get('recovered_inputs', 0)} strided "
                     f"(non-contiguous) inputs in {workload.strides.get('recovered_calls', 0)}"
                     " calls")
        left_out = workload.strides.get("not_replayed") or {}
        if left_out:
            shown = "; ".join(printable(r, 200) for r in list(left_out)[:3]) \
                + (" ..." if len(left_out) > 3 else "")
            lines.append(f"  layouts: {sum(left_out.values())} calls not replayed on meta "
                         f"tensors (traces are data: only listed pure tensor ops run), their "
                         f"outputs taken as contiguous: {shown}")
    for group in workload.groups():
        ops = ", ".join(f"{printable(op, 80)} x{n}" for op, n in list(group["ops"].items())[:3])
        more = len(group["ops"]) - 3
        lines.append(f"  not captured: {group['calls']} calls, {group['what']}: {ops}"
                     + (f" and {more} more" if more > 0 else ""))
    if not can_check(workload.target_device):
        lines.append(f"  kernels on {workload.target_device} not checked: this torch build has "
                     "no such backend")
    missing = missing_kernels(workload.spec(), workload.target_device)
    if missing:
        names = ", ".join(item["qualified"] for item in missing[:4])
        lines.append(f"  no kernel on {workload.target_device}: "
                     f"{sum(item['configs'] for item in missing)} configs "
                     f"({sum(item['calls'] for item in missing)} calls) of {names}"
                     + (" ..." if len(missing) > 4 else "") + ": they will fail there")
    lines += values_unknown_lines(workload)
    if workload.kineto is not None:
        cover = workload.time_coverage()
        parts = []
        for side in ("cpu", "device"):
            total = cover["total_us"][side]
            if total:
                parts.append(f"{side} {100 * cover['captured_us'][side] / total:.1f}% of "
                             f"{total / 1e3:.3f} ms")
        origin = "Kineto" if "real_step_us" not in workload.kineto else "timed in place"
        lines.append(f"  original time ({origin}: {workload.kineto.get('joined_calls', 0)} of "
                     f"{workload.kineto.get('calls', 0)} calls joined): captured "
                     + (", ".join(parts) or "no time recorded"))
        if "real_step_us" in workload.kineto:
            lines.append(f"  real step (unprofiled): {workload.kineto['real_step_us'] / 1e3:.3f}"
                         " ms")
        step = getattr(workload, "step", None)
        host = getattr(step, "real_host_us", None)
        if host is not None and any("gap_us" in call for call in step.calls):  # as written
            how = ("the profiled step window less the profiler's cost: an upper bound, kept "
                   "by --host-gaps on, not auto" if step.real_host_from == "profiled"
                   else "to the step's return")
            lines.append(f"  its host time: {host / 1e3:.3f} ms ({how}; with where the host "
                         "spent it between calls, for --replay-step --host-gaps)")
        cost = workload.kineto.get("profiler_cost")
        if cost:
            lines.append(f"  profiler cost subtracted: {cost['per_call_us']:.2f} µs per "
                         f"profiled call ({cost['calibrated_from']})")
    regions = workload.compiled_regions()
    if regions is not None:
        if "graphs" in regions:
            lines += _live_region_lines(regions)
        else:
            from param_compute.capture.trace.compiled import summary_line

            line = summary_line(regions)
            if line:
                lines.append(line)
    return lines


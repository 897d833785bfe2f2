"""Compiled regions in a trace: their spans, and the time inside them no captured call explains.

Code ``torch.compile`` generated is not a call in either trace: Inductor's kernels (C++ on a
CPU, Triton on a GPU) have no aten schema, and on a CPU not even a record of their own. What the
traces do hold is where the compiled code ran: Kineto marks each region's forward as a
``Torch-Compiled Region: N/M`` span (``CompiledFunction`` inside it) and its backward as a
``CompiledFunctionBackward`` span, and the execution trace has the same nodes. The few calls
inside (``aten::mm`` that Inductor leaves to an extern kernel) are captured like any; the rest
of each span is the region's own code, which a capture of its calls leaves out. Counting only
the calls would claim a step fully covered while a third of it was compiled code no replay
runs.

``trace_regions`` finds the outermost region spans of the captured step window (forward:
``Torch-Compiled Region: N/M``, or a ``CompiledFunction`` outside one; backward:
``CompiledFunctionBackward``), each named by its region (the k-th backward paired with the
k-th last forward, as autograd runs them, where their numbers agree), and gives each one's
CPU time (less the profiler's calibrated cost, as every call's), the part the calls joined
inside it account for, and the rest: *compiled region kernels*, counted as not covered. On a
GPU trace, the kernels launched inside a region (on its thread, within its span) that no call
inside it launched are the region's own (Inductor's Triton kernels) and give its device time.
Without a Kineto trace only the regions' number is known, from the execution trace's nodes.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

from param_compute.formatting import printable

_FORWARD = re.compile(r"Torch-Compiled Region: [0-9]+/[0-9]+\Z")
FORWARD_NAMES = ("CompiledFunction",)
BACKWARD_NAMES = ("CompiledFunctionBackward",)
#: What the summary, the ledger and the report call a region's time no call accounts for.
KERNELS = "compiled region kernels"


def region_kind(name: Any) -> Optional[str]:
    """``forward`` or ``backward`` for a compiled region's span name, else None."""
    if not isinstance(name, str):
        return None
    if _FORWARD.match(name) or name in FORWARD_NAMES:
        return "forward"
    if name in BACKWARD_NAMES:
        return "backward"
    return None


def _outermost(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The region spans not inside another region span on the same thread, in time order."""
    spans = sorted((e for e in events if region_kind(e.get("name"))),
                   key=lambda e: (e.get("pid"), e.get("tid"), float(e.get("ts", 0)),
                                  -float(e.get("dur", 0))))
    out, end = [], {}
    for event in spans:
        thread = (event.get("pid"), event.get("tid"))
        start = float(event.get("ts", 0))
        if thread in end and start < end[thread]:
            continue
        end[thread] = start + float(event.get("dur", 0))
        out.append(event)
    return sorted(out, key=lambda e: float(e.get("ts", 0)))


def _labels(spans: List[Dict[str, Any]]) -> List[str]:
    """Each span's region name; backward spans paired with forward ones in reverse order."""
    forward = [e["name"] for e in spans if region_kind(e["name"]) == "forward"]
    backward = [e for e in spans if region_kind(e["name"]) == "backward"]
    paired = len(forward) == len(backward)
    labels, k = [], 0
    for event in spans:
        if region_kind(event["name"]) == "forward":
            labels.append(event["name"])
        else:
            labels.append(f"{forward[len(forward) - 1 - k]} (backward)" if paired
                          else f"{event['name']} #{k + 1}")
            k += 1
    return labels


def _inside(spans: List[Tuple[float, float, Any]], starts: List[float], start: float,
            end: float) -> List[Any]:
    """The items of ``spans`` (sorted (start, end, item)) lying wholly within [start, end]."""
    low = bisect.bisect_left(starts, start)
    high = bisect.bisect_right(starts, end)
    return [item for s, e, item in spans[low:high] if e <= end]


def trace_regions(join, et_regions: int = 0) -> Dict[str, Any]:
    """The compiled regions of a Kineto trace's step window (``join``: its
    ``kineto.KinetoJoin``): count, time, and per region its CPU and device time, the part the
    joined calls inside account for, and the rest (``uncovered``: (label, (cpu µs, device
    µs)) per region, per iteration of the execution trace's work)."""
    cpu = join.cpu
    spans = _outermost(cpu)
    per_iteration = max(1, int(join.summary.get("iterations_per_call") or 1))
    if not spans:
        return {"count": et_regions, "captured_as_graphs": 0, "time_us": None,
                "regions": [], "uncovered": [],
                "why": None if not et_regions else "the Kineto trace has no compiled region "
                       "spans in the step window: their time is unknown"}
    cost = join.cost
    joined: Dict[Any, List[Tuple[float, float, Dict[str, Any]]]] = defaultdict(list)
    for event in join.joined:
        start = float(event.get("ts", 0))
        joined[(event.get("pid"), event.get("tid"))].append(
            (start, start + float(event.get("dur", 0)), event))
    starts = {}
    for thread, items in joined.items():
        items.sort(key=lambda item: item[0])
        starts[thread] = [item[0] for item in items]
    rows: Dict[str, Dict[str, Any]] = {}
    span_of: Dict[Any, List[Tuple[float, float, str]]] = defaultdict(list)
    for event, label in zip(spans, _labels(spans)):
        thread = (event.get("pid"), event.get("tid"))
        start = float(event.get("ts", 0))
        end = start + float(event.get("dur", 0))
        own = cost.corrected(event) if cost is not None else end - start
        calls = _inside(joined.get(thread, []), starts.get(thread, []), start, end)
        covered = sum(cost.corrected(e) if cost is not None else float(e.get("dur", 0))
                      for e in calls)
        row = rows.setdefault(label, {"region": label, "spans": 0, "cpu_us": 0.0,
                                      "calls_inside": 0, "covered_cpu_us": 0.0,
                                      "device_us": 0.0, "kernels": 0})
        row["spans"] += 1
        row["cpu_us"] += own
        row["calls_inside"] += len(calls)
        row["covered_cpu_us"] += min(own, covered)
        span_of[thread].append((start, end, label))
    _attribute_kernels(join, rows, span_of)
    regions, uncovered = [], []
    for row in rows.values():
        for key in ("cpu_us", "covered_cpu_us", "device_us"):
            row[key] = round(row[key] / per_iteration, 1)
        row["spans"] = max(1, row["spans"] // per_iteration)
        row["not_covered_us"] = {"cpu": round(max(0.0, row["cpu_us"] - row["covered_cpu_us"]),
                                              1),
                                 "device": row["device_us"] if join.device_kernels else None}
        regions.append(row)
        uncovered.append((f"{KERNELS}: {row['region']}",
                          (row["not_covered_us"]["cpu"], row["not_covered_us"]["device"])))
    total_cpu = round(sum(r["cpu_us"] for r in regions), 1)
    return {"count": len(spans) // per_iteration or len(spans), "captured_as_graphs": 0,
            "time_us": {"cpu": total_cpu,
                        "device": round(sum(r["device_us"] for r in regions), 1)
                        if join.device_kernels else None},
            "not_covered_us": {"cpu": round(sum(r["not_covered_us"]["cpu"] for r in regions),
                                            1),
                               "device": round(sum(r["device_us"] for r in regions), 1)
                               if join.device_kernels else None},
            "regions": regions, "uncovered": uncovered,
            "how": "each region's span (Torch-Compiled Region, CompiledFunctionBackward) less "
                   "the profiler's cost, less the calls joined inside it: the rest is the "
                   "region's own code (Inductor's kernels), counted as not covered; on a GPU, "
                   "the kernels launched inside it by no captured call"}


def _attribute_kernels(join, rows: Dict[str, Dict[str, Any]],
                       span_of: Dict[Any, List[Tuple[float, float, str]]]) -> None:
    """Device kernels launched inside a region's span and not inside a joined call: the
    region's own (Inductor's), added to its ``device_us``."""
    calls_of: Dict[Any, List[Tuple[float, float]]] = defaultdict(list)
    for event in join.joined:
        start = float(event.get("ts", 0))
        calls_of[(event.get("pid"), event.get("tid"))].append(
            (start, start + float(event.get("dur", 0))))
    for items in list(calls_of.values()) + list(span_of.values()):
        items.sort()
    for kernel, launch in join.device_kernels:
        thread = (launch.get("pid"), launch.get("tid"))
        at = float(launch.get("ts", 0))
        spans = span_of.get(thread)
        if not spans:
            continue
        index = bisect.bisect_right([s[0] for s in spans], at) - 1
        if index < 0 or not spans[index][0] <= at <= spans[index][1]:
            continue
        calls = calls_of.get(thread, [])
        k = bisect.bisect_right([c[0] for c in calls], at) - 1
        if k >= 0 and calls[k][0] <= at <= calls[k][1]:
            continue  # launched by a captured call: its device time is the call's
        row = rows[spans[index][2]]
        row["device_us"] += float(kernel.get("dur", 0))
        row["kernels"] += 1


def et_region_count(nodes: List[Dict[str, Any]]) -> int:
    """Compiled regions among an execution trace's nodes (forward and backward spans, the
    outermost of each kind per region: a ``CompiledFunction`` inside ``Torch-Compiled
    Region`` is the same region)."""
    forward = sum(1 for n in nodes if isinstance(n.get("name"), str)
                  and _FORWARD.match(n["name"]))
    inner = sum(1 for n in nodes if n.get("name") in FORWARD_NAMES)
    backward = sum(1 for n in nodes if n.get("name") in BACKWARD_NAMES)
    return (forward or inner) + backward


def summary_line(regions: Dict[str, Any]) -> Optional[str]:
    """One line for the capture summary: a trace's compiled regions and what they leave out."""
    if not regions.get("count"):
        return None
    if regions.get("time_us") is None:
        return (f"  compiled regions: {regions['count']} (torch.compile): "
                f"{regions.get('why') or 'no Kineto trace: their time is unknown'}; Inductor's "
                "kernels are not calls, so a replay of the captured calls leaves them out")
    shown = "; ".join(f"{printable(r['region'], 60)} {r['cpu_us'] / 1e3:.3f} ms, "
                      f"{r['not_covered_us']['cpu'] / 1e3:.3f} ms of it not covered"
                      for r in regions["regions"][:4])
    more = len(regions["regions"]) - 4
    device = regions["not_covered_us"].get("device")
    return (f"  compiled regions: {regions['count']} (torch.compile), "
            f"{regions['not_covered_us']['cpu'] / 1e3:.3f} ms cpu"
            + (f", {device / 1e3:.3f} ms device" if device else "")
            + f" of {KERNELS} no captured call accounts for, counted as not covered "
            f"(captured as graphs only live: capture --run): {shown}"
            + (f" and {more} more" if more > 0 else ""))

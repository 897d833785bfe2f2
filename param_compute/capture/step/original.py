"""What the step file says about the original run: its op time, and what was not captured.

The fidelity ledger (``analysis.ledger``) sets a replayed step beside the original; the results
file it reads carries the step file's ``original`` (through the step replay's record), so the
ledger can name the ops that were not captured and give the original's whole op time, not
only the captured share.
"""

from __future__ import annotations

from typing import Any, Dict, Optional


def step_original(workload) -> Optional[Dict[str, Any]]:
    """``{total_us, captured_us, not_captured: [{op, calls, original_us}], how, ...}`` (CPU
    and device µs per step) when the capture knows original times, else only the calls not
    captured; ``values_unknown: [{op, calls, optimizer, profile}]`` where calls read an
    optimizer's state whose values the source did not record (the ledger names them)."""
    calls_by_op: Dict[str, int] = {}
    for group in workload.groups():
        for op, calls in group["ops"].items():
            calls_by_op[op] = calls_by_op.get(op, 0) + calls
    out: Dict[str, Any] = {}
    if workload.kineto is not None:
        cover = workload.time_coverage()
        out["total_us"] = cover["total_us"]
        out["captured_us"] = cover["captured_us"]
        missing = []
        for op, row in cover["per_op"].items():
            cpu = row["cpu_total"] - row["cpu_captured"]
            device = row["device_total"] - row["device_captured"]
            if cpu > 0 or device > 0 or op in calls_by_op:
                missing.append({"op": op, "calls": calls_by_op.get(op, 0),
                                "original_us": {"cpu": round(cpu, 1),
                                                "device": round(device, 1)}})
        known = {row["op"] for row in missing}
        missing += [{"op": op, "calls": calls, "original_us": None}
                    for op, calls in calls_by_op.items() if op not in known]
        out["not_captured"] = missing
        out["how"] = {key: workload.kineto[key] for key in ("file", "joined_by",
                                                            "profiler_cost")
                      if key in workload.kineto}
    else:
        out["not_captured"] = [{"op": op, "calls": calls, "original_us": None}
                               for op, calls in calls_by_op.items()]
    if getattr(workload, "values_unknown", None):
        out["values_unknown"] = workload.values_unknown_json()
    comm = workload.communication_us()
    if comm["calls"]:  # a job's rank: its collectives' time, and what compute did not hide
        exposed = (workload.distributed or {}).get("exposed_us")
        out["communication"] = {"calls": comm["calls"], "timed_calls": comm["timed_calls"],
                                "comm_us": comm["comm_us"] if comm["timed_calls"] else None,
                                **({"exposed_us": exposed} if exposed is not None else {})}
    return out

"""Original times: an execution trace's calls joined to a Kineto trace of the same run.

A Kineto trace (``torch.profiler`` Chrome-trace JSON) holds each CPU op's duration and each GPU
kernel's, linked to the launching runtime call by ``correlation``. Joining it to the execution
trace gives every captured call its original CPU time (the op's duration) and device time (the
kernels launched inside it, on any stream), so a capture can say how much of the recorded time
it covers and a replay can be set beside production.

The join: by record-function id where both traces carry one (``rf_id`` / ``Record function
id``); else by name (and input dims where Kineto recorded them), occurrence by occurrence in
start order. A Kineto trace spanning R times the execution trace's iterations joins each call
to its R occurrences (times are means over them). With a ``ProfilerStep#N`` selected and
present in both, only that step's window of the Kineto trace is used.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from param_compute.capture.trace_check import check_kineto_trace
from param_compute.capture.trace_io import read_kineto_trace
from param_compute.capture.trace_walk import Steps, TraceTree, attr
from param_compute.spec.reserved import recorded_threads

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
CPU_CATEGORIES = ("cpu_op", "user_annotation")


class KinetoJoin:
    """Per execution-trace node: (CPU µs, device µs) means per call, and a summary."""

    def __init__(self, times: Dict[Any, Tuple[Optional[float], Optional[float]]],
                 summary: Dict[str, Any]):
        self.times = times
        self.summary = summary

    def of(self, node: Dict[str, Any]) -> Optional[Tuple[Optional[float], Optional[float]]]:
        return self.times.get(node["id"])


def _events(trace: Dict[str, Any], window: Optional[Tuple[float, float]]):
    cpu, device, launches = [], [], {}
    for event in trace["traceEvents"]:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        category = event.get("cat")
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if category in CPU_CATEGORIES:
            if window is None or window[0] <= event.get("ts", 0) <= window[1]:
                cpu.append(event)
        elif category in DEVICE_CATEGORIES:
            device.append(event)
        elif category in ("cuda_runtime", "cuda_driver", "runtime") and "correlation" in args:
            launches[args["correlation"]] = event
    cpu.sort(key=lambda e: e.get("ts", 0))
    return cpu, device, launches


def _step_window(trace: Dict[str, Any], steps: Optional[Steps]) -> Optional[Tuple[float, float]]:
    if steps is None or not steps.selected:
        return None
    name = f"ProfilerStep#{steps.selected[0]}"
    for event in trace["traceEvents"]:
        if isinstance(event, dict) and event.get("name") == name and event.get("ph") == "X":
            return (event["ts"], event["ts"] + event.get("dur", 0))
    return None


def _dims_key(dims: Any) -> str:
    return json.dumps(dims, separators=(",", ":"))


def _et_dims(node: Dict[str, Any]) -> Any:
    inputs = node.get("inputs")
    return inputs.get("shapes") if isinstance(inputs, dict) else node.get("input_shapes")


def _match(tree: TraceTree, cpu: List[Dict[str, Any]], window_ids: Optional[set]
           ) -> Tuple[Dict[Any, List[Dict[str, Any]]], str]:
    """node id -> its Kineto events, and how they were joined."""
    by_rf = {}
    for event in cpu:
        rf = (event.get("args") or {}).get("Record function id")
        if rf is not None:
            by_rf[rf] = event
    nodes = [n for n in sorted(tree.nodes, key=lambda n: n["id"])
             if window_ids is None or n["id"] in window_ids]
    if by_rf:
        out = {}
        for node in nodes:
            event = by_rf.get(attr(node, "rf_id"))
            if event is not None and event.get("name") == node.get("name"):
                out[node["id"]] = [event]
        return out, "record function id"
    with_dims = any("Input Dims" in (e.get("args") or {}) for e in cpu)
    kineto_by_key: Dict[Any, List[Dict[str, Any]]] = defaultdict(list)
    for event in cpu:
        key = event.get("name")
        if with_dims:
            key = (key, _dims_key((event.get("args") or {}).get("Input Dims")))
        kineto_by_key[key].append(event)
    et_by_key: Dict[Any, List[Dict[str, Any]]] = defaultdict(list)
    for node in nodes:
        key = node.get("name")
        if with_dims:
            key = (key, _dims_key(_et_dims(node)))
        et_by_key[key].append(node)
    out = {}
    for key, et_nodes in et_by_key.items():
        events = kineto_by_key.get(key, [])
        n, m = len(et_nodes), len(events)
        if not m:
            continue
        repeats = max(1, m // n)
        for index, node in enumerate(et_nodes):
            matched = [events[index + j * n] for j in range(repeats) if index + j * n < m]
            if matched:
                out[node["id"]] = matched
    return out, "name and input dims, occurrence by occurrence" if with_dims else \
        "name, occurrence by occurrence"


def join_kineto(kineto, tree: TraceTree, nodes: List[Dict[str, Any]],
                steps: Optional[Steps] = None, max_bytes: Optional[int] = None,
                profiler_cost: bool = True) -> KinetoJoin:
    """Join ``nodes`` (the replay-level calls and the left-out ones) of an execution trace to a
    Kineto trace (a path or its parsed JSON; its events checked first, ``TraceError`` naming
    the event and field that is wrong). With ``profiler_cost``, CPU times lose the profiler's
    own per-call cost (``profiler_cost``), and the summary says how much."""
    source = None
    if not isinstance(kineto, dict):
        source = str(kineto)
        kineto = read_kineto_trace(Path(kineto), max_bytes)
    check_kineto_trace(kineto, source or "Kineto trace")
    window = _step_window(kineto, steps)
    window_ids = None
    if steps is not None and steps.selected:
        step_of = tree.step_of()
        window_ids = {i for i, number in step_of.items() if number == steps.selected[0]}
    cpu, device, launches = _events(kineto, window)
    cost = None
    if profiler_cost:
        from param_compute.capture.profiler_cost import calibrate

        cost = calibrate(cpu)
    matched, how = _match(tree, cpu, window_ids)
    wanted = {node["id"] for node in nodes}
    intervals: Dict[Any, List[Tuple[float, float, Any]]] = defaultdict(list)
    for node_id in wanted:
        for event in matched.get(node_id, []):
            intervals[(event.get("pid"), event.get("tid"))].append(
                (event["ts"], event["ts"] + event.get("dur", 0), node_id))
    starts = {}
    for thread, spans in intervals.items():
        spans.sort()
        starts[thread] = [span[0] for span in spans]
    device_us: Dict[Any, float] = defaultdict(float)
    total_device = attributed = 0.0
    for kernel in device:
        args = kernel.get("args") or {}
        launch = launches.get(args.get("correlation"))
        if launch is None:
            continue
        if window is not None and not window[0] <= launch.get("ts", 0) <= window[1]:
            continue
        duration = float(kernel.get("dur", 0))
        total_device += duration
        thread = (launch.get("pid"), launch.get("tid"))
        spans = intervals.get(thread)
        if not spans:
            continue
        at = bisect.bisect_right(starts[thread], launch["ts"]) - 1
        if at >= 0 and spans[at][0] <= launch["ts"] <= spans[at][1]:
            device_us[spans[at][2]] += duration
            attributed += duration
    times = {}
    repeats: Counter = Counter()
    for node_id in wanted:
        events = matched.get(node_id)
        if not events:
            continue
        repeats[len(events)] += 1
        cpu_us = sum(cost.corrected(e) if cost is not None else float(e.get("dur", 0))
                     for e in events) / len(events)
        dev = device_us.get(node_id, 0.0) / len(events) if device else None
        times[node_id] = (round(cpu_us, 3), None if dev is None else round(dev, 3))
    per_iteration = repeats.most_common(1)[0][0] if repeats else 1
    summary = {"file": source or "Kineto trace", "joined_by": how, "calls": len(wanted),
               "joined_calls": len(times), "iterations_per_call": per_iteration,
               "device_kernels_us": round(total_device / per_iteration, 1),
               "device_unattributed_us": round((total_device - attributed) / per_iteration, 1)}
    if window is not None:
        summary["window"] = f"ProfilerStep#{steps.selected[0]}"
    if cost is not None:
        summary["profiler_cost"] = cost.to_json()
    elif profiler_cost:
        summary["profiler_cost"] = None  # too few trivial calls to calibrate: times as recorded
    threads = recorded_threads(kineto.get("num_threads"))  # where the recording added it
    if threads is not None:
        summary["num_threads"] = threads
    return KinetoJoin(times, summary)

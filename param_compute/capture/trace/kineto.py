"""Original times: an execution trace's calls joined to a Kineto trace of the same run.

A Kineto trace (``torch.profiler`` Chrome-trace JSON) holds each CPU op's duration and each GPU
kernel's, linked to the launching runtime call by ``correlation``. Joining it to the execution
trace gives every captured call its original CPU time (the op's duration) and device time (the
kernels launched inside it, on any stream), so a capture can say how much of the recorded time
it covers and a replay can be set beside production.

The join: by record-function id where both traces carry one (``rf_id`` / ``Record function
id``); else by name (and input dims where Kineto recorded them), occurrence by occurrence in
start order. A Kineto trace spanning R times the execution trace's iterations joins each call
to its R occurrences (times are means over them; a collective's communication, the median).
With a ``ProfilerStep#N`` selected and present in both, only that step's window of the Kineto
trace is used.

Host gaps (``host_timeline``): within that window, the host time before each top-level call
(the replay-level calls and the ones left out, in the step's order) that no such call took,
and after the last, each less the profiler's calibrated cost of the records it holds; and the
step's host time, the window less that cost for every profiled call in it. A replay keeping
the gaps (``--host-gaps``) stretches its own host step to that time in their shape. Every
number is clipped to the window and checked: a trace whose window or timestamps cannot give
a sane host step gets no gaps, and the report says why.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from param_compute.spec.step_file import MAX_HOST_STEP_US, MAX_NUMBER
from param_compute.capture.trace.check import check_kineto_trace
from param_compute.capture.trace.comms import distributed_info
from param_compute.capture.trace.files import read_kineto_trace
from param_compute.capture.trace.walk import Steps, TraceTree, attr
from param_compute.spec.reserved import recorded_threads
from param_compute.results.stats import median

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: Where record-function ids join fewer of the operator calls than this, the Kineto trace is of
#: other steps (recorded apart from the execution trace): the join goes by name.
RF_JOINED = 0.5
CPU_CATEGORIES = ("cpu_op", "user_annotation")


class KinetoJoin:
    """Per execution-trace node: (CPU µs, device µs) means per call, and a summary."""

    def __init__(self, times: Dict[Any, Tuple[Optional[float], Optional[float]]],
                 summary: Dict[str, Any]):
        self.times = times
        self.summary = summary
        #: node id -> its (first) Kineto CPU event; the step window's event, its CPU events
        #: and the profiler cost calibrated from them (``host_timeline`` reads them)
        self.events: Dict[Any, Dict[str, Any]] = {}
        self.window_event: Optional[Dict[str, Any]] = None
        self.window_name: Optional[str] = None  # the ProfilerStep#N looked for
        self.cpu: List[Dict[str, Any]] = []
        self.cost = None
        #: The job as the trace describes it (``comms.distributed_info``), or None.
        self.distributed = None
        self._by_rf: Optional[Dict[Any, Dict[str, Any]]] = None
        #: node id -> its Kineto events (every node of the trace the join met)
        self.matched: Dict[Any, List[Dict[str, Any]]] = {}
        #: Every Kineto event joined to a call, and each device kernel of the window with its
        #: launch (``capture.trace.compiled`` finds the compiled regions' own time with them).
        self.joined: List[Dict[str, Any]] = []
        self.device_kernels: List[Tuple[Dict[str, Any], Dict[str, Any]]] = []

    def of(self, node: Dict[str, Any]) -> Optional[Tuple[Optional[float], Optional[float]]]:
        return self.times.get(node["id"])

    def span_us(self, node: Dict[str, Any]) -> Optional[float]:
        """The recorded duration (µs) of any node's Kineto event: a collective backend's span
        on its own thread (the median over its occurrences where the join went by name)."""
        events = self.matched.get(node.get("id")) or []
        if not events:
            event = self.event_of(node)
            events = [event] if event is not None else []
        durations = [float(e.get("dur", 0)) for e in events]
        if not durations or not all(_sane(d) for d in durations):
            return None
        return round(median(durations), 3)

    def event_of(self, node: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """Any node's Kineto event: joined to it, else by record-function id (the names
        agreeing)."""
        joined = self.matched.get(node.get("id"))
        if joined:
            return joined[0]
        if self._by_rf is None:
            self._by_rf = {}
            for event in self.cpu:
                rf = (event.get("args") or {}).get("Record function id")
                if rf is not None:
                    self._by_rf.setdefault(rf, event)
        event = self._by_rf.get(attr(node, "rf_id"))
        if event is None or event.get("name") != node.get("name"):
            return None
        return event


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


def _step_event(trace: Dict[str, Any], steps: Optional[Steps]) -> Optional[Dict[str, Any]]:
    """The selected ``ProfilerStep#N`` window's complete event, if the trace has one."""
    if steps is None or not steps.selected:
        return None
    name = f"ProfilerStep#{steps.selected[0]}"
    for event in trace["traceEvents"]:
        if isinstance(event, dict) and event.get("name") == name and event.get("ph") == "X":
            return event
    return None


def _step_window(event: Optional[Dict[str, Any]]) -> Optional[Tuple[float, float]]:
    return None if event is None else (event["ts"], event["ts"] + event.get("dur", 0))


def _sane(us: float) -> bool:
    """A duration a real run can have (the step file's bound on a time)."""
    return math.isfinite(us) and 0 <= us <= MAX_NUMBER


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
        if len(out) >= RF_JOINED * max(1, sum(1 for n in nodes if attr(n, "op_schema"))):
            return out, "record function id"
        # ids that do not meet: the Kineto trace recorded other steps of the same work (a
        # profile without the execution-trace observer's cost): joined by name instead
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
    window_event = _step_event(kineto, steps)
    window = _step_window(window_event)
    window_ids = None
    if steps is not None and steps.selected:
        step_of = tree.step_of()
        window_ids = {i for i, number in step_of.items() if number == steps.selected[0]}
    cpu, device, launches = _events(kineto, window)
    cost = None
    if profiler_cost:
        from param_compute.capture.trace.profiler_cost import calibrate

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
    refused_kernels = refused_calls = 0  # durations past any real run (hostile or broken)
    kernels = []  # (kernel, its launch) in the window
    for kernel in device:
        args = kernel.get("args") or {}
        launch = launches.get(args.get("correlation"))
        if launch is None:
            continue
        if window is not None and not window[0] <= launch.get("ts", 0) <= window[1]:
            continue
        duration = float(kernel.get("dur", 0))
        if not _sane(duration):
            refused_kernels += 1
            continue
        total_device += duration
        kernels.append((kernel, launch))
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
        cpu_us = sum(cost.corrected(e) if cost is not None else float(e.get("dur", 0))
                     for e in events) / len(events)
        dev = device_us.get(node_id, 0.0) / len(events) if device else None
        if not _sane(cpu_us) or (dev is not None and not _sane(dev)):
            refused_calls += 1
            continue
        repeats[len(events)] += 1
        times[node_id] = (round(cpu_us, 3), None if dev is None else round(dev, 3))
    per_iteration = repeats.most_common(1)[0][0] if repeats else 1
    summary = {"file": source or "Kineto trace", "joined_by": how, "calls": len(wanted),
               "joined_calls": len(times), "iterations_per_call": per_iteration,
               "device_kernels_us": round(total_device / per_iteration, 1),
               "device_unattributed_us": round((total_device - attributed) / per_iteration, 1)}
    if window is not None:
        summary["window"] = f"ProfilerStep#{steps.selected[0]}"
    if refused_calls or refused_kernels:
        summary["refused"] = (f"{refused_calls} calls and {refused_kernels} kernels with a "
                              f"duration over {MAX_NUMBER:.0e} µs: left without a time")
    if cost is not None:
        summary["profiler_cost"] = cost.to_json()
    elif profiler_cost:
        summary["profiler_cost"] = None  # too few trivial calls to calibrate: times as recorded
    threads = recorded_threads(kineto.get("num_threads"))  # where the recording added it
    if threads is not None:
        summary["num_threads"] = threads
    join = KinetoJoin(times, summary)
    join.distributed = distributed_info(kineto, source or "Kineto trace")
    join.events = {node_id: matched[node_id][0] for node_id in wanted if matched.get(node_id)}
    join.window_event, join.cpu, join.cost = window_event, cpu, cost
    join.matched = matched
    join.joined = [event for node_id in wanted for event in matched.get(node_id, [])]
    join.device_kernels = kernels
    if steps is not None and steps.selected:
        join.window_name = f"ProfilerStep#{steps.selected[0]}"
    return join


class HostTimeline:
    """Per top-level call, (host gap before it, its own host µs), both less the profiler's
    cost; the gap after the last call and the step's host time (``real_host_us``)."""

    def __init__(self, calls: Dict[Any, Tuple[float, float]], tail_us: float,
                 real_host_us: float):
        self.calls = calls
        self.tail_us = tail_us
        self.real_host_us = real_host_us

    def of(self, node: Dict[str, Any]) -> Optional[Tuple[float, float]]:
        """None where the call has no Kineto event (where it lay is unknown)."""
        return self.calls.get(node.get("id"))


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in values)


def host_timeline(join: KinetoJoin, order: List[Dict[str, Any]]
                  ) -> Tuple[Optional[HostTimeline], Dict[str, Any]]:
    """The host gaps of the step window around ``order`` (the top-level calls, captured or
    not, in the step's order), and what the capture report says of them: how they were
    derived, or why there are none.

    The window is ``[w0, w1]``, the selected ``ProfilerStep#N`` event; ``p`` the calibrated
    profiler cost per call (0 where it could not be calibrated); ``N`` the profiled CPU
    calls (ops and record-function ranges, nested ones too) in the window. Each call's event
    is clipped to the window; with ``cursor`` the latest end of the calls before it (``w0``
    for the first): gap = max(0, start - cursor - p x (1 + the profiled calls wholly in that
    span)); its own time = its corrected duration (``ProfilerCost.corrected``), at most the
    part of it after ``cursor`` (overlapping calls count once). Tail = max(0, w1 - cursor -
    p x the profiled calls in it). ``real_host_us`` = (w1 - w0) - p x N."""
    step = join.window_event
    if step is None:
        where = (f"the Kineto trace has no {join.window_name} event" if join.window_name
                 else "the execution trace has no ProfilerStep#N window (or --trace-step all)")
        return None, {"written": False, "why": f"{where}: the step's host time is not known"}
    w0, length = step.get("ts"), step.get("dur", 0)
    w1 = w0 + length if _finite(w0, length) else None
    if not _finite(w0, w1) or w1 <= w0:
        return None, {"written": False, "why": f"the step window {step.get('name')} is empty "
                      "or its timestamps are not finite numbers"}
    pid = step.get("pid")
    others = [e for e in join.cpu if e is not step and e.get("pid") == pid
              and _finite(e.get("ts"), e.get("dur", 0))]
    per_call = join.cost.per_call_us if join.cost is not None else 0.0
    real = (w1 - w0) - per_call * len(others)
    derived = (f"{step.get('name')} window {w1 - w0:.1f} µs less the profiler's "
               f"{per_call:.3f} µs per call x {len(others)} profiled CPU calls in it"
               if join.cost is not None else f"{step.get('name')} window {w1 - w0:.1f} µs "
               "as recorded (the profiler's cost per call could not be calibrated)")
    if not _finite(real) or real < 1 or real > MAX_HOST_STEP_US:
        return None, {"written": False, "why": f"{derived} gives {real:.1f} µs: not a host "
                      f"step (1 to {MAX_HOST_STEP_US:.0f} µs)"}
    tops = {id(e) for e in join.events.values()}
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in others
                   if id(e) not in tops)
    starts = [span[0] for span in spans]

    def free(a: float, b: float) -> float:
        """Host µs from a to b, less the profiler's cost of the calls recorded in it."""
        if b <= a:
            return 0.0
        inside = sum(1 for s, e in spans[bisect.bisect_left(starts, a):
                                         bisect.bisect_right(starts, b)] if e <= b)
        return max(0.0, (b - a) - per_call * inside)

    calls: Dict[Any, Tuple[float, float]] = {}
    cursor = w0
    for node in order:
        event = join.events.get(node.get("id"))
        if event is None or not _finite(event.get("ts"), event.get("dur", 0)):
            continue
        start = min(max(float(event["ts"]), w0), w1)
        end = min(max(float(event["ts"]) + float(event.get("dur", 0)), start), w1)
        gap = max(0.0, free(cursor, start) - per_call) if start > cursor else 0.0
        own = join.cost.corrected(event) if join.cost is not None else end - start
        calls[node["id"]] = (gap, max(0.0, min(own, end - max(start, cursor))))
        cursor = max(cursor, end)
    if not calls:
        return None, {"written": False, "why": "no top-level call of the step was joined to "
                      "a Kineto event"}
    tail = free(cursor, w1)
    total = sum(gap for gap, _ in calls.values()) + tail
    if total > length:  # far from zero a timestamp is rounded (at 1e15 µs, to 0.125 µs):
        scale = length / total  # the gaps, disjoint parts of the window, never exceed it
        calls = {key: (gap * scale, own) for key, (gap, own) in calls.items()}
        tail *= scale
    timeline = HostTimeline(calls, tail, real)
    return timeline, {"written": True, "real_host_us": round(real, 1), "real_host": derived,
                      "gaps": "per call: the host time since the previous top-level call "
                              "ended (the window's start for the first) less the profiler's "
                              "cost per call for its own record and each profiled call in "
                              "it; a call not captured adds its gap and its own corrected "
                              "time to the next captured call's",
                      "calls_timed": len(calls), "calls_without_event": len(order) - len(calls),
                      "caveat": "an upper bound: the profiler's cost outside each call's "
                                "recorded span (an execution-trace observer's, recording in "
                                "the same run, above all) is not measured"}

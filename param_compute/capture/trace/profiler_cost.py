"""The profiler's own cost per call, taken out of a Kineto trace's CPU times.

Under ``torch.profiler`` every operator call pays for its own record (a view that runs in
2 µs reads 20 to 60 µs), and a call's duration holds the records of every call below it too.
Calibrated from the trace itself: the leaf calls of trivial ops (views and aliases, whose real
cost is a microsecond or two) give the profiled cost of doing nearly nothing; their real cost,
measured now on this machine without a profiler, is taken away, and the rest is the per-call
profiler cost. Each call's CPU time then loses that cost once for itself and once for every
profiled call nested inside it, and never drops below the trivial ops' real cost.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Optional

from param_compute.results.stats import median

#: Ops that only make a view or alias: their real cost is the dispatcher's and a tensor's.
TRIVIAL_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::alias", "aten::detach", "aten::as_strided",
    "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::select",
    "aten::slice", "aten::transpose", "aten::t", "aten::resolve_conj", "aten::resolve_neg",
    "aten::_reshape_alias", "aten::view_as", "aten::lift_fresh", "aten::numpy_T"})
#: Fewer trivial leaf calls than this: no calibration (too few to trust a median).
MIN_TRIVIAL_CALLS = 20


def nested_counts(events: List[Dict[str, Any]]) -> Dict[int, int]:
    """``id(event)`` -> how many of ``events`` lie inside it on the same thread."""
    by_thread: Dict[Any, List[Dict[str, Any]]] = defaultdict(list)
    for event in events:
        by_thread[(event.get("pid"), event.get("tid"))].append(event)
    counts: Dict[int, int] = {}
    for spans in by_thread.values():
        spans.sort(key=lambda e: (e.get("ts", 0), -float(e.get("dur", 0))))
        stack: List[Any] = []  # (end, id) of the open events
        for event in spans:
            start = event.get("ts", 0)
            while stack and stack[-1][0] < start:
                stack.pop()
            for _, owner in stack:
                counts[owner] += 1
            counts[id(event)] = 0
            stack.append((start + float(event.get("dur", 0)), id(event)))
    return counts


def unprofiled_trivial_us(calls: int = 2000) -> float:
    """The median µs of a trivial op (``view``, ``detach``, ``t``) called without a profiler
    on this machine: each measured by the one ``Measurer``, back to back (``calls`` calls in
    blocks, after 50 to warm up), the median of its block means."""
    import torch

    from param_compute.measure.devices import Device
    from param_compute.measure.measurer import Measurer
    from param_compute.measure.protocol import Protocol
    from param_compute.measure.timing import ExecMode, HostClock

    x = torch.empty(4, 4)
    ops = (lambda: x.view(16), lambda: x.detach(), lambda: x.t())
    measurer = Measurer(Protocol(warmup=50, iteration=calls, exec_mode=ExecMode.CONTINUOUS),
                        Device("host", HostClock()), num_threads=None)
    return median([measurer.measure(op, name="trivial").stats()["median"] * 1e3
                   for op in ops])


class ProfilerCost:
    """The per-call cost and how it was found; ``corrected(event)`` a call's CPU µs without it."""

    def __init__(self, per_call_us: float, real_us: float, counts: Dict[int, int],
                 how: str, trivial_calls: int):
        self.per_call_us = per_call_us
        self.real_us = real_us
        self.counts = counts
        self.how = how
        self.trivial_calls = trivial_calls

    def corrected(self, event: Dict[str, Any]) -> float:
        duration = float(event.get("dur", 0))
        calls = 1 + self.counts.get(id(event), 0)
        return max(duration - self.per_call_us * calls, min(duration, self.real_us))

    def to_json(self) -> Dict[str, Any]:
        return {"per_call_us": round(self.per_call_us, 3), "calibrated_from": self.how,
                "trivial_calls": self.trivial_calls,
                "trivial_unprofiled_us": round(self.real_us, 3),
                "applied": "each call's CPU time minus the per-call cost x (1 + profiled "
                           "calls inside it), at least the trivial ops' unprofiled cost"}


def calibrate(events: List[Dict[str, Any]],
              real_us: Optional[float] = None) -> Optional[ProfilerCost]:
    """The profiler's per-call cost from a Kineto trace's CPU events; None when the trace
    has too few trivial leaf calls to tell."""
    counts = nested_counts(events)
    trivial = [float(e.get("dur", 0)) for e in events
               if e.get("cat") == "cpu_op" and e.get("name") in TRIVIAL_OPS
               and counts.get(id(e), 0) == 0]
    if len(trivial) < MIN_TRIVIAL_CALLS:
        return None
    profiled = median(trivial)
    real = unprofiled_trivial_us() if real_us is None else real_us
    per_call = max(0.0, profiled - real)
    how = (f"median Kineto duration {profiled:.2f} µs of {len(trivial)} trivial leaf calls "
           f"(views, aliases, detach) minus their unprofiled cost {real:.2f} µs measured at "
           "capture")
    return ProfilerCost(per_call, real, counts, how, len(trivial))

"""The original of a live capture, timed honestly: the step unprofiled, each op in place.

``capture --run`` sets the replay beside the step it captured. A profiler's per-call cost
would inflate that original (a view that takes 2 µs reads 20 to 60 under Kineto), so the step
is timed twice without one: whole, with nothing attached (``time_step``: the real step's
wall time), and op by op with a dispatch mode that only reads the clock around each call
(``time_ops_in_place``: the mode's own Python cost falls outside the timed region, between
calls). The capture itself then runs once more and takes those times as ``original_us``.

Beside each call's time the timer counts the minor page faults the call took (``getrusage``,
read outside the timed region): a call whose output is fresh memory touches it first and
faults once per page, which costs as much as the work of a small op. Where the allocator
hands a call recycled memory in one process and fresh pages in another, the two times differ
for that reason alone; the counts let the fidelity ledger say so with numbers.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional

from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode

from param_compute.process.faults import minor_faults


class CallTimer(TorchDispatchMode):
    """Times each aten call made while active (ns, in order): nothing else is done per call.

    With ``events`` (a CUDA step), a CUDA event pair around each call instead: the device
    time between them, read after the step (``resolve``)."""

    def __init__(self, events: bool = False):
        super().__init__()
        self.calls: List[Any] = []
        self.faults: List[int] = []  # minor page faults of each call, in order
        self.events = events

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # An aten overload through its C++ entry, as the step replay calls it: the Python
        # frame of ``OpOverload.__call__`` is nothing the original step paid.
        call = func._op if type(func) is OpOverload else func
        if self.events:
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            faults = minor_faults()
            start.record()
            out = call(*args, **kwargs)
            end.record()
            self.faults.append(minor_faults() - faults)
            self.calls.append((func, (start, end)))
            return out
        clock = time.perf_counter_ns
        faults = minor_faults()
        start = clock()
        out = call(*args, **kwargs)
        elapsed = clock() - start
        self.faults.append(minor_faults() - faults)
        self.calls.append((func, elapsed))
        return out

    def resolve(self) -> List[Any]:
        """(func, ns) per call, event pairs read (after synchronizing) where used."""
        if not self.events:
            return self.calls
        import torch

        torch.cuda.synchronize()
        return [(func, pair[0].elapsed_time(pair[1]) * 1e6) for func, pair in self.calls]


def time_step(function: Callable[[], object], repeats: int) -> List[float]:
    """The step's wall time in µs, ``repeats`` times, unprofiled (the collector paused, as
    the replay pauses it; on CUDA, synchronized before and after)."""
    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() and torch.cuda.is_initialized() \
        else (lambda: None)
    out = []
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            sync()
            start = time.perf_counter_ns()
            function()
            sync()
            out.append((time.perf_counter_ns() - start) / 1e3)
    finally:
        if enabled:
            gc.enable()
    return out


def time_ops_in_place(function: Callable[[], object], steps: int = 1,
                      passes: int = 3,
                      faults: Optional[Dict[str, List[float]]] = None) -> Dict[str, List[float]]:
    """op (``str(func)``) -> µs of each of its calls over ``steps`` steps, in call order: per
    call, the median over ``passes`` timed passes (one preempted call is not the op's time).
    ``faults``, when given, is filled the same way with each call's minor page faults.

    One pass runs under the timer first, untimed: the first call of each op under a dispatch
    mode pays one-time set-up (milliseconds) that the step never pays. A step on CUDA is timed
    with CUDA event pairs (device time), like the step replay's per-call clock there."""
    import torch

    events = torch.cuda.is_available() and torch.cuda.is_initialized()
    runs: List[Dict[str, List[float]]] = []
    fault_runs: List[Dict[str, List[float]]] = []
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for index in range(max(1, passes) + 1):
            times: Dict[str, List[float]] = defaultdict(list)
            counts: Dict[str, List[float]] = defaultdict(list)
            for _ in range(steps):
                timer = CallTimer(events)
                with timer:
                    function()
                for (func, elapsed), count in zip(timer.resolve(), timer.faults):
                    times[str(func)].append(elapsed / 1e3)
                    counts[str(func)].append(count)
            if index:
                runs.append(times)
                fault_runs.append(counts)
    finally:
        if enabled:
            gc.enable()
    if faults is not None:
        faults.update(_per_call_medians(fault_runs))
    return _per_call_medians(runs)


def _per_call_medians(runs: List[Dict[str, List[float]]]) -> Dict[str, List[float]]:
    """op -> per call, the median over passes (the first pass alone where they differ)."""
    out: Dict[str, List[float]] = {}
    for name, first in runs[0].items():
        samples = [run.get(name, []) for run in runs]
        if all(len(s) == len(first) for s in samples):
            out[name] = [statistics.median(values) for values in zip(*samples)]
        else:  # the passes ran different calls: the first pass alone
            out[name] = first
    return out


def median(values: List[float]) -> float:
    return statistics.median(values) if values else 0.0

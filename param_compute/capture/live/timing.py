"""The original of a live capture, timed honestly: the step unprofiled, each op in place.

``capture --run`` sets the replay beside the step it captured. A profiler's per-call cost
would inflate that original (a view that takes 2 µs reads 20 to 60 under Kineto), so the step
is timed twice without one: whole, with nothing attached (``time_step``: the real step's
wall time), and op by op with a dispatch mode that only reads the clock around each call
(``time_ops_in_place``: the mode's own Python cost falls outside the timed region, between
calls). Both time through the measuring core: the whole step is a measurement of the one
``Measurer``, and the in-place timer stamps with the device's clock (``measure.devices``). The
capture itself then runs once more and takes those times as ``original_us``.

In passes of their own the timer counts the minor page faults each call took (``getrusage``
around it): a call whose output is fresh memory touches it first and faults once per page,
which costs as much as the work of a small op. Where the allocator hands a call recycled
memory in one process and fresh pages in another, the two times differ for that reason
alone; the counts let the fidelity ledger say so with numbers. Not in the timed passes: two
system calls between every pair of calls left the small ops of a host-bound step 6% slower.

The timer also notes when each call started and ended on the host (``timeline``). On a device
the host's own work between calls (the model's Python, the autograd engine) decides when
kernels are queued: a step whose host falls behind leaves the device idle, and a replay that
launches back to back hides that. How long that work took cannot be read under a Python
timer (its own cost between two calls, several µs, is as large as the work and varies with
the cache), but where it lay can: ``host_gaps`` gives each call the host time before it less
the smallest such gap of the step (the timer's cost where the original spent nothing), a
shape the step replay scales to the original's unprofiled host time (``step_replay``).
"""

from __future__ import annotations

import gc
import time
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional, Tuple

from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode

from param_compute.capture.live import compiled as compiled_regions
from param_compute.measure.faults import minor_faults
from param_compute.measure.timing import HostClock
from param_compute.results.stats import median


#: Untimed steps whose calls' minor page faults are counted (``time_ops_in_place``).
FAULT_PASSES = 3


def step_device():
    """The device a live step runs on, opened for timing it (no L2 flush: a step's own cache
    state is part of it): the current CUDA device where the step initialized CUDA, else the
    host."""
    import torch

    from param_compute.measure.devices import open_device

    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    return open_device(f"cuda:{torch.cuda.current_device()}" if cuda else "cpu",
                       flush_l2=False)


def _cuda_clock():
    """The current CUDA device's event clock (``measure.devices``), no L2 flush."""
    import torch

    from param_compute.measure.devices import CudaEventClock

    return CudaEventClock(f"cuda:{torch.cuda.current_device()}", flush_l2=False)


class CallTimer(TorchDispatchMode):
    """Times each aten call made while active, with a device's clock (``measure.devices``):
    two stamps around the call, nothing else done per call.

    On the host the clock is ``perf_counter_ns``; with ``events`` (a CUDA step), the current
    device's event clock: a pair of events made before the call, the device time between them
    read after the step (``resolve``). The clock's launch cover goes first
    (``measure.launch_cover``): on a GPU left idle by the host, the start event would fire
    before the call's kernel was even launched, and the pair time the launch."""

    def __init__(self, events: bool = False, count_faults: bool = False, clock: Any = None):
        """``count_faults``: count each call's minor page faults instead of timing it (no
        clock, no events, whatever ``events`` says); ``clock``: the clock to stamp with
        (default: the host's, or with ``events`` the current CUDA device's)."""
        super().__init__()
        self.calls: List[Any] = []
        #: minor page faults of each call, in order (``count_faults``: a pass counting them,
        #: whose times are not the op's: the counter's system calls sit around each call)
        self.faults: List[int] = []
        self.count_faults = count_faults
        #: host clock (ns) as each call started and returned, in order
        self.spans: List[Any] = []
        if clock is None:
            clock = _cuda_clock() if events and not count_faults else HostClock()
        self.clock = clock
        self._host_ns = getattr(clock, "host_ns", lambda stamp: stamp)
        self._reserve = getattr(clock, "reserve", None)
        self._cover = getattr(clock, "cover", None)
        self._last_host_us: Optional[float] = None
        self._inside = 0  # > 0 while a compiled region runs: its inner calls are its own

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """While compiled regions are recorded, compiled code runs under the timer, each
        region timed as one call (``region_call``), as the capture will see it."""
        return compiled_regions.recording()

    def __enter__(self):
        compiled_regions.listen(self)
        return super().__enter__()

    def __exit__(self, *exc):
        compiled_regions.unlisten(self)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._inside:  # a compiled region's own call: timed with the region
            return func(*args, **kwargs)
        # An aten overload through its C++ entry, as the step replay calls it: the Python
        # frame of ``OpOverload.__call__`` is nothing the original step paid.
        call = func._op if type(func) is OpOverload else func
        return self._timed(func, call, args, kwargs)

    def region_call(self, record, inputs, run):
        """A compiled region (``capture.live.compiled.RegionCall``): one call, named by its
        graph (``graph::NAME``), timed whole; the calls inside it are its own."""
        return self._timed(record.op, compiled_regions.run_inside, (self, run, inputs), {})

    def _timed(self, name, call, args, kwargs):
        """``call(*args, **kwargs)`` timed (or its page faults counted) as the call
        ``name``: nothing else between the two stamps."""
        if self.count_faults:  # a counting pass: no clock (its system calls sit around)
            faults = minor_faults()
            out = call(*args, **kwargs)
            self.faults.append(minor_faults() - faults)
            self.calls.append((name, 0))
            return out
        if self._reserve is not None:  # both events made before the call, not inside it
            self._reserve(2)
        if self._cover is not None:  # the device busy while the host records and launches
            self._cover(self._last_host_us)
        stamp = self.clock.stamp
        start = stamp()
        out = call(*args, **kwargs)
        end = stamp()
        began, ended = self._host_ns(start), self._host_ns(end)
        self.spans.append((began, ended))
        self._last_host_us = (ended - began) / 1e3
        self.calls.append((name, (start, end)))
        return out

    def resolve(self) -> List[Any]:
        """(func, ns) per call, the clock's stamps read (after synchronizing)."""
        if self.count_faults:
            return self.calls
        self.clock.synchronize()
        elapsed = self.clock.elapsed_ms
        return [(func, elapsed(*pair) * 1e6) for func, pair in self.calls]


def _in_job() -> bool:
    """Whether this process is a rank of a job of more than one (torch.distributed)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def time_step(function: Callable[[], object], repeats: int,
              host: Optional[List[float]] = None) -> List[float]:
    """The step's time in µs, ``repeats`` times, unprofiled: the one ``Measurer``
    (``measure.measurer``) with ``repeats`` discrete samples on the step's device (on CUDA,
    events and a synchronize before each). ``host``, when given, gets each step's host time
    (to the function's return: on the host the same as the step's). A rank of a job (a
    process group made by the step's module) times its steps after a barrier each, as the
    job's replay does (``measure.ranks``): ranks start each step together."""
    from param_compute.measure.measurer import Measurer
    from param_compute.measure.protocol import Protocol

    gc.collect()  # once, before: the step starts from a clean heap, as the replay's does
    device = step_device()
    if _in_job():
        from param_compute.measure.ranks import ranked

        device = ranked(device)
    result = Measurer(Protocol(warmup=0, iteration=repeats, keep_samples=max(1, repeats)),
                      device, num_threads=None).measure(function, name="step")
    if host is not None:
        host.extend(t * 1e3 for t in result.extra.get("measure.host_time", result.measure_ms))
    return [t * 1e3 for t in result.measure_ms]


def time_ops_in_place(function: Callable[[], object], steps: int = 1,
                      passes: int = 3,
                      faults: Optional[Dict[str, List[float]]] = None,
                      timeline: Optional[Dict[str, Any]] = None) -> Dict[str, List[float]]:
    """op (``str(func)``) -> µs of each of its calls over ``steps`` steps, in call order: per
    call, the median over ``passes`` timed passes (one preempted call is not the op's time).
    ``faults``, when given, is filled with each call's minor page faults, the median of
    ``FAULT_PASSES`` passes of their own after the timed ones;
    ``timeline`` with ``calls``: (op, host µs before the call since the previous call
    returned (the step's start for the first), host µs of the call) in call order, and
    ``tail_us``: the host µs after the last call (medians over passes; see ``host_gaps``).

    One pass runs under the timer first, untimed: the first call of each op under a dispatch
    mode pays one-time set-up (milliseconds) that the step never pays. A step on CUDA is timed
    with CUDA event pairs (device time), like the step replay's per-call clock there."""
    import torch

    events = torch.cuda.is_available() and torch.cuda.is_initialized()
    clock = _cuda_clock() if events else HostClock()
    runs: List[Dict[str, List[float]]] = []
    sequences: List[List[Any]] = []  # per pass: (op, gap before, host µs) of each call
    tails: List[float] = []
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for index in range(max(1, passes) + 1):
            times: Dict[str, List[float]] = defaultdict(list)
            timers = []
            previous = time.perf_counter_ns()  # steps follow each other: one timeline
            for _ in range(steps):
                timer = CallTimer(clock=clock)
                with timer:
                    function()
                timers.append(timer)
            finished = time.perf_counter_ns()  # host only: nothing resolved yet
            sequence = []
            for timer in timers:
                for (func, took), (start, end) in zip(timer.resolve(), timer.spans):
                    times[str(func)].append(took / 1e3)
                    sequence.append((str(func), (start - previous) / 1e3, (end - start) / 1e3))
                    previous = end
            if index:
                runs.append(times)
                sequences.append(sequence)
                tails.append((finished - previous) / 1e3)
        if faults is not None:
            faults.update(_count_faults(function, steps, events))
    finally:
        if enabled:
            gc.enable()
    if timeline is not None:
        timeline["calls"] = _sequence_medians(sequences)
        timeline["tail_us"] = median(tails)
    return _per_call_medians(runs)


def _count_faults(function: Callable[[], object], steps: int,
                  events: bool) -> Dict[str, List[float]]:
    """op -> each call's minor page faults (host memory), the median over ``FAULT_PASSES``
    steps: no clock, no events, no launch cover (on a device those would only queue work)."""
    runs = []
    for _ in range(FAULT_PASSES):
        counts: Dict[str, List[float]] = defaultdict(list)
        for _ in range(steps):
            timer = CallTimer(count_faults=True)
            with timer:
                function()
            for (func, _), count in zip(timer.calls, timer.faults):
                counts[str(func)].append(count)
        runs.append(counts)
    if events:  # a device step's work drained before anything else is timed
        import torch

        torch.cuda.synchronize()
    return _per_call_medians(runs)


def _sequence_medians(sequences: List[List[Any]]) -> List[Any]:
    """(op, gap, host µs) per call: medians over the passes that ran the same calls as the
    first (all of them, normally; the first alone where none other did)."""
    names = [name for name, _, _ in sequences[0]]
    same = [s for s in sequences if [name for name, _, _ in s] == names]
    return [(name, median([s[k][1] for s in same]),
             median([s[k][2] for s in same])) for k, name in enumerate(names)]


def host_gaps(timeline: Dict[str, Any]) -> Tuple[Dict[str, List[Any]], float]:
    """(op -> (gap µs, host µs) of each of its calls in order, the gap after the last call):
    each gap less the step's smallest (the timer's own cost, where the original went straight
    from one call to the next). Only the shape is trusted: the replay scales it."""
    calls = timeline.get("calls") or []
    if not calls:
        return {}, 0.0
    floor = min(gap for _, gap, _ in calls)
    out: Dict[str, List[Any]] = defaultdict(list)
    for name, gap, host in calls:
        out[name].append((round(max(0.0, gap - floor), 3), round(host, 3)))
    return dict(out), round(max(0.0, timeline["tail_us"] - floor), 3)


def _per_call_medians(runs: List[Dict[str, List[float]]]) -> Dict[str, List[float]]:
    """op -> per call, the median over passes (the first pass alone where they differ)."""
    out: Dict[str, List[float]] = {}
    for name, first in runs[0].items():
        samples = [run.get(name, []) for run in runs]
        if all(len(s) == len(first) for s in samples):
            out[name] = [median(values) for values in zip(*samples)]
        else:  # the passes ran different calls: the first pass alone
            out[name] = first
    return out

"""The timing loop, one for every device, parameterized by a clock and an execution mode.

A clock is a narrow seam with four members:

* ``stamp()`` takes a timestamp (host: ``perf_counter_ns``; CUDA: records an event);
* ``elapsed_ms(start, end)`` turns two stamps into milliseconds (after ``synchronize``);
* ``barrier`` is ``None`` or a callable run before each discrete iteration, outside the timed
  region (CUDA: synchronize and flush the L2 cache);
* ``synchronize()`` waits for queued work (host: nothing);
* ``host_ns(stamp)``: the host clock (``perf_counter_ns``) at a stamp;
* optionally ``reserve(n)``: prepare the next ``n`` stamps before the loop (CUDA: create events),
  ``host_elapsed_ms(start, end)`` (the host's time between two device stamps) and ``cover``
  (a device kept busy while the host launches the next call: ``measure.launch_cover``).

Modes: ``discrete`` times each iteration alone (barrier before each); ``continuous`` runs the
loop back to back but stamps it at the boundaries of ``CONTINUOUS_BLOCKS`` blocks (no
synchronization between them), each block's mean per call one value, so that a continuous run
has a sample for statistics and comparisons; ``continuous_events`` stamps every iteration back
to back and synchronizes once at the end.

Per timed iteration the loop does the call and the clock, nothing else: outputs are dropped as
soon as the call returns, and stamps go into a preallocated list. Asked for (``cpu_out``, host
clocks), it also reads the calling thread's CPU time (``thread_cpu_ns``) outside each pair of
stamps, so that the wall time does not include that read: a sample whose wall time exceeds its
CPU time was descheduled (``measure.disturbance``). Python's cyclic garbage
collector is paused for the loop (as ``timeit`` pauses it): a collection that a count of
allocations happens to trigger mid-loop is the interpreter's time, not the op's.

``warm_up`` is the time-based warm-up (``--warmup-time``): blocks of calls, timed by the same
loop, until enough time has passed and, when asked, the per-block median has stopped drifting.
"""

from __future__ import annotations

import enum
import gc
import time
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional

from param_compute.results.stats import median


class ExecMode(str, enum.Enum):
    DISCRETE = "discrete"
    CONTINUOUS = "continuous"
    CONTINUOUS_EVENTS = "continuous_events"


#: The calling thread's CPU time (ns), read beside the clock when ``cpu_out`` is asked for.
thread_cpu_ns = time.thread_time_ns


class HostClock:
    """The host's monotonic clock; the right clock for CPU devices."""

    name = "host"
    stamp = staticmethod(time.perf_counter_ns)
    barrier: Optional[Callable[[], None]] = None

    @staticmethod
    def elapsed_ms(start: int, end: int) -> float:
        return (end - start) / 1e6

    @staticmethod
    def host_ns(stamp: int) -> int:
        """The host clock (ns) at a stamp: the stamp itself."""
        return stamp

    @staticmethod
    def synchronize() -> None:
        return None


class CounterClock(HostClock):
    """The host clock read through another nanosecond counter (a fake time in tests)."""

    def __init__(self, counter: Callable[[], int]):
        self.stamp = counter


#: Continuous mode splits a loop of ``count`` calls into this many blocks (fewer if fewer calls).
CONTINUOUS_BLOCKS = 10


def block_sizes(count: int, blocks: int = CONTINUOUS_BLOCKS) -> List[int]:
    """Calls per block of a continuous loop: ``min(count, blocks)`` blocks, sizes within one."""
    blocks = max(1, min(count, blocks))
    base, extra = divmod(count, blocks)
    return [base + (b < extra) for b in range(blocks)]


def spent_ms(times: List[float], count: int, mode: ExecMode,
             blocks: int = CONTINUOUS_BLOCKS) -> float:
    """Time the ``count`` calls behind ``times`` (a ``time_calls`` result) took, in ms."""
    if mode is ExecMode.CONTINUOUS:
        return sum(t * size for t, size in zip(times, block_sizes(count, blocks)))
    return sum(times)


def time_calls(fn: Callable[[], Any], count: int, clock, mode: ExecMode,
               prepare: Optional[Callable[[], Any]] = None,
               host_out: Optional[List[float]] = None,
               blocks: int = CONTINUOUS_BLOCKS,
               cpu_out: Optional[List[float]] = None) -> List[float]:
    """Call ``fn`` ``count`` times; return per-iteration times in ms (in continuous mode, the
    mean per call of each block of ``block_sizes(count, blocks)``).

    ``prepare`` runs untimed before every iteration (once before the loop in continuous mode):
    the backward pass uses it to run the forward that each backward needs. When the clock also
    reads the host clock (``host_elapsed_ms``, CUDA), ``host_out`` receives the host times;
    ``cpu_out`` receives each sample's thread CPU time (ms), read outside the stamps.
    """
    if count <= 0:
        return []
    collecting = gc.isenabled()
    gc.disable()  # as timeit does: a collection due at some allocation is not the op's time
    try:
        return _time_calls(fn, count, clock, mode, prepare, host_out, blocks, cpu_out)
    finally:
        if collecting:
            gc.enable()


def _time_calls(fn: Callable[[], Any], count: int, clock, mode: ExecMode,
                prepare: Optional[Callable[[], Any]], host_out: Optional[List[float]],
                blocks: int, cpu_out: Optional[List[float]]) -> List[float]:
    reserve = getattr(clock, "reserve", None)
    stamp = clock.stamp
    if mode is ExecMode.CONTINUOUS:
        sizes = block_sizes(count, blocks)
        if reserve is not None:
            reserve(len(sizes) + 1)
        bounds: List[Any] = [None] * (len(sizes) + 1)
        if prepare is not None:
            prepare()
        clock.synchronize()
        if cpu_out is None:
            bounds[0] = stamp()
            for block, size in enumerate(sizes, 1):
                for _ in range(size):
                    fn()
                bounds[block] = stamp()
        else:
            cpu = thread_cpu_ns
            cpus = [0] * (len(sizes) + 1)
            cpus[0] = cpu()
            bounds[0] = stamp()
            for block, size in enumerate(sizes, 1):
                for _ in range(size):
                    fn()
                bounds[block] = stamp()
                cpus[block] = cpu()
            cpu_out.extend((cpus[b + 1] - cpus[b]) / 1e6 / size for b, size in enumerate(sizes))
        clock.synchronize()
        if host_out is not None and hasattr(clock, "host_elapsed_ms"):
            host_out.extend(clock.host_elapsed_ms(bounds[b], bounds[b + 1]) / size
                            for b, size in enumerate(sizes))
        return [clock.elapsed_ms(bounds[b], bounds[b + 1]) / size for b, size in enumerate(sizes)]
    if reserve is not None:
        reserve(2 * count)
    barrier = clock.barrier if mode is ExecMode.DISCRETE else None
    marks: List[Any] = [None] * (2 * count)
    if cpu_out is None:
        for i in range(0, 2 * count, 2):
            if prepare is not None:
                prepare()
            if barrier is not None:
                barrier()
            marks[i] = stamp()
            fn()
            marks[i + 1] = stamp()
    else:
        cpu = thread_cpu_ns
        cpus = [0] * (2 * count)
        for i in range(0, 2 * count, 2):
            if prepare is not None:
                prepare()
            if barrier is not None:
                barrier()
            cpus[i] = cpu()
            marks[i] = stamp()
            fn()
            marks[i + 1] = stamp()
            cpus[i + 1] = cpu()
        cpu_out.extend((cpus[i + 1] - cpus[i]) / 1e6 for i in range(0, 2 * count, 2))
    clock.synchronize()
    if host_out is not None and hasattr(clock, "host_elapsed_ms"):
        host = clock.host_elapsed_ms
        host_out.extend(host(marks[i], marks[i + 1]) for i in range(0, 2 * count, 2))
    elapsed = clock.elapsed_ms
    return [elapsed(marks[i], marks[i + 1]) for i in range(0, 2 * count, 2)]


#: Time-based warm-up: the per-block median has settled when the last blocks' medians lie within
#: this fraction of each other; warming stops at ``WARMUP_CAP`` x the asked time whatever the drift.
DRIFT_TOLERANCE = 0.03
WARMUP_CAP = 4.0
#: A warm-up block lasts about this fraction of the asked warm-up time (at least MIN_BLOCK_MS).
BLOCK_FRACTION = 0.1
MIN_BLOCK_MS = 2.0
#: A clock that never advances (a broken fake) must not make warming up endless.
MAX_WARMUP_CALLS = 1 << 24


@dataclass
class WarmUp:
    """What the time-based warm-up did: calls, their time, and each block's median (ms)."""

    calls: int = 0
    spent_ms: float = 0.0
    block_medians: List[float] = field(default_factory=list)
    settled: bool = True


#: Blocks whose medians must agree for the warm-up to count as settled.
SETTLED_BLOCKS = 3


def drifting(medians: List[float], tolerance: float = DRIFT_TOLERANCE) -> bool:
    """Whether the medians of the last ``SETTLED_BLOCKS`` blocks still spread over more than
    ``tolerance`` of the last one (a slow trend shows over three blocks, not between two)."""
    if len(medians) < SETTLED_BLOCKS:
        return True
    recent = medians[-SETTLED_BLOCKS:]
    return recent[-1] <= 0 or (max(recent) - min(recent)) / recent[-1] > tolerance


def warm_up(fn: Callable[[], Any], seconds: float, clock, mode: ExecMode,
            prepare: Optional[Callable[[], Any]] = None, settle: bool = False,
            spent_before_ms: float = 0.0,
            agree: Optional[Callable[[List[float]], List[float]]] = None) -> WarmUp:
    """Keep calling ``fn`` (timed by ``time_calls``, untimed results kept only as block
    medians) until ``seconds`` of calls have run, ``spent_before_ms`` (the ``-w`` calls)
    included; with ``settle``, also until the per-block median stops drifting, at most
    ``WARMUP_CAP`` x ``seconds``. Blocks double from one call until one lasts about
    ``BLOCK_FRACTION`` of ``seconds``. ``agree``: the ranks' agreed samples of each block
    (``measure.ranks``), on which every decision is taken, so ranks warm up alike."""
    result = WarmUp(spent_ms=spent_before_ms, settled=not settle)
    target_ms = seconds * 1e3
    block_ms = max(MIN_BLOCK_MS, BLOCK_FRACTION * target_ms)
    size = 1
    while True:
        enough = result.spent_ms >= target_ms
        if enough and (result.settled or result.spent_ms >= WARMUP_CAP * target_ms) \
                or result.calls >= MAX_WARMUP_CALLS:
            return result
        times = time_calls(fn, size, clock, mode, prepare)
        if agree is not None:
            times = agree(times)
        took = spent_ms(times, size, mode)
        result.calls += size
        result.spent_ms += took
        if took >= block_ms / 2:  # a full-size block: its median is comparable to the last
            result.block_medians.append(median(times))
            result.settled = result.settled or not drifting(result.block_medians)
        else:
            size *= 2

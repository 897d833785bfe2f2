"""The timing loop, one for every device, parameterized by a clock and an execution mode.

A clock is a narrow seam with four members:

* ``stamp()`` takes a timestamp (host: ``perf_counter_ns``; CUDA: records an event);
* ``elapsed_ms(start, end)`` turns two stamps into milliseconds (after ``synchronize``);
* ``barrier`` is ``None`` or a callable run before each discrete iteration, outside the timed
  region (CUDA: synchronize and flush the L2 cache);
* ``synchronize()`` waits for queued work (host: nothing);
* optionally ``reserve(n)``: prepare the next ``n`` stamps before the loop (CUDA: create events).

Modes: ``discrete`` times each iteration alone (barrier before each); ``continuous`` times the
back-to-back loop as a whole and reports the mean per call (PARAM's layout: one value);
``continuous_events`` stamps every iteration back to back and synchronizes once at the end.

Per timed iteration the loop does the call and two stamps, nothing else: outputs are dropped as
soon as the call returns, and stamps go into a preallocated list.
"""

from __future__ import annotations

import enum
import time
from typing import Any, Callable, List, Optional


class ExecMode(str, enum.Enum):
    DISCRETE = "discrete"
    CONTINUOUS = "continuous"
    CONTINUOUS_EVENTS = "continuous_events"


class HostClock:
    """The host's monotonic clock; the right clock for CPU devices."""

    name = "host"
    stamp = staticmethod(time.perf_counter_ns)
    barrier: Optional[Callable[[], None]] = None

    @staticmethod
    def elapsed_ms(start: int, end: int) -> float:
        return (end - start) / 1e6

    @staticmethod
    def synchronize() -> None:
        return None


def time_calls(fn: Callable[[], Any], count: int, clock, mode: ExecMode,
               prepare: Optional[Callable[[], Any]] = None,
               host_out: Optional[List[float]] = None) -> List[float]:
    """Call ``fn`` ``count`` times; return per-iteration times in ms (one mean in continuous).

    ``prepare`` runs untimed before every iteration (once before the loop in continuous mode):
    the backward pass uses it to run the forward that each backward needs. When the clock also
    reads the host clock (``host_elapsed_ms``, CUDA), ``host_out`` receives the host times.
    """
    if count <= 0:
        return []
    reserve = getattr(clock, "reserve", None)
    if reserve is not None:
        reserve(2 if mode is ExecMode.CONTINUOUS else 2 * count)
    stamp = clock.stamp
    if mode is ExecMode.CONTINUOUS:
        if prepare is not None:
            prepare()
        clock.synchronize()
        start = stamp()
        for _ in range(count):
            fn()
        end = stamp()
        clock.synchronize()
        if host_out is not None and hasattr(clock, "host_elapsed_ms"):
            host_out.append(clock.host_elapsed_ms(start, end) / count)
        return [clock.elapsed_ms(start, end) / count]
    barrier = clock.barrier if mode is ExecMode.DISCRETE else None
    marks: List[Any] = [None] * (2 * count)
    for i in range(0, 2 * count, 2):
        if prepare is not None:
            prepare()
        if barrier is not None:
            barrier()
        marks[i] = stamp()
        fn()
        marks[i + 1] = stamp()
    clock.synchronize()
    if host_out is not None and hasattr(clock, "host_elapsed_ms"):
        host = clock.host_elapsed_ms
        host_out.extend(host(marks[i], marks[i + 1]) for i in range(0, 2 * count, 2))
    elapsed = clock.elapsed_ms
    return [elapsed(marks[i], marks[i + 1]) for i in range(0, 2 * count, 2)]

"""``--timer kernel``: the summed device time of the kernels each call launched, through the
PyTorch profiler (Kineto/CUPTI), beside the event time.

CUDA events time a call from the GPU's point of view, gaps between its kernels and whatever
launch latency the spin kernel did not hide included; the kernels' own durations leave that
out (tritonbench's ``cuda_time``, proton's kernel time). After the event-timed measurement, as many
calls (at most ``MAX_PROFILED_CALLS``) run once more under ``torch.profiler`` with CUDA activity, each inside a
range ``param_compute|kernel|I`` and synchronized (the L2 flush, when on, runs before the range
and is not counted); per range, the durations of every kernel that an op inside it launched are
summed (:func:`kernel_sums`). The pass then has ``measure.kernel_time`` (ms per call) next to
``measure.time`` (events) and ``measure.launch_overhead`` = event time − kernel time for the
calls with the same index: the launch cost and the gaps between kernels.

The profiler is a seam (``profiler``: a context-manager factory whose result has ``events()``;
``annotate``: a range factory): tests drive it with fake events.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Optional

RANGE_PREFIX = "param_compute|kernel|"
#: The most calls of a pass timed under the profiler (its trace grows with every call).
MAX_PROFILED_CALLS = 200


def _kernels_us(event: Any) -> float:
    """Device µs of the kernels attached to ``event`` and to every op under it."""
    total = sum(float(getattr(k, "duration", 0.0)) for k in getattr(event, "kernels", ()) or ())
    return total + sum(_kernels_us(child) for child in getattr(event, "cpu_children", ()) or ())


def kernel_sums(events: Iterable[Any], count: int) -> Dict[int, float]:
    """Call index -> summed kernel ms, from the ``param_compute|kernel|I`` ranges (CPU side;
    the GPU-side annotations of the same name are not ranges of calls)."""
    sums: Dict[int, float] = {}
    for event in events:
        name = str(getattr(event, "name", ""))
        if not name.startswith(RANGE_PREFIX) \
                or "CUDA" in str(getattr(event, "device_type", "")).upper():
            continue
        index = name[len(RANGE_PREFIX):]
        if index.isdigit() and int(index) < count:
            sums[int(index)] = _kernels_us(event) / 1e3
    return sums


def _torch_profiler() -> Callable[[], Any]:
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    return lambda: torch.profiler.profile(activities=activities)


def _torch_range(name: str) -> Any:
    import torch

    return torch.profiler.record_function(name)


def time_kernels(fn: Callable[[], Any], count: int, clock: Any,
                 prepare: Optional[Callable[[], Any]] = None,
                 profiler: Optional[Callable[[], Any]] = None,
                 annotate: Optional[Callable[[str], Any]] = None) -> Dict[int, float]:
    """``count`` calls of ``fn`` under the profiler, each in its range after ``prepare`` and
    the clock's barrier (synchronize, L2 flush), then synchronized: the kernel ms of each."""
    if count <= 0:
        return {}
    session, annotate = (profiler or _torch_profiler())(), annotate or _torch_range
    with session as prof:
        for i in range(count):
            if prepare is not None:
                prepare()
            if clock.barrier is not None:
                clock.barrier()
            else:
                clock.synchronize()
            with annotate(f"{RANGE_PREFIX}{i}"):
                fn()
            clock.synchronize()
    return kernel_sums(prof.events(), count)


def add_kernel_times(result: Any, sums: Dict[int, float]) -> None:
    """``measure.kernel_time`` and ``measure.launch_overhead`` (event − kernel ms of the calls
    with the same index) for the calls the profiler saw."""
    found = [i for i in sorted(sums) if i < len(result.measure_ms)]
    result.extra["measure.kernel_time"] = [sums[i] for i in found]
    result.extra["measure.launch_overhead"] = [result.measure_ms[i] - sums[i] for i in found]

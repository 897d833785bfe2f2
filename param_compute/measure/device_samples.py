"""What a measured CUDA pass records beside its event times: the GPU's clock and throttling per
sample (``gpu_clocks``; ``--discard-throttled`` drops throttled samples) and, with ``--timer
kernel``, the summed kernel time per call (``kernel_time``). Nothing happens off CUDA."""

from __future__ import annotations

from typing import Any, Callable, Optional

from param_compute.measure.gpu_clocks import ThrottleWatch, mark_throttled, watch_clocks
from param_compute.measure.kernel_time import MAX_PROFILED_CALLS, add_kernel_times, time_kernels

__all__ = ["finish_measure", "watch_clocks"]


def finish_measure(result: Any, watch: Optional[ThrottleWatch], options: Any, clock: Any,
                   fn: Callable[[], Any], prepare: Optional[Callable[[], Any]]) -> None:
    """After a pass's measured phase (``result.measure_ms`` set): mark (and with
    ``options.discard_throttled`` drop) throttled samples, then time the kernels."""
    if watch is not None:
        mark_throttled(result, watch.per_sample(len(result.measure_ms)),
                       options.discard_throttled)
    if options.timer == "kernel":
        count = min(len(result.measure_ms), MAX_PROFILED_CALLS)
        add_kernel_times(result, time_kernels(fn, count, clock, prepare))

"""The device kept busy while the host launches a timed call, so that an event pair times the
call's kernels and not the host's launch latency.

A CUDA event pair around a call on an idle GPU fires the start event at once and the call's
first kernel only when the host has launched it (cuBLAS picking a GEMM kernel: tens of µs).
A short spin kernel (``torch.cuda._sleep``) queued just before the start event keeps the GPU
busy meanwhile. Used by the measuring clock (``measure.devices``) before each discrete
iteration and by the in-place timer of a live capture (``capture.live.timing``) before each
call of the original step.
"""

from __future__ import annotations

import functools
from typing import Optional

#: Host time assumed for the first timed call's launch, before any has been measured.
FIRST_LAUNCH_US = 40.0
MAX_LAUNCH_COVER_US = 100.0


def launch_cover_us(last_host_us: Optional[float]) -> float:
    """How long the GPU should stay busy after the barrier: enough to hide the host's launch
    of the next call, judged by the last call's host time; bounded so that a host-bound
    multi-kernel call is not turned into a replay of queued kernels."""
    host_us = FIRST_LAUNCH_US if last_host_us is None else max(last_host_us, 0.0)
    return min(1.5 * host_us + 10.0, MAX_LAUNCH_COVER_US)


@functools.lru_cache(maxsize=None)
def spin_cycles_per_us(device_index: int) -> float:
    """``torch.cuda._sleep`` cycles per µs on this device, measured once (about 2 ms); 0 where
    this torch build has no ``_sleep`` (a private function): then nothing covers the launch."""
    import torch

    if not callable(getattr(torch.cuda, "_sleep", None)):
        return 0.0
    with torch.cuda.device(device_index):
        torch.cuda._sleep(1000)  # load the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 2_000_000
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / max(start.elapsed_time(end) * 1e3, 1e-3)

"""The device seam: which clock times a device, and how a device is checked and prepared.

Only this module knows about CUDA specifics (events, L2 size, caching allocator); the timing loop
and the engine see a clock with ``stamp``/``elapsed_ms``/``barrier``/``synchronize``.
"""

from __future__ import annotations

from typing import Any, Optional

from .errors import OptionsError
from .timing import HostClock


class CudaEventClock:
    """CUDA events on the current stream; ``barrier`` synchronizes and flushes the L2 cache.

    The flush buffer is sized from the device's own L2 size and allocated once per clock (per
    run), outside every timed region.
    """

    name = "cuda_events"

    def __init__(self, device: str, flush_l2: bool = True):
        import torch

        self._torch = torch
        self.device = torch.device(device)
        self._event = torch.cuda.Event
        self._flush_buffer: Optional[Any] = None
        if flush_l2:
            l2_bytes = torch.cuda.get_device_properties(self.device).L2_cache_size
            self._flush_buffer = torch.empty(max(l2_bytes, 1), dtype=torch.int8,
                                             device=self.device)
        self.barrier = self._barrier

    def stamp(self) -> Any:
        event = self._event(enable_timing=True)
        event.record()
        return event

    @staticmethod
    def elapsed_ms(start: Any, end: Any) -> float:
        return start.elapsed_time(end)

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self.device)

    def _barrier(self) -> None:
        if self._flush_buffer is not None:
            self._flush_buffer.zero_()
        self._torch.cuda.synchronize(self.device)


def check_device(device: str) -> None:
    """Fail early, with a clear message, when the device cannot be used."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise OptionsError(f"--device {device}: CUDA is not available to this torch build "
                               f"({torch.__version__})")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise OptionsError(f"--device {device}: only {torch.cuda.device_count()} CUDA "
                               "device(s) visible")


def clock_for(device: str):
    if device.startswith("cuda"):
        import torch

        torch.cuda.set_device(torch.device(device))
        return CudaEventClock(device)
    return HostClock()

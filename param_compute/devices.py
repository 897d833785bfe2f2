"""The device seam: the clock that times a device, its memory statistics, CUDA graph capture.

Only this module knows CUDA specifics (events, L2 size, caching allocator, graphs); the timing
loop and the engine see a ``Device`` with a ``clock`` (``stamp``/``elapsed_ms``/``barrier``/
``synchronize``, optionally ``host_elapsed_ms``) and ``reset_peak_memory``/``peak_memory_mb``.
Tests substitute fakes for these members to exercise the CUDA paths on a CPU-only machine.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from .errors import OptionsError
from .timing import HostClock


class CudaEventClock:
    """CUDA events on the current stream, plus the host clock at the same moments.

    ``barrier`` (before each discrete iteration) synchronizes, then flushes the L2 cache unless
    it is kept warm on request. The flush buffer is sized from the device's own L2 size and
    allocated once per run, outside every timed region; flushing writes it whole.
    """

    name = "cuda_events"

    def __init__(self, device: str, flush_l2: bool = True):
        import torch

        self._torch = torch
        self.device = torch.device(device)
        self._event = torch.cuda.Event
        self._pool: list = []
        self._flush_buffer: Optional[Any] = None
        if flush_l2:
            l2_bytes = torch.cuda.get_device_properties(self.device).L2_cache_size
            self._flush_buffer = torch.empty(max(int(l2_bytes), 1), dtype=torch.int8,
                                             device=self.device)
        self.barrier = self._barrier

    def reserve(self, count: int) -> None:
        """Create the events the next ``count`` stamps use, before the timed loop starts: an
        event created inside the loop would delay the operator's launch."""
        self._pool = [self._event(enable_timing=True) for _ in range(count)]
        self._pool.reverse()

    def stamp(self) -> Any:
        event = self._pool.pop() if self._pool else self._event(enable_timing=True)
        event.record()
        return event, time.perf_counter_ns()

    @staticmethod
    def elapsed_ms(start: Any, end: Any) -> float:
        return start[0].elapsed_time(end[0])

    @staticmethod
    def host_elapsed_ms(start: Any, end: Any) -> float:
        return (end[1] - start[1]) / 1e6

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self.device)

    def _barrier(self) -> None:
        # Wait for the previous iteration, then queue the flush without waiting for it: the
        # flush kernel keeps the GPU busy while the host records the start event and launches
        # the operator, so the event pair times the operator's kernels rather than the host's
        # launch latency (the approach of triton's do_bench).
        self._torch.cuda.synchronize(self.device)
        if self._flush_buffer is not None:
            self._flush_buffer.zero_()


class Device:
    """What the engine needs from a device: a clock, peak-memory statistics, graph capture."""

    def __init__(self, name: str, clock: Any):
        self.name = name
        self.clock = clock

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory window (no-op where the device has no allocator stats)."""

    def peak_memory_mb(self) -> Optional[float]:
        return None

    def release_cached_memory(self) -> None:
        """Return cached allocator blocks to the device (only where there is a cache)."""

    def capture_graph(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        raise OptionsError("--cuda-graph needs a CUDA device")


class CudaDevice(Device):
    def __init__(self, name: str, flush_l2: bool = True):
        import torch

        self._torch = torch
        device = torch.device(name)
        if device.index is None:  # plain "cuda": the current device
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        super().__init__(str(device), CudaEventClock(str(device), flush_l2))

    def reset_peak_memory(self) -> None:
        self._torch.cuda.reset_peak_memory_stats(self.clock.device)

    def peak_memory_mb(self) -> Optional[float]:
        return self._torch.cuda.max_memory_allocated(self.clock.device) / 2**20

    def release_cached_memory(self) -> None:
        self._torch.cuda.empty_cache()

    def capture_graph(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """Capture ``fn`` once into a CUDA graph; the returned callable replays it."""
        torch = self._torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up (lazy init, autotuning) outside the capture
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay


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


def open_device(name: str, flush_l2: bool = True) -> Device:
    if name.startswith("cuda"):
        return CudaDevice(name, flush_l2)
    return Device(name, HostClock())

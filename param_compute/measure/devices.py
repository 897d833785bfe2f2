"""The device seam: the clock that times a device, its memory statistics, CUDA graph capture.

Only this module knows CUDA specifics (events, L2 size, caching allocator, graphs); the timing
loop and the engine see a ``Device`` with a ``clock`` (``stamp``/``elapsed_ms``/``barrier``/
``synchronize``, optionally ``host_elapsed_ms``) and ``reset_peak_memory``/``peak_memory_mb``/
``peak_bytes`` (on the host: the resident memory's growth, ``measure.host_memory``).
Tests substitute fakes for these members to exercise the CUDA paths on a CPU-only machine.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from param_compute.errors import OptionsError
from param_compute.measure.host_memory import RssWindow
from param_compute.measure.launch_cover import (  # noqa: F401 (the clock's seam, re-exported)
    FIRST_LAUNCH_US, MAX_LAUNCH_COVER_US, launch_cover_us, spin_cycles_per_us)
from param_compute.measure.timing import HostClock


class CudaEventClock:
    """CUDA events on the current stream, plus the host clock at the same moments.

    ``barrier`` (before each discrete iteration) synchronizes, then flushes the L2 cache unless
    it is kept warm on request. The flush buffer is sized from the device's own L2 size and
    allocated once per run, outside every timed region; flushing writes it whole.

    Then it queues a short spin kernel (``torch.cuda._sleep``) that keeps the GPU busy while
    the host records the start event and launches the operator: without it an operator whose
    host-side launch outlasts the flush (cuBLAS picking a GEMM kernel: ~10 µs longer than the
    ~17 µs a 50 MB flush takes on an H100) is timed from an idle GPU, launch latency included.
    The spin lasts 1.5x the host time of the previous timed call plus 10 µs, at most 100 µs
    (triton's do_bench covers about as much with its 256 MB flush); its cycles per µs are
    measured once per device.
    """

    name = "cuda_events"

    def __init__(self, device: str, flush_l2: bool = True):
        import torch

        self._torch = torch
        self.device = torch.device(device)
        self._event = torch.cuda.Event
        self._pool: list = []
        self._flush_buffer: Optional[Any] = None
        self._cycles_per_us = spin_cycles_per_us(self.device.index or 0)
        self._host_ns = (0, 0)  # the host clock at the last two stamps
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
        now = time.perf_counter_ns()
        self._host_ns = (self._host_ns[1], now)
        return event, now

    @staticmethod
    def elapsed_ms(start: Any, end: Any) -> float:
        return start[0].elapsed_time(end[0])

    @staticmethod
    def host_elapsed_ms(start: Any, end: Any) -> float:
        return (end[1] - start[1]) / 1e6

    @staticmethod
    def host_ns(stamp: Any) -> int:
        """The host clock (ns) as the stamp's event was recorded."""
        return stamp[1]

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self.device)

    def cover(self, last_host_us: Optional[float]) -> None:
        """Queue the launch cover (``measure.launch_cover``) for the next call, judged by the
        last call's host time (the step replay's call-timed passes)."""
        if self._cycles_per_us:
            self._torch.cuda._sleep(int(launch_cover_us(last_host_us) * self._cycles_per_us))

    def _barrier(self) -> None:
        # Wait for the previous iteration, then queue the flush and the spin without waiting
        # for them: they keep the GPU busy while the host records the start event and launches
        # the operator, so the event pair times the operator's kernels rather than the host's
        # launch latency.
        self._torch.cuda.synchronize(self.device)
        if self._flush_buffer is not None:
            self._flush_buffer.zero_()
        if self._cycles_per_us:
            previous, latest = self._host_ns
            cover = launch_cover_us((latest - previous) / 1e3 if previous else None)
            self._torch.cuda._sleep(int(cover * self._cycles_per_us))


class Device:
    """What the engine needs from a device: a clock, peak-memory statistics, graph capture."""

    def __init__(self, name: str, clock: Any):
        self.name = name
        self.clock = clock
        self._rss = RssWindow()

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory window (on the host: of the process's resident memory)."""
        self._rss.start()

    def peak_memory_mb(self) -> Optional[float]:
        """The allocator's peak in the window (MB; None where the device has no allocator)."""
        return None

    def peak_bytes(self) -> Optional[int]:
        """Bytes taken above what was held when the window began, at the window's peak."""
        return self._rss.peak_bytes()

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
        self._allocated = self._torch.cuda.memory_allocated(self.clock.device)

    def peak_memory_mb(self) -> Optional[float]:
        return self._torch.cuda.max_memory_allocated(self.clock.device) / 2**20

    def peak_bytes(self) -> Optional[int]:
        """The caching allocator's peak in the window above what was allocated at its start."""
        peak = self._torch.cuda.max_memory_allocated(self.clock.device)
        return max(0, peak - getattr(self, "_allocated", 0))

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
            self.graph_output = fn()  # what every replay rewrites (read by --verify)
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

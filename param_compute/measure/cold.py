"""``--cold``: isolated runs timed with their inputs out of the cache, as in a real step.

A replayed config runs again and again on the same inputs, which then sit in the cache; in a
training step they were written long before. Two ways to undo that, alone or together:

* ``rotate``: the config's inputs are made ``copies`` times (same values, other memory) and each
  call uses the next copy, so that between two uses of one copy all the others have gone
  through the cache: ``copies`` is the smallest number whose inputs together exceed
  ``ROTATE_FACTOR`` x the last-level cache (at least 1, at most ``MAX_COPIES``). Works in every
  execution mode; forward pass only (a backward pass runs on one copy).
* ``flush``: before each discrete iteration, outside the timed region, a buffer of
  ``FLUSH_FACTOR`` x the last-level cache is read and written whole (the CPU counterpart of the
  CUDA L2 flush, which on CUDA is what ``flush`` means). Discrete mode only.

The last-level cache is read from ``/sys/devices/system/cpu/cpu0/cache`` (the highest level of
data or unified cache; ``FALLBACK_CACHE_BYTES`` where that can't be read), on CUDA the device's
L2. Each pass's record says what was done: ``cold.copies`` (1: no rotation),
``cold.flush_bytes`` (0: no flush) and ``cold.cache_bytes`` in its metric.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

COLD_METHODS = ("rotate", "flush", "both")
ROTATE_FACTOR = 2
FLUSH_FACTOR = 2
MAX_COPIES = 256
#: The last-level cache assumed where the machine doesn't say (a large server L3 slice).
FALLBACK_CACHE_BYTES = 32 << 20
CPU_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
_SIZE = re.compile(r"^(\d+)([KMG]?)$")


def _read(path: Path) -> Optional[str]:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read(64).strip()
    except (OSError, UnicodeDecodeError):
        return None


def cpu_cache_bytes(root: Path = CPU_CACHE_DIR) -> Tuple[int, str]:
    """(bytes, where from) of the CPU's last-level data or unified cache."""
    best: Tuple[int, int] = (0, 0)  # (level, bytes)
    try:
        entries = sorted(root.glob("index*"))
    except OSError:
        entries = []
    for entry in entries:
        kind, level, size = (_read(entry / name) for name in ("type", "level", "size"))
        match = _SIZE.match(size or "")
        if kind not in ("Data", "Unified") or not (level or "").isdigit() or match is None:
            continue
        value = int(match.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[match.group(2)]
        best = max(best, (int(level), value))
    if best[1] > 0:
        return best[1], f"L{best[0]} ({root})"
    return FALLBACK_CACHE_BYTES, "fallback (the machine's cache sizes could not be read)"


def cache_bytes(device: str) -> Tuple[int, str]:
    """(bytes, where from) of the last-level cache the device's ops go through."""
    if device.startswith("cuda"):
        import torch

        size = int(torch.cuda.get_device_properties(torch.device(device)).L2_cache_size)
        return size, "the CUDA device's L2"
    return cpu_cache_bytes()


def copies_needed(input_bytes: int, cache: int, factor: int = ROTATE_FACTOR,
                  most: int = MAX_COPIES) -> int:
    """How many copies of inputs of ``input_bytes`` together exceed ``factor`` x ``cache``."""
    if input_bytes <= 0:
        return 1
    return max(1, min(most, math.ceil(factor * cache / input_bytes)))


class Rotation:
    """A callable that calls ``fns`` in turn, one per call (each bound to one copy)."""

    __slots__ = ("fns", "next")

    def __init__(self, fns: Sequence[Callable[[], Any]]):
        self.fns = list(fns)
        self.next = 0

    def __call__(self) -> Any:
        fn = self.fns[self.next]
        self.next = (self.next + 1) % len(self.fns)
        return fn()


class CacheFlush:
    """Reads and writes a buffer larger than the cache (the pre-call hook of a discrete
    iteration on CPU)."""

    def __init__(self, nbytes: int, device: str = "cpu"):
        import torch

        self.nbytes = max(4, nbytes // 4 * 4)
        self.buffer = torch.zeros(self.nbytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.add_(1)  # through the cache: a read and a write of every line


class ColdCache:
    """What ``--cold METHOD`` does for one run of the engine: the cache size, the flush, and
    the copies of each config's inputs."""

    def __init__(self, method: str, device: str):
        if method not in COLD_METHODS:
            raise ValueError(f"--cold must be one of {', '.join(COLD_METHODS)}, got {method!r}")
        self.method = method
        self.device = device
        self.cache, self.source = cache_bytes(device)
        self.rotate = method in ("rotate", "both")
        self.flush: Optional[CacheFlush] = None
        if method in ("flush", "both") and not device.startswith("cuda"):
            self.flush = CacheFlush(FLUSH_FACTOR * self.cache, device)

    @classmethod
    def attach(cls, method: Optional[str], device) -> Optional["ColdCache"]:
        """The ``ColdCache`` of ``--cold METHOD`` on a ``measure.devices.Device`` (its flush
        installed as the clock's pre-call hook on CPU), or None without ``--cold``."""
        if not method:
            return None
        cold = cls(method, device.name)
        if cold.flush is not None:
            device.clock.barrier = cold.flush  # run before each discrete iteration, untimed
        return cold

    def flush_bytes(self) -> int:
        if self.method not in ("flush", "both"):
            return 0
        return self.cache if self.device.startswith("cuda") else self.flush.nbytes

    def forward(self, fn: Callable[[], Any], input_bytes: int,
                more: Callable[[], Callable[[], Any]]) -> Callable[[], Any]:
        """The callable to time: ``fn`` itself, or a ``Rotation`` over ``fn`` and the
        callables ``more()`` binds to fresh copies of the inputs."""
        copies = copies_needed(input_bytes, self.cache) if self.rotate else 1
        if copies == 1:
            return fn
        fns: List[Callable[[], Any]] = [fn] + [more() for _ in range(copies - 1)]
        return Rotation(fns)

    def note(self, passes: Sequence[Any], timed: Callable[[], Any]) -> None:
        """Say in each pass's metric what was done (the forward pass timed ``timed``)."""
        copies = len(timed.fns) if isinstance(timed, Rotation) else 1
        for result in passes:
            result.extra.update(self.metric(copies if result.name == "forward" else 1))

    def metric(self, copies: int) -> dict:
        """What was done, for a pass's metric (every value a list of numbers)."""
        return {"cold.copies": [copies], "cold.flush_bytes": [self.flush_bytes()],
                "cold.cache_bytes": [self.cache]}

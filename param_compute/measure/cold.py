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
data or unified cache), on CUDA the device's L2. Those files are read bounded (a page each,
regular files only) and their sizes checked: a size that can't be read, is zero or is over
``MAX_CACHE_BYTES`` (no cache is that large: a forged or broken file) gives
``FALLBACK_CACHE_BYTES`` instead, with a warning naming the file. The copies and the flush
buffer count against ``--max-memory`` before any is made (``runtime.memory_guard``). Each pass's
record says what was done: ``cold.copies`` (1: no rotation), ``cold.flush_bytes`` (0: no
flush) and ``cold.cache_bytes`` in its metric.
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

from param_compute.files import MISSING, FileRefused, read_bounded

log = logging.getLogger("param_compute")

COLD_METHODS = ("rotate", "flush", "both")
ROTATE_FACTOR = 2
FLUSH_FACTOR = 2
MAX_COPIES = 256
#: The last-level cache assumed where the machine doesn't say (a large server L3 slice).
FALLBACK_CACHE_BYTES = 32 << 20
#: The largest cache size believed (the largest L3 of a CPU socket is a few hundred MiB).
MAX_CACHE_BYTES = 1 << 30
CPU_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
#: The most read of one cache file (a /sys file is a page).
_FILE_LIMIT = 4096
_SIZE = re.compile(r"^(\d{1,15})([KMG]?)$")


class _Unreadable(Exception):
    """A cache file that can't be believed: the message names the file and why."""


def _read(path: Path) -> Optional[str]:
    """The text of a cache file; None where it is missing; ``_Unreadable`` where it is no
    regular file, too large, or not ASCII."""
    try:
        return bytes(read_bounded(path, _FILE_LIMIT)).decode("ascii").strip()
    except FileRefused as refused:
        if refused.code == MISSING:
            return None
        raise _Unreadable(str(refused)) from None
    except UnicodeDecodeError:
        raise _Unreadable(f"{path}: not ASCII text") from None


def _entry(entry: Path) -> Optional[Tuple[int, int]]:
    """(level, bytes) of one ``index*`` folder of data or unified cache, None for another
    kind; ``_Unreadable`` for a level or size that can't be believed."""
    kind = _read(entry / "type")
    if kind not in ("Data", "Unified"):
        return None
    level, size = _read(entry / "level"), _read(entry / "size")
    if level is None or not level.isdigit() or len(level) > 3:
        raise _Unreadable(f"{entry / 'level'}: " + ("missing" if level is None else
                                                   f"malformed cache level {level[:40]!r}"))
    match = _SIZE.match(size or "")
    if match is None:
        raise _Unreadable(f"{entry / 'size'}: " + ("missing" if size is None else
                                                  f"malformed cache size {size[:40]!r}"))
    value = int(match.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[match.group(2)]
    if not 0 < value <= MAX_CACHE_BYTES:
        raise _Unreadable(f"{entry / 'size'}: a cache of {size} is not believed (0 < size <= "
                          f"{MAX_CACHE_BYTES >> 20} MiB)")
    return int(level), value


def cpu_cache_bytes(root: Optional[Path] = None) -> Tuple[int, str]:
    """(bytes, where from) of the CPU's last-level data or unified cache, read from ``root``
    (default ``CPU_CACHE_DIR``); ``FALLBACK_CACHE_BYTES`` where it can't be read, with a
    warning naming the file where one is malformed or absurd."""
    root = CPU_CACHE_DIR if root is None else Path(root)
    best: Tuple[int, int] = (0, 0)  # (level, bytes)
    try:
        entries = sorted(root.glob("index*"))
    except OSError:
        entries = []
    for entry in entries:
        try:
            found = _entry(entry)
        except _Unreadable as why:
            log.warning("the CPU cache size can't be read (%s): --cold assumes %d MiB", why,
                        FALLBACK_CACHE_BYTES >> 20)
            return FALLBACK_CACHE_BYTES, f"fallback ({why})"
        if found is not None:
            best = max(best, found)
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


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.4g} MiB"


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
    iteration on CPU). The buffer is made by ``allocate``, once the memory guard has counted
    it (``runtime.memory_guard.cold_bytes``)."""

    def __init__(self, nbytes: int, device: str = "cpu"):
        self.nbytes = max(4, nbytes // 4 * 4)
        self.device = device
        self.buffer = None

    def allocate(self) -> None:
        """Make the buffer (once); ``MemoryError`` saying so where it can't be."""
        if self.buffer is not None:
            return
        import torch

        try:
            self.buffer = torch.zeros(self.nbytes // 4, dtype=torch.int32, device=self.device)
        except RuntimeError as exc:  # torch's "can't allocate memory"
            raise MemoryError(f"--cold: the {_mib(self.nbytes)} flush buffer can't be "
                              f"allocated: {(str(exc).splitlines() or [''])[0][:200]}") from None

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

    def copies(self, input_bytes: int) -> int:
        """How many copies of a config's inputs (``input_bytes``) the forward pass rotates
        over, the original included (1: none made)."""
        return copies_needed(input_bytes, self.cache) if self.rotate else 1

    def flush_bytes(self) -> int:
        if self.method not in ("flush", "both"):
            return 0
        return self.cache if self.device.startswith("cuda") else self.flush.nbytes

    def forward(self, fn: Callable[[], Any], input_bytes: int,
                more: Callable[[], Callable[[], Any]]) -> Callable[[], Any]:
        """The callable to time: ``fn`` itself, or a ``Rotation`` over ``fn`` and the
        callables ``more()`` binds to fresh copies of the inputs. The flush buffer is made
        here, before the first config is timed (and after the memory guard counted it)."""
        if self.flush is not None:
            self.flush.allocate()
        copies = self.copies(input_bytes)
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

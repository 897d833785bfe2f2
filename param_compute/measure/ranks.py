"""Measuring across the ranks of a job: a clock that keeps them in step, for the one Measurer.

A job's measurement runs on every rank at once, through the same ``Measurer`` as any other,
with its device's clock wrapped in a ``RankClock``:

* a barrier (``torch.distributed.barrier`` on the measured group, after the device's own
  barrier) before each discrete sample, outside the timed region, so the ranks start each
  sample together;
* ``agree(times)``: each sample's largest value over the ranks (one all-reduce of the
  block's samples, after the block). The Measurer decides when to stop on the agreed samples,
  so every rank takes the same number of samples and none waits in a collective the others
  left. With ``slowest`` the agreed samples are also what is recorded: a collective measured
  alone is as slow as its slowest rank (a comms benchmark's convention); without it each rank
  records its own (a step replay: the step as this rank saw it).

``ranked(device, group, slowest)`` gives a device whose clock is wrapped. The thread's CPU
time is never paired with such a clock's samples: a rank waiting on another is not
descheduled.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, List, Optional


class RankClock:
    """A device clock made to agree across a job's ranks (see the module's doc)."""

    def __init__(self, base: Any, group: Any = None, slowest: bool = False,
                 barrier: Optional[Callable[[], None]] = None,
                 reduce_max: Optional[Callable[[List[float]], List[float]]] = None):
        """``group``: the process group the ranks measure together (None: the default
        group); ``barrier``/``reduce_max``: stand-ins for ``torch.distributed``'s (tests)."""
        self.base = base
        self.name = getattr(base, "name", "")
        self.group = group
        self.slowest = slowest
        self.stamp = base.stamp
        self.elapsed_ms = base.elapsed_ms
        self.synchronize = base.synchronize
        self._barrier = barrier or self._dist_barrier
        self._reduce_max = reduce_max or self._dist_max
        own = getattr(base, "barrier", None)

        def barrier_all() -> None:
            if own is not None:
                own()
            self._barrier()

        self.barrier = barrier_all

    def __getattr__(self, name: str) -> Any:  # reserve, host_ns, host_elapsed_ms, cover, device
        return getattr(self.base, name)

    def _dist_barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier(group=self.group)

    def _dist_max(self, values: List[float]) -> List[float]:
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group)
        return tensor.tolist()

    def agree(self, times: List[float]) -> List[float]:
        """Each sample's largest value over the ranks (every rank calls it with as many)."""
        if not times:
            self._reduce_max([0.0])  # every rank takes part, whatever it measured
            return []
        return list(self._reduce_max(list(times)))


def ranked(device: Any, group: Any = None, slowest: bool = False, **stand_ins: Any) -> Any:
    """A copy of ``device`` whose clock is a ``RankClock`` over its own."""
    out = copy.copy(device)
    out.clock = RankClock(device.clock, group, slowest, **stand_ins)
    return out

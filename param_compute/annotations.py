"""Named ranges for profilers: NVTX (``param_compute`` domain) and, when profiling, torch.profiler.

Ranges mark each run (``param_compute|OP|ID``) and each timed phase inside it
(``param_compute|OP|ID|warmup|forward``, ``...|measure|backward``), never single iterations, so
they cost nothing measurable: without a profiler attached the nvtx package's calls are no-ops of
well under a microsecond, and torch.profiler's ``record_function`` is only used while profiling.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import nvtx

NVTX_DOMAIN = "param_compute"


def run_range_name(op_name: str, run_id: str) -> str:
    return f"param_compute|{op_name}|{run_id}"


def phase_range_name(op_name: str, run_id: str, phase: str, pass_name: str) -> str:
    return f"param_compute|{op_name}|{run_id}|{phase}|{pass_name}"


class Annotator:
    """Opens NVTX ranges, plus torch.profiler ranges while a profile is being recorded."""

    def __init__(self, profiling: bool = False):
        self.profiling = profiling
        self._domain = nvtx.get_domain(NVTX_DOMAIN)

    @contextmanager
    def range(self, name: str) -> Iterator[None]:
        self._domain.push_range(self._domain.get_event_attributes(message=name))
        try:
            if self.profiling:
                from torch.autograd.profiler import record_function

                with record_function(name):
                    yield
            else:
                yield
        finally:
            self._domain.pop_range()

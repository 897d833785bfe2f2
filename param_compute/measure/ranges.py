"""Named ranges for profilers: NVTX (``param_compute`` domain) and, when profiling, torch.profiler.

Ranges mark each run (``param_compute|OP|ID``) and each timed phase inside it
(``param_compute|OP|ID|warmup|forward``, ``...|measure|backward``), never single iterations, so
they cost nothing measurable: without a profiler attached the nvtx package's calls are no-ops of
well under a microsecond, and torch.profiler's ``record_function`` is only used while profiling.

The one exception is the profiler child of ``--ncu``/``--nsys`` (``run_batch``): there each
measured iteration is also a start/end range ``param_compute|OP|ID|iteration|PASS`` (see
``iteration_ranges``), so Nsight Compute's NVTX filter selects measured iterations only (no
warm-up, data generation, L2 flush or the forward that precedes a timed backward). Start/end
ranges are process-wide, unlike push/pop ranges, so the backward kernels that autograd launches
from its own thread on CUDA fall inside them too.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, Tuple

import nvtx

from param_compute.plan.runkey import RunKey, RunKeyError, join_fields, split_fields

NVTX_DOMAIN = "param_compute"


def run_range_name(op_name: str, run_id: str) -> str:
    return join_fields(NVTX_DOMAIN, op_name, run_id)


def phase_range_name(op_name: str, run_id: str, phase: str, pass_name: str) -> str:
    return join_fields(NVTX_DOMAIN, op_name, run_id, phase, pass_name)


#: The phase word of per-iteration ranges (only in the profiler child).
ITERATION = "iteration"


def iteration_range_name(op_name: str, run_id: str, pass_name: str) -> str:
    return join_fields(NVTX_DOMAIN, op_name, run_id, ITERATION, pass_name)


def parse_range_name(name: str) -> Optional[Tuple[RunKey, Optional[str], Optional[str]]]:
    """(run key, phase, pass) of a range name made here (phase and pass None for a run's own
    range); None for any other name."""
    parts = split_fields(name)
    if parts[0] != NVTX_DOMAIN or len(parts) not in (5, 7):
        return None
    try:
        key = RunKey.parse(join_fields(*parts[1:5]))
    except RunKeyError:
        return None
    return (key, parts[5], parts[6]) if len(parts) == 7 else (key, None, None)


#: Nsight Compute's NVTX filter for measured iterations: start/end ranges of the param_compute
#: domain whose name has ``|iteration|`` (a ``regex:`` filter; checked with ncu 2025.3.1).
NCU_ITERATION_FILTER = f"regex:{NVTX_DOMAIN}@.*\\|{ITERATION}\\|.*"


def iteration_ranges(fn: Callable[[], Any], name: str) -> Callable[[], Any]:
    """``fn`` wrapped so that every call is one NVTX start/end range named ``name``."""
    domain = nvtx.get_domain(NVTX_DOMAIN)
    attributes = domain.get_event_attributes(message=name)
    start, end = domain.start_range, domain.end_range

    def ranged() -> Any:
        handle = start(attributes)
        try:
            return fn()
        finally:
            end(handle)

    return ranged


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

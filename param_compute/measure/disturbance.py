"""What the process can see of a disturbed measurement: context switches and descheduled samples.

``involuntary_switches()`` counts the times the kernel took the core from this thread (from
``getrusage(RUSAGE_THREAD)``, the whole process where there is no per-thread count). A sample is
descheduled when its wall time exceeds the thread's CPU time by more than ``DESCHEDULED_SLACK``
(``results.stats``); ``judge`` turns the paired times of a pass into its facts and, with
``--discard-disturbed``, drops those samples. Torch-free.
"""

from __future__ import annotations

import resource
from typing import Any, Dict, List, Optional, Sequence

from param_compute.results.stats import descheduled

_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def involuntary_switches() -> Optional[int]:
    """Involuntary context switches of this thread so far (None where the OS does not say)."""
    try:
        return resource.getrusage(_WHO).ru_nivcsw
    except (OSError, ValueError):
        return None


def judge(wall_ms: List[float], cpu_ms: List[float], discard: bool,
          parallel: Sequence[List[Any]] = ()) -> Dict[str, Any]:
    """The ``descheduled`` fraction of paired samples; with ``discard`` the descheduled samples
    are removed from ``wall_ms``, ``cpu_ms`` and every list of ``parallel`` (in place) and
    ``discarded`` says how many (none when every sample was: then nothing is left to trust,
    and the flag says so)."""
    flags = descheduled(wall_ms, cpu_ms)
    if not flags:
        return {}
    facts: Dict[str, Any] = {"descheduled": sum(flags) / len(flags)}
    if discard:
        dropped = sum(flags)
        if dropped == len(flags):
            dropped = 0
        facts["discarded"] = dropped
        if dropped:
            for values in (wall_ms, cpu_ms, *parallel):
                if len(values) == len(flags):
                    values[:] = [v for v, bad in zip(values, flags) if not bad]
    return facts

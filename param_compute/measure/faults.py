"""The process's minor page faults: how many fresh pages its calls touched for the first time.

A call whose output is new memory faults once per page on its first write (the kernel zeroes
and maps each page), which for a few megabytes costs as much as a small op's work. The step's
original (``capture.live.timing``) and its replay (``runtime.step_replay``) count them per call
with ``minor_faults`` read before and after, outside any timed region.
"""

from __future__ import annotations

import resource


def minor_faults() -> int:
    """The process's minor page faults so far (``getrusage``; all threads)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

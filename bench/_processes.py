"""Torch-free helpers for the benches that time whole processes: a core free before each one,
one CPU for both sides of a comparison, param_compute's bytecode compiled first.

Torch-free on purpose: a child started from a process that imported torch counts torch's pages
in its peak RSS (``ru_maxrss`` carries over the exec), so the scripts that report a child's peak
memory gate it with these, never with ``_common`` (which imports torch).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional

PACKAGE = Path(__file__).resolve().parent.parent / "param_compute"


def _busy_jiffies() -> int:
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # all but idle and iowait (steal counts as busy)


def others_busy_cores(window_s: float = 0.1) -> float:
    """CPU cores kept busy by everything else over ``window_s`` while this process sleeps."""
    before = _busy_jiffies()
    time.sleep(window_s)
    return (_busy_jiffies() - before) / os.sysconf("SC_CLK_TCK") / window_s


def wait_quiet(max_cores: float = 1.25, timeout_s: float = 5.0) -> bool:
    """Wait until other processes leave a core free for this one; False if they never did.

    On a shared two-core machine a measurement overlapping a burst of other work is mostly a
    measurement of the scheduler; gating every step on a free core keeps both sides clean, and
    the scripts report how many steps had to run without one.
    """
    deadline = time.monotonic() + timeout_s
    while others_busy_cores() > max_cores:
        if time.monotonic() > deadline:
            return False
    return True


def _idle_jiffies_per_cpu() -> Dict[int, int]:
    idle: Dict[int, int] = {}
    with open("/proc/stat") as stat:
        for line in stat:
            name, *fields = line.split()
            if name.startswith("cpu") and name != "cpu":
                idle[int(name[3:])] = int(fields[3]) + int(fields[4])
    return idle


def quietest_cpu(window_s: float = 0.1) -> int:
    """The CPU this process may use that sat idle the longest over ``window_s``."""
    allowed = os.sched_getaffinity(0)
    before = _idle_jiffies_per_cpu()
    time.sleep(window_s)
    after = _idle_jiffies_per_cpu()
    return max(sorted(allowed), key=lambda cpu: after.get(cpu, 0) - before.get(cpu, 0))


class pinned_cpu:
    """Run the block on one CPU (``None``: wherever the scheduler puts it), and every child
    process it starts on the same one.

    The two vCPUs of the shared VM are not equally fast for long stretches: torch.sum over
    2048×2048 float32 read 13–20% faster on vCPU 1 than on vCPU 0 for 2.5 minutes (same
    process, same tensor, re-pinned every 0.3 s, thread CPU time), then equal, and 16% slower
    on vCPU 1 a few minutes earlier and for a few seconds later; mm 256² and bmm stayed within
    ±2%. A child started by a waiting parent ran on the other vCPU 8 of 8 times. A comparison
    between two processes, or a thread the scheduler moves between vCPUs, measures which vCPU
    each side got; pinned, both sides get the same one.
    """

    def __init__(self, cpu: Optional[int]):
        self.cpu = cpu
        self.saved: Optional[set] = None

    def __enter__(self) -> "pinned_cpu":
        if self.cpu is not None:
            self.saved = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {self.cpu})
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.saved is not None:
            os.sched_setaffinity(0, self.saved)


def compile_bytecode(python: str = sys.executable) -> None:
    """Compile param_compute's bytecode, as ``pip install`` does for an installed package, so
    that the processes measured import it instead of compiling it: where the shell sets
    PYTHONDONTWRITEBYTECODE (this machine does), a source checkout never caches it, and every
    command line compiles the ~90 modules it imports again (about 0.08 s here)."""
    subprocess.run([python, "-m", "compileall", "-q", str(PACKAGE)], check=True,
                   stdout=subprocess.DEVNULL)


#: glibc tunables that keep freed memory for reuse (``--malloc recycle``): never trim the heap,
#: and serve blocks up to 32 MiB (the largest mmap threshold glibc takes) from it.
RECYCLE = "glibc.malloc.trim_threshold=17179869184:glibc.malloc.mmap_threshold=33554432"


#: glibc tunables that map every block of 1 MiB or more fresh and return it when freed
#: (``--malloc fresh``). glibc's own threshold moves as blocks are freed, and under ``RECYCLE``
#: whether a large block comes back with its pages touched depends on what else the process
#: allocated: a profiled mpemb step (bench/dist_steps.py) took fresh pages its unprofiled run
#: did not (likely the profiler's small allocations splitting the heap's large free chunks).
#: A fixed threshold makes large blocks alike in every process: fresh each time.
FRESH = "glibc.malloc.mmap_threshold=1048576"

MALLOC = {"recycle": RECYCLE, "fresh": FRESH}


def use_malloc(mode: str) -> str:
    """Every child process started from here on runs with glibc tunables ``MALLOC[mode]``
    ('default': as it is); what the children run with, for the report. (``recycle``: as
    jemalloc or tcmalloc behave, first touches of fresh pages no longer differing from process
    to process.) A process takes glibc's tunables only at start, so this one keeps its own."""
    if mode == "default":
        return "glibc defaults"
    os.environ["GLIBC_TUNABLES"] = ":".join(
        part for part in (os.environ.get("GLIBC_TUNABLES"), MALLOC[mode]) if part)
    return "GLIBC_TUNABLES=" + MALLOC[mode]

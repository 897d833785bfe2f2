"""Torch-free helpers for the benches that time whole processes: a core free before each one,
param_compute's bytecode compiled first.

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


def compile_bytecode(python: str = sys.executable) -> None:
    """Compile param_compute's bytecode, as ``pip install`` does for an installed package, so
    that the processes measured import it instead of compiling it: where the shell sets
    PYTHONDONTWRITEBYTECODE (this machine does), a source checkout never caches it, and every
    command line compiles the ~90 modules it imports again (about 0.08 s here)."""
    subprocess.run([python, "-m", "compileall", "-q", str(PACKAGE)], check=True,
                   stdout=subprocess.DEVNULL)

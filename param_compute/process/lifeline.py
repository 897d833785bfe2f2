"""Child processes never outlive the run that started them, even after ``kill -9`` of it.

Three layers, each enough on its own where it applies:

* ``die_with_parent()``: Linux's ``PR_SET_PDEATHSIG`` (through ``prctl`` in libc, via ctypes):
  the kernel sends the child SIGKILL when its parent dies. Called first thing in the ``--isolate``
  worker and in the Nsight profiler (``preexec`` of its ``Popen``).
* ``watch_parent(pid)``: a daemon thread that polls whether the run's process still exists and
  ends this process when it does not. For a process whose direct parent is not the run (the child
  a profiler launches), which gets the run's pid through ``PARENT_PID_ENV``.
* ``stale_directories()``: private temporary directories named with the pid of the run that made
  them; one whose run is gone (killed before it could clean up) is removed by the next run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import List, Optional

log = logging.getLogger("param_compute")

#: The environment variable naming the run's pid for processes it starts indirectly.
PARENT_PID_ENV = "PARAM_COMPUTE_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


#: Loaded once, here: ``die_with_parent`` also runs as a ``Popen`` preexec function, between
#: fork and exec, where nothing may be imported or loaded.
_PRCTL = _load_prctl()


def die_with_parent(signum: int = signal.SIGKILL, parent: Optional[int] = None) -> bool:
    """Ask the kernel to send ``signum`` to this process when its parent dies (Linux only).

    ``parent`` is the pid the parent had: a parent that died before the request took effect
    (this process was re-parented already) ends this process at once. Whether it is in place.
    """
    if _PRCTL is None or _PRCTL(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        return False
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signum)
    return True


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (one owned by another user counts as existing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch_parent(pid: Optional[int] = None, interval_s: float = 0.5) -> Optional[threading.Thread]:
    """End this process (exit status 137, like SIGKILL) soon after process ``pid`` is gone.

    ``pid`` defaults to ``PARENT_PID_ENV`` from the environment; without one, nothing is watched.
    """
    if pid is None:
        text = os.environ.get(PARENT_PID_ENV, "")
        pid = int(text) if text.isdigit() else None
    if pid is None or pid == os.getpid():
        return None
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(interval_s):
            if not alive(pid):
                os._exit(137)

    thread = threading.Thread(target=watch, name="param_compute-parent-watch", daemon=True)
    thread.start()
    return thread


def private_directory(prefix: str) -> Path:
    """A new private (0700) temporary directory whose name carries this process's pid."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}_"))


def stale_directories(prefix: str) -> List[Path]:
    """This user's temporary directories named ``<prefix><pid>_...`` whose process is gone."""
    stale = []
    try:
        entries = list(Path(tempfile.gettempdir()).glob(f"{prefix}*"))
    except OSError:
        return stale
    for entry in entries:
        pid_text = entry.name[len(prefix):].split("_", 1)[0]
        try:
            if (pid_text.isdigit() and not entry.is_symlink() and entry.is_dir()
                    and entry.stat().st_uid == os.getuid() and not alive(int(pid_text))):
                stale.append(entry)
        except OSError:
            continue
    return stale


def remove_stale_directories(prefix: str) -> int:
    """Remove what ``stale_directories`` finds; how many were removed."""
    removed = 0
    for directory in stale_directories(prefix):
        shutil.rmtree(directory, ignore_errors=True)
        removed += not directory.exists()
        log.info("removed %s, left by a run that was killed", directory)
    return removed

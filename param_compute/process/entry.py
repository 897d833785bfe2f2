"""A command's ``main`` run for ``python -m``: its exit status, and a reader that left in peace.

``python -m param_compute.workload_totals results.json | head`` closes the pipe after ten lines;
the next write raises ``BrokenPipeError``. That is the reader's choice, not an error: the
command stops quietly with 141 (128 + SIGPIPE, what a shell reports for a command the signal
ended), its standard output pointed at ``/dev/null`` so that the interpreter's final flush
does not complain again. Whatever the command wrote to files before stays written. rich's
``Console`` answers a closed pipe itself (standard output pointed at ``/dev/null``, then
``SystemExit(1)``: ``compare``'s exit status for a failed regression gate); that is the reader
gone too.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional, Tuple

#: The exit status of a command whose reader went away.
EXIT_READER_GONE = 141


def _identity(path_or_fd: object) -> Optional[Tuple[int, int]]:
    try:
        info = os.stat(path_or_fd) if isinstance(path_or_fd, str) else os.fstat(path_or_fd)
    except (OSError, TypeError):
        return None
    return info.st_dev, info.st_ino


def _stdout_fd() -> Optional[int]:
    try:
        return sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return None


def run(main: Callable[[], Optional[int]]) -> Optional[int]:
    """``main()``'s exit status; ``EXIT_READER_GONE`` when standard output's reader left."""
    fd = _stdout_fd()
    before = _identity(fd) if fd is not None else None
    try:
        status = main()
        sys.stdout.flush()  # a pipe closed after the last write fails here, not at exit
        return status
    except SystemExit:
        if before is None or before == _identity(os.devnull) \
                or _identity(fd) != _identity(os.devnull):
            raise
        return EXIT_READER_GONE  # rich met the closed pipe and put /dev/null in its place
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
        return EXIT_READER_GONE

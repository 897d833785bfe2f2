"""A command's ``main`` run for ``python -m``: its exit status, and a reader that left in peace.

``python -m param_compute.workload_totals results.json | head`` closes the pipe after ten lines;
the next write raises ``BrokenPipeError``. That is the reader's choice, not an error: the
command stops quietly with 141 (128 + SIGPIPE, what a shell reports for a command the signal
ended), its standard output pointed at ``/dev/null`` so that the interpreter's final flush
does not complain again. Whatever the command wrote to files before stays written.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional

#: The exit status of a command whose reader went away.
EXIT_READER_GONE = 141


def run(main: Callable[[], Optional[int]]) -> Optional[int]:
    """``main()``'s exit status; ``EXIT_READER_GONE`` when standard output's reader left."""
    try:
        status = main()
        sys.stdout.flush()  # a pipe closed after the last write fails here, not at exit
        return status
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
        return EXIT_READER_GONE

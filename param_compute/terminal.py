"""How wide a command's printed output may be, and the consoles it prints with.

Every command prints its results (tables, summaries) on standard output and its progress, log
lines and warnings on standard error. The width of both is ``COLUMNS`` when it is set to a
number, on a terminal or not; else the terminal's width; else (a file, a pipe, CI's log)
:data:`DEFAULT_WIDTH`. Torch-free; rich is imported only when a console is made.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional, TextIO

#: The width off a terminal when ``COLUMNS`` is not set.
DEFAULT_WIDTH = 120


def width(stream: Optional[TextIO] = None) -> int:
    """The width for ``stream`` (standard output by default): ``COLUMNS``, else the terminal's,
    else :data:`DEFAULT_WIDTH`."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stdout if stream is None else stream
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or DEFAULT_WIDTH
    except (AttributeError, OSError, ValueError):
        pass
    return DEFAULT_WIDTH


def console(stderr: bool = False, quiet: bool = False) -> Any:
    """A rich ``Console`` on standard output (results) or standard error (progress,
    warnings), as wide as :func:`width` says; ``quiet``: it prints nothing."""
    from rich.console import Console

    return Console(stderr=stderr, width=width(sys.stderr if stderr else sys.stdout),
                   quiet=quiet)


def fit(line: str, room: int) -> str:
    """``line`` cut to ``room`` characters, ``…`` marking the cut."""
    return line if len(line) <= room else line[:max(room - 1, 0)] + "…"

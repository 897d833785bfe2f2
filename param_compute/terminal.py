"""How wide a command's printed output may be, and the consoles it prints with.

Every command prints its results (tables, summaries) on standard output and its progress, log
lines and warnings on standard error. The width of both is ``COLUMNS`` when it is set to a
number, on a terminal or not; else the terminal's width; else (a file, a pipe, CI's log)
:data:`DEFAULT_WIDTH`. Torch-free; rich is imported only when a console is made.
"""

from __future__ import annotations

import os
import sys
import textwrap
from typing import Any, Container, List, Optional, Sequence, TextIO

from param_compute.plan.summary import cut

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


def add_quiet(parser: Any) -> None:
    """``-q``/``--quiet`` on a command that prints tables: nothing on standard output."""
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print no table: warnings and errors only (on standard error)")


def fit_lines(lines: Sequence[str], room: int, rows: Container[int] = ()) -> List[str]:
    """Plain text no wider than ``room``: the lines at the indexes ``rows`` (a table's) cut,
    the others (prose) wrapped, their continuation indented as they are; a word longer than
    ``room`` (a path) stays whole on a line of its own."""
    out: List[str] = []
    for index, line in enumerate(lines):
        if len(line) <= room:
            out.append(line)
        elif index in rows:
            out.append(cut(line, room))
        else:
            indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
            out.extend(textwrap.wrap(line, room, subsequent_indent=indent[:room // 2],
                                     break_on_hyphens=False, break_long_words=False) or [""])
    return out

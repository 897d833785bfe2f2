"""Human-readable numbers shared by the console summary, ``compare`` and ``report``."""

from __future__ import annotations

import stat
from typing import Any, Optional


def format_ms(value: Optional[float], missing: str = "-") -> str:
    """A time given in milliseconds, in the unit that reads best (ms or µs)."""
    if value is None:
        return missing
    if value >= 100:
        return f"{value:.1f} ms"
    if value >= 1:
        return f"{value:.3f} ms"
    return f"{value * 1000:.2f} µs"


def cell(value: Any):
    """Text from a results file as a rich table cell: shown as it is, never read as markup
    (``[/bold]`` in an op name was a traceback, ``[link=...]`` a hyperlink), control characters
    as the escapes that name them (a terminal would act on them)."""
    from rich.text import Text

    return Text(printable(value))


def printable(value: Any) -> str:
    """Text from a results file for a terminal: control characters as the escapes that name
    them (a terminal would act on them, a newline would forge a line)."""
    text = str(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return text


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is (``os.stat`` mode), for refusals: "a
    directory", "a FIFO", "a device", "a socket" or "not a regular file"."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"

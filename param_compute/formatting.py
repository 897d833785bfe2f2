"""Text for people: times and sizes in the unit that reads best, untrusted text made printable.

Shared by the console summary, ``compare``, ``report``, the spec's and the traces' problem
messages: :func:`printable` is the one escaping rule for text that comes from a file, a trace,
a spec or an exception (control characters and terminal escapes shown as the escapes that name
them, optionally shortened).
"""

from __future__ import annotations

from typing import Any, Optional


def format_ms(value: Optional[float], missing: str = "-") -> str:
    """A time given in milliseconds, in the unit that reads best (ms or µs); one that is no
    number (NaN, infinite) is ``missing``, and an absurd one from a hostile file (1e300 ms)
    is written with its exponent, never as three hundred digits."""
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return missing
    if value >= 1e9:
        return f"{value:.4g} ms"
    if value >= 100:
        return f"{value:.1f} ms"
    if value >= 1:
        return f"{value:.3f} ms"
    return f"{value * 1000:.2f} µs"


def format_bytes(count: int) -> str:
    """A size in bytes, in the binary unit that reads best (``2.5 GiB``, ``512 KiB``)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.4g} {unit}"
    return f"{count} bytes"


def format_size(nbytes: int) -> str:
    """A memory estimate for the guard's and a graph's refusals, up to TiB (``6.4 GiB``)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{nbytes} B"


def cell(value: Any):
    """Text from a results file as a rich table cell: shown as it is, never read as markup
    (``[/bold]`` in an op name was a traceback, ``[link=...]`` a hyperlink), control characters
    as the escapes that name them (a terminal would act on them)."""
    from rich.text import Text

    return Text(printable(value))


def printable(value: Any, limit: Optional[int] = None) -> str:
    """Text from a file, a trace, a spec or an exception, for a terminal or a message: every
    character that is not printable (control characters, the escape that starts a terminal
    sequence, bidirectional overrides, lone surrogates) as the escape that names it (``\\x1b``,
    ``\\n``, ``\\u202e``): a terminal would act on them, a newline would forge a line.
    ``limit``: at most that many characters of the text are shown, then ``...``."""
    text = str(value)
    cut = limit is not None and len(text) > limit
    if cut:
        text = text[:limit]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return text + "..." if cut else text

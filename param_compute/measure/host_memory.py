"""The process's resident memory (Linux ``/proc``): a window whose peak growth is one pass's.

``RssWindow.start()`` notes the resident set size and resets the kernel's peak-RSS mark (writing
``5`` to ``/proc/self/clear_refs``); ``peak_bytes()`` is then the peak (``VmHWM``) minus that
start: the memory a pass touched above what was resident when it began. Where the mark cannot
be reset, the growth of the resident set at the end; where ``/proc`` is absent, None. Reads are
bounded; nothing here allocates more than a few lines of text.
"""

from __future__ import annotations

import os
from typing import Optional

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
STATM = "/proc/self/statm"
STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"


def rss_bytes() -> Optional[int]:
    """The resident set size now, in bytes."""
    try:
        with open(STATM, "rb") as file:
            return int(file.read(256).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def peak_rss_bytes() -> Optional[int]:
    """The resident set's peak since the last reset (``VmHWM``), in bytes."""
    try:
        with open(STATUS, "rb") as file:
            for line in file.read(1 << 16).splitlines():
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset the peak-RSS mark to the current RSS; False where the kernel does not allow it."""
    try:
        with open(CLEAR_REFS, "w") as file:
            file.write("5")
        return True
    except OSError:
        return False


class RssWindow:
    """Peak resident-memory growth between ``start()`` and ``peak_bytes()``."""

    def __init__(self) -> None:
        self.base: Optional[int] = None
        self.peak_resets = False

    def start(self) -> None:
        self.peak_resets = reset_peak_rss()
        self.base = rss_bytes()

    def peak_bytes(self) -> Optional[int]:
        if self.base is None:
            return None
        now = peak_rss_bytes() if self.peak_resets else rss_bytes()
        return None if now is None else max(0, now - self.base)

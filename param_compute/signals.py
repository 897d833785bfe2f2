"""Ctrl-C and SIGTERM: stop between lines, never in the middle of one.

The command line installs a ``SignalGuard``. A signal arriving outside a critical section raises
``Interrupted`` at once (the engine then writes the summary and a finish record marked
interrupted); one arriving while a results line is being written is held until the line is
complete. Exit status is 128 + the signal number (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator, Optional


class Interrupted(BaseException):
    """The run was stopped by a signal (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def exit_description(status: int) -> str:
    """A child process's exit status in words: ``signal 6 (SIGABRT)`` or ``exit status 3``."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = "unknown signal"
        return f"signal {-status} ({name})"
    return f"exit status {status}"


class SignalGuard:
    def __init__(self) -> None:
        self._depth = 0
        self._pending: Optional[int] = None

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame) -> None:
        if self._depth:
            self._pending = signum
        else:
            raise Interrupted(signum)

    @contextmanager
    def critical(self) -> Iterator[None]:
        """Hold signals while the body runs (a results line being written)."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending is not None:
                signum, self._pending = self._pending, None
                raise Interrupted(signum)


#: The process-wide guard; its critical sections cost nothing when it is not installed.
GUARD = SignalGuard()

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


class _CriticalSection:
    """``SignalGuard.critical()``: a reusable context manager object rather than a generator,
    because it wraps every results line (a generator-based one costs a few µs a line, a tenth of
    a 100,000-run dry run). Sections nest; the held signal is raised when the outermost ends,
    the body's own exception, if any, then chained to it."""

    __slots__ = ("guard",)

    def __init__(self, guard: "SignalGuard"):
        self.guard = guard

    def __enter__(self) -> None:
        self.guard._depth += 1

    def __exit__(self, *exc_info) -> None:
        self.guard._leave()


class SignalGuard:
    """Only the first signal stops the run: once it is raised (``stopping``), later signals are
    counted and dropped, so a second Ctrl-C can't cut the summary and finish line short."""

    def __init__(self) -> None:
        self._depth = 0
        self._pending: Optional[int] = None
        self.stopping = False
        self.dropped = 0
        self._section = _CriticalSection(self)

    def install(self) -> None:
        self._depth, self._pending, self.stopping, self.dropped = 0, None, False, 0
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _raise(self, signum: int) -> None:
        self.stopping = True
        raise Interrupted(signum)

    def _handle(self, signum: int, frame) -> None:
        if self.stopping:
            self.dropped += 1
        elif self._depth:
            self._pending = signum
        else:
            self._raise(signum)

    def critical(self) -> "_CriticalSection":
        """Hold signals while the body runs (a results line being written)."""
        return self._section

    def _leave(self) -> None:
        self._depth -= 1
        if not self._depth and self._pending is not None:
            signum, self._pending = self._pending, None
            self._raise(signum)

    def raise_after_line(self, signum: int) -> None:
        """A signal caught earlier and held while its work was saved: raised as soon as the
        next critical section (a results line) completes, else reported by ``held``."""
        self._pending = signum

    @contextmanager
    def held(self) -> Iterator["HeldSignals"]:
        """Hold signals while the body runs and never raise them: the body (writing the finish
        line) must complete however many signals arrive; the last one held is reported in the
        yielded ``HeldSignals.signum``."""
        holder = HeldSignals()
        self._depth += 1
        try:
            yield holder
        finally:
            self._depth -= 1
            if not self._depth and self._pending is not None:
                holder.signum, self._pending = self._pending, None
                self.stopping = True


class HeldSignals:
    """What ``SignalGuard.held`` kept back: the signal number, or None."""

    signum: Optional[int] = None


#: The process-wide guard; its critical sections cost nothing when it is not installed.
GUARD = SignalGuard()

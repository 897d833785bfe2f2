"""A config that crashed the run (without ``--isolate``) is skipped and recorded on ``--resume``.

Without isolation a segfaulting config takes the whole process down, and resuming would run it
first again and crash again, forever. ``CrashMarker`` (a record sink with the engine's
``before_execute`` hook) keeps a small file beside the results, ``<results>.running``, holding
the key of the run being executed, rewritten before each run; ``faulthandler`` writes into the
same file when the process dies of a fatal signal (SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE).
The file is removed when the run finishes, interrupted or not.

On ``--resume``, ``previous_crash`` reads it: a run that was executing when the process died of
a fatal signal, and has no record, becomes an error record ("crashed the run ...; not run again")
instead of running again. A run killed from outside (``kill -9``, the OOM killer) leaves no
fatal-signal text: it simply runs again.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Optional, Tuple

from param_compute.files import open_write_fd, read_bounded
from param_compute.plan.runplan import PlannedRun
from param_compute.results.sinks.base import RecordSink

log = logging.getLogger("param_compute")

SUFFIX = ".running"
_MAX_READ = 1 << 20
_FATAL = re.compile(r"Fatal Python error: ([^\n]{1,200})")


def marker_path(results: Path) -> Path:
    return Path(results).with_name(Path(results).name + SUFFIX)


def previous_crash(results: Path) -> Optional[Tuple[str, str]]:
    """``(run key, what killed it)`` when the last run on ``results`` died of a fatal signal
    while executing a run; None otherwise (no marker, a clean end, a kill from outside)."""
    path = marker_path(results)
    try:  # a regular file, no link, bounded
        data = read_bounded(path, _MAX_READ, follow_links=False).decode("utf-8", "replace")
    except OSError:
        return None
    first, _, rest = data.partition("\n")
    try:
        key = json.loads(first).get("run")
    except (ValueError, AttributeError):
        return None
    fatal = _FATAL.search(rest)
    if not isinstance(key, str) or fatal is None:
        return None
    return key, fatal.group(1).strip()


def crash_message(reason: str) -> str:
    return (f"crashed the run ({reason}) when it last ran without --isolate; not run again: "
            "run it with --isolate to measure it")


class CrashMarker(RecordSink):
    """The sink that keeps ``<results>.running`` (see the module's doc)."""

    def __init__(self, results: Path):
        self.results = Path(results)
        self.path = marker_path(results)
        self.fd: Optional[int] = None
        self.had_faulthandler = False

    def start(self, total: Optional[int]) -> None:
        if not self.results.is_file():  # results to /dev/null: nothing to resume, no marker
            return
        try:  # never through a link, nor into a FIFO planted there
            self.fd = open_write_fd(self.path, truncate=True)
        except OSError as exc:  # the results' own checks decide; this is only a help
            log.warning("cannot keep %s (%s): a crashing config would be run again on resume",
                        self.path, exc.strerror or exc)
            return
        self.had_faulthandler = faulthandler.is_enabled()
        faulthandler.enable(file=self.fd, all_threads=False)

    def before_execute(self, run: PlannedRun) -> None:
        if self.fd is None:
            return
        line = json.dumps({"run": run.key, "pid": os.getpid()}) + "\n"
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.write(self.fd, line.encode())

    def run_done(self, run: PlannedRun, record) -> None:
        pass

    def finish(self, summary) -> None:
        if self.fd is None:
            return
        faulthandler.disable()
        if self.had_faulthandler:
            try:
                faulthandler.enable(file=sys.__stderr__)
            except (ValueError, AttributeError, OSError):
                pass
        os.close(self.fd)
        self.fd = None
        try:
            self.path.unlink()
        except OSError:
            pass

"""Record sinks: the JSON Lines results file and an in-memory collector for library use."""

from __future__ import annotations

import json
import math
import signal
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, TextIO

from .engine import RunSummary
from .expansion import PlannedRun
from .records import STATUS_DRY_RUN, RunRecord
from .resume import ResumeState
from .signals import GUARD


def _plain(value: Any) -> Any:
    """Last-resort conversion so a header or config never holds a Python repr."""
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


#: One encoder for every line (``json.dumps`` with options builds a new one per call). Records
#: are trees built from JSON values, so the circular-reference bookkeeping is skipped; a cycle
#: would still fail, with a RecursionError.
_ENCODER = json.JSONEncoder(separators=(", ", ": "), default=_plain, check_circular=False)


def _json_line(value: Dict[str, Any]) -> str:
    return _ENCODER.encode(value) + "\n"


def now_iso() -> str:
    return datetime.now().isoformat(timespec="seconds")


class JsonlResultWriter:
    """Writes PARAM-layout JSON Lines, each line with a single ``write`` call.

    The header, the last line and every measured or failed run's record are flushed at once, so
    a crash in a later run loses nothing measured. Dry-run records cost nothing to plan again and
    come by the hundred thousand, where a flush per line (a system call each) would add some 40%
    to the cost of writing them: they are left to the stream's buffer, which goes to the file
    whenever it fills (whole lines, since each line is one write) and at the end. Python closes
    the file, flushing it, on any exit but a hard kill.
    """

    def __init__(self, path: Path, header: Dict[str, Any], append: bool = False,
                 finish_extra: Optional[Dict[str, Any]] = None,
                 resume: Optional[ResumeState] = None):
        self.path = Path(path)
        self.header = header
        self.append = append
        # Further keys of the last line (the trace files written beside the results...).
        self.finish_extra = dict(finish_extra or {})
        self.resume = resume
        self.stream: Optional[TextIO] = None

    def _write(self, value: Dict[str, Any], flush: bool = True) -> None:
        line = _json_line(value)
        with GUARD.critical():  # a signal waits until the line is whole
            self.stream.write(line)
            if flush:
                self.stream.flush()

    def start(self, total: Optional[int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.resume is not None and self.resume.header is not None:
            self.resume.truncate_torn_tail()
            self.stream = open(self.path, "a", encoding="utf-8")
            self._write({"resume_time": now_iso(), "completed_runs": len(self.resume.completed),
                         "dropped_torn_line": self.resume.torn_line,
                         "resume_options": self.header["run_options"]})
            return
        self.stream = open(self.path, "a" if self.append else "w", encoding="utf-8")
        self._write(self.header)

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        if record is not None:
            self._write(record.to_json(), flush=record.status != STATUS_DRY_RUN)

    def write_line(self, value: Dict[str, Any]) -> None:
        """One extra line between run records (a profiler batch record...), whole and flushed."""
        self._write(value)

    def finish(self, summary: RunSummary) -> None:
        last = {"finish_time": now_iso(), "runs_ok": summary.ok,
                "runs_failed": len(summary.failed), "runs_dry": summary.dry_run}
        if summary.interrupted:
            last["interrupted"] = signal.Signals(summary.interrupted).name
        if summary.stopped_early:
            last["stopped_early"] = "fail-fast"
        last.update(self.finish_extra)
        self._write(last)
        self.stream.close()


class RecordCollector:
    """Keeps the JSON form of every record in memory (library use and tests)."""

    def __init__(self) -> None:
        self.records: List[Dict[str, Any]] = []
        self.summary: Optional[RunSummary] = None

    def start(self, total: Optional[int]) -> None:
        self.records.clear()

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        if record is not None:
            self.records.append(record.to_json())

    def finish(self, summary: RunSummary) -> None:
        self.summary = summary

"""Record sinks: the JSON Lines results file (through ``results.file``) and an in-memory list."""

from __future__ import annotations

import signal
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional

from param_compute.errors import OptionsError
from param_compute.plan.runplan import PlannedRun
from param_compute.results.file import SYNC_ENDS, ResultsFileError, ResultsWriter
from param_compute.results.records import STATUS_DRY_RUN, RunRecord
from param_compute.results.resume import ResumeState
from param_compute.results.sinks.base import RecordSink, RunSummary
from param_compute.process.signals import GUARD


def now_iso() -> str:
    return datetime.now().isoformat(timespec="seconds")


class JsonlResultWriter(RecordSink):
    """The results file of a run: header (or resume marker), a line per run, the finish line.

    Measured and failed runs' lines are flushed at once, so a crash in a later run loses nothing
    measured; the header and the finish line also reach the disk (``sync``, see
    ``results.file``). Dry-run records cost nothing to plan again and come by the hundred
    thousand, where a flush per line (a system call each) would add some 40% to the cost of
    writing them: they are left to the stream's buffer, which only holds whole lines. Every
    line is written inside the signal guard, so a signal never tears one.

    The finish line holds the run's counts, ``finish_extra`` (the trace files written beside
    the results...) and what other sinks declared in ``summary.finish_fields``.
    """

    def __init__(self, path: Path, header: Dict[str, Any], append: bool = False,
                 finish_extra: Optional[Dict[str, Any]] = None,
                 resume: Optional[ResumeState] = None, sync: str = SYNC_ENDS):
        self.path = Path(path)
        self.header = header
        self.append = append
        self.finish_extra = dict(finish_extra or {})
        self.resume = resume
        self.sync = sync
        self.file: Optional[ResultsWriter] = None

    def start(self, total: Optional[int]) -> None:
        try:
            if self.resume is not None and self.resume.header is not None:
                self.file, _ = ResultsWriter.resume(self.path, self.resume.marker(
                    now_iso(), self.header["run_options"]), self.sync, GUARD.critical)
            else:
                self.file = ResultsWriter.create(self.path, self.header, self.append, self.sync,
                                                 GUARD.critical)
        except ResultsFileError as exc:
            raise OptionsError(str(exc)) from None

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        if record is not None:
            self.file.write(record.to_json(), flush=record.status != STATUS_DRY_RUN)

    def add_line(self, line: Dict[str, Any]) -> None:
        """One extra line between run lines (a profiler batch line...), whole and flushed."""
        self.file.write(line)

    write_line = add_line  # what sinks of the bare interface call

    def finish(self, summary: RunSummary) -> None:
        last = {"finish_time": now_iso(), "runs_ok": summary.ok,
                "runs_failed": len(summary.failed), "runs_dry": summary.dry_run}
        if summary.interrupted:
            last["interrupted"] = signal.Signals(summary.interrupted).name
        if summary.stopped_early:
            last["stopped_early"] = "fail-fast"
        last.update(self.finish_extra)
        last.update(summary.finish_fields)
        self.file.finish(last)


class RecordCollector(RecordSink):
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

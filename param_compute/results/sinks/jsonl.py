"""Record sinks: the JSON Lines results file (through ``results.file``) and an in-memory list."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional

from param_compute.errors import OptionsError
from param_compute.plan.runplan import PlannedRun
from param_compute.results.file import (SYNC_ENDS, ResultsFileError, ResultsWriter, encode_text,
                                        encode_value)
from param_compute.results.records import KIND_RUN, STATUS_DRY_RUN, RunRecord
from param_compute.results.resume import ResumeState
from param_compute.results.sinks.base import RecordSink, RunSummary
from param_compute.process.signals import GUARD


def now_iso() -> str:
    return datetime.now().isoformat(timespec="seconds")


@dataclass
class FinishLine:
    """The results file's last line: when the run ended, its counts, why it stopped early, and
    what the run (trace files) and the sinks (``finish_fields``) added."""

    finish_time: str
    runs_ok: int
    runs_failed: int
    runs_dry: int
    interrupted: Optional[str] = None  # the signal's name
    stopped_early: Optional[str] = None  # "fail-fast"
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, summary: RunSummary, extra: Dict[str, Any]) -> "FinishLine":
        return cls(now_iso(), summary.ok, len(summary.failed), summary.dry_run,
                   signal.Signals(summary.interrupted).name if summary.interrupted else None,
                   "fail-fast" if summary.stopped_early else None,
                   {**extra, **summary.finish_fields})

    def to_json(self) -> Dict[str, Any]:
        line: Dict[str, Any] = {"finish_time": self.finish_time, "runs_ok": self.runs_ok,
                                "runs_failed": self.runs_failed, "runs_dry": self.runs_dry}
        if self.interrupted:
            line["interrupted"] = self.interrupted
        if self.stopped_early:
            line["stopped_early"] = self.stopped_early
        line.update(self.extra)
        return line


class PlannedLines:
    """The results line of a planned run (a dry run's record), made from parts.

    A dry run writes its records by the hundred thousand, and most of each line is the same
    text: its operator's name, the status, the empty metric. Here only the id and the config
    are encoded per line, the rest once per operator, which is the text that
    ``encode_line(record.to_json())`` makes, to the byte (tests hold it to that), at about two
    thirds of the cost. A record whose JSON form has more than those five keys (a captured
    config's ``count`` or ``original_us``; anything measured, failed or verified) gets None:
    the caller encodes it whole.
    """

    _MIDDLE = f', "status": {encode_text(STATUS_DRY_RUN)}, "metric": {{}}, "config": '

    def __init__(self) -> None:
        self._openings: Dict[str, str] = {}  # operator name -> '{"op_name": "...", "id": '

    def __call__(self, record: RunRecord) -> Optional[str]:
        op_name, run_id, config = record.op_name, record.id, record.config
        if record.status != STATUS_DRY_RUN or record.passes or record.error is not None \
                or record.verify is not None or record.step is not None \
                or type(op_name) is not str or type(run_id) is not str:
            return None
        config_input = config.get("input") if isinstance(config, dict) else None
        if isinstance(config_input, dict) and ("count" in config_input
                                               or "original_us" in config_input):
            return None
        opening = self._openings.get(op_name)
        if opening is None:
            opening = self._openings[op_name] = (f'{{"kind": {encode_text(KIND_RUN)}, '
                                                 f'"op_name": {encode_text(op_name)}, "id": ')
        return f"{opening}{encode_text(run_id)}{self._MIDDLE}{encode_value(config)}}}\n"


class JsonlResultWriter(RecordSink):
    """The results file of a run: header (or resume marker), a line per run, the finish line.

    Measured and failed runs' lines are flushed at once, so a crash in a later run loses nothing
    measured; the header and the finish line also reach the disk (``sync``, see
    ``results.file``). Dry-run records cost nothing to plan again and come by the hundred
    thousand, where a flush per line (a system call each) would add some 40% to the cost of
    writing them: they are gathered and written a batch of whole lines at a time
    (``ResultsWriter``). Every line is written inside the signal guard, so a signal never tears
    one.

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
        self._planned = PlannedLines()

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
        if record is None:
            return
        line = self._planned(record)
        if line is not None:
            self.file.write_line(line, flush=False)
        else:
            self.file.write(record.to_json(), flush=record.status != STATUS_DRY_RUN)

    def add_line(self, line: Dict[str, Any]) -> None:
        """One extra line between run lines (a profiler batch line...), whole and flushed."""
        self.file.write(line)

    write_line = add_line  # what sinks of the bare interface call

    def finish(self, summary: RunSummary) -> None:
        self.file.finish(FinishLine.of(summary, self.finish_extra).to_json())


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

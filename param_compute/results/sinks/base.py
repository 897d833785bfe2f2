"""What every record sink implements, and the run summary the sinks finish with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol

from param_compute.plan.runplan import PlannedRun
from param_compute.results.records import RunRecord


@dataclass
class RunSummary:
    ok: int = 0
    failed: List[RunRecord] = field(default_factory=list)
    dry_run: int = 0
    skipped: int = 0
    unmatched_ids: List[str] = field(default_factory=list)
    stopped_early: bool = False  # --fail-fast
    interrupted: Optional[int] = None  # the signal that stopped the run
    #: What sinks declared through their hooks (see ``RecordSink``): keys for the results
    #: file's finish line, lines for the printed summary.
    finish_fields: Dict[str, Any] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        if self.interrupted:
            return 128 + int(self.interrupted)
        return 1 if self.failed else 0


class RecordSink(Protocol):
    """Receives the records of a run. Optional hooks, called where a sink defines them:

    * ``before_run(run)``: before each planned run is executed or skipped (a sink that writes
      lines of its own between runs, such as the Nsight batch profiler, writes them here);
    * ``before_execute(run)``: just before a run is measured (not for skipped or dry runs);
    * ``end_runs(summary)``: after the last run, before any sink's ``finish`` (last work; a
      signal here marks the summary interrupted);
    * ``finish_fields(summary) -> dict``: keys this sink adds to the finish line;
    * ``summary_lines(summary) -> list of str``: lines this sink adds to the printed summary.

    Hooks make sinks independent of their order in the sink list.
    """

    def start(self, total: Optional[int]) -> None: ...

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None: ...

    def finish(self, summary: RunSummary) -> None: ...

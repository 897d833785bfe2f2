"""What every record sink implements, and the run summary the sinks finish with.

``RecordSink`` declares every hook the engine calls, each with a default that does nothing, so
the engine calls them all on every sink and never asks what a sink has (pluggy's way: hooks are
declared once, results come back as values). A sink written against the bare
``start``/``run_done``/``finish`` interface (a library user's) is wrapped by :func:`as_sink`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

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
    #: Why the run ended before its runs were done (an isolated worker that could not start).
    aborted: Optional[str] = None
    #: What sinks declared through their hooks (see ``RecordSink``): keys for the results
    #: file's finish line, lines for the printed summary.
    finish_fields: Dict[str, Any] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        if self.interrupted:
            return 128 + int(self.interrupted)
        return 1 if self.failed or self.aborted else 0


class RecordSink:
    """Receives the records of a run. The engine calls, in this order:

    * ``start(total)`` once;
    * per planned run: ``before_run(run)`` (executed or skipped), then every sink's
      ``pending_lines()``, ``before_execute(run)`` (just before it is measured; not for skipped
      or dry runs), ``run_done(run, record)`` (record None for a skipped run);
    * ``end_runs(summary)`` after the last run (last work; a signal here marks the summary
      interrupted), then ``pending_lines()`` again;
    * ``finish_fields(summary) -> dict`` (keys for the finish line) and
      ``summary_lines(summary) -> list`` (lines for the printed summary);
    * ``finish(summary)`` once, whatever happened;
    * ``final_status(status) -> status``: the run's exit status, as this sink sees it.

    ``pending_lines()`` returns lines a sink made for the results file (a profiler's batch
    lines); the engine hands each to every sink's ``add_line``, so no sink writes through
    another. Hooks make sinks independent of their order in the sink list.
    """

    def start(self, total: Optional[int]) -> None:
        pass

    def before_run(self, run: PlannedRun) -> None:
        pass

    def before_execute(self, run: PlannedRun) -> None:
        pass

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        pass

    def pending_lines(self) -> Sequence[Dict[str, Any]]:
        return ()

    def add_line(self, line: Dict[str, Any]) -> None:
        pass

    def end_runs(self, summary: RunSummary) -> None:
        pass

    def finish_fields(self, summary: RunSummary) -> Dict[str, Any]:
        return {}

    def summary_lines(self, summary: RunSummary) -> List[str]:
        return []

    def finish(self, summary: RunSummary) -> None:
        pass

    def final_status(self, status: int) -> int:
        return status


class _Wrapped(RecordSink):
    """A sink of the bare interface (``start``/``run_done``/``finish``, any of the other hooks
    where it defines them) behind the declared one."""

    def __init__(self, sink: Any):
        self.sink = sink
        for name in ("before_run", "before_execute", "end_runs", "finish_fields",
                     "summary_lines", "pending_lines", "add_line", "final_status"):
            method = getattr(sink, name, None)
            if callable(method):
                setattr(self, name, method)

    def start(self, total: Optional[int]) -> None:
        self.sink.start(total)

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        self.sink.run_done(run, record)

    def finish(self, summary: RunSummary) -> None:
        self.sink.finish(summary)


class Hooks:
    """Each hook's implementations among ``sinks``, in sink order: the bound methods of the
    sinks that override the declared no-op (a hook nobody implements costs nothing per run)."""

    NAMES = ("start", "before_run", "before_execute", "run_done", "pending_lines", "add_line",
             "end_runs", "finish_fields", "summary_lines", "finish", "final_status")

    def __init__(self, sinks: Sequence[RecordSink]):
        for name in self.NAMES:
            declared = getattr(RecordSink, name)
            setattr(self, name, [method for method in (getattr(sink, name) for sink in sinks)
                                 if getattr(method, "__func__", method) is not declared])


def as_sink(sink: Any) -> RecordSink:
    """``sink`` itself where it is a ``RecordSink``, else wrapped."""
    return sink if isinstance(sink, RecordSink) else _Wrapped(sink)

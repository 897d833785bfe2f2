"""The engine: run plan -> (executor: built operators, data, timed passes) -> records -> sinks.

This module is torch-free: a dry run plans and writes records without importing torch. The
measuring side lives in ``executor``.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Optional, Protocol, Sequence

from .expansion import PlannedRun, count_runs, plan_runs
from .options import RunOptions
from .records import STATUS_DRY_RUN, STATUS_ERROR, STATUS_OK, RunRecord
from .signals import Interrupted
from .validation import BenchmarkSpec

log = logging.getLogger("param_compute")


@dataclass
class RunSummary:
    ok: int = 0
    failed: List[RunRecord] = field(default_factory=list)
    dry_run: int = 0
    skipped: int = 0
    unmatched_ids: List[str] = field(default_factory=list)
    stopped_early: bool = False  # --fail-fast
    interrupted: Optional[int] = None  # the signal that stopped the run

    @property
    def exit_status(self) -> int:
        if self.interrupted:
            return 128 + int(self.interrupted)
        return 1 if self.failed else 0


class RecordSink(Protocol):
    def start(self, total: Optional[int]) -> None: ...

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None: ...

    def finish(self, summary: RunSummary) -> None: ...


class RunSelector:
    """``--resume-id`` (runs before it are skipped; it runs) and ``--stop-id`` (it and all after
    are skipped), matched against ``op_name|id``."""

    def __init__(self, resume_id: Optional[str], stop_id: Optional[str]):
        self.resume_id = resume_id
        self.stop_id = stop_id
        self.resumed = resume_id is None
        self.stopped = False

    def wants(self, run: PlannedRun) -> bool:
        if self.resume_id is None and self.stop_id is None:
            return True
        key = run.key
        if self.stop_id is not None and key == self.stop_id:
            self.stopped = True
        if self.stopped:
            return False
        if not self.resumed and key == self.resume_id:
            self.resumed = True
        return self.resumed

    def unmatched(self) -> List[str]:
        out = []
        if not self.resumed:
            out.append(f"--resume-id {self.resume_id!r} matched no run, so nothing ran")
        if self.stop_id is not None and not self.stopped:
            out.append(f"--stop-id {self.stop_id!r} matched no run")
        return out


class Engine:
    """Runs a validated spec with given options, streaming records to the sinks."""

    def __init__(self, spec: BenchmarkSpec, options: RunOptions, registries,
                 factories: Optional[Callable[[str], Callable]] = None,
                 sinks: Iterable[RecordSink] = (),
                 run_filters: Sequence[Callable[[PlannedRun], bool]] = ()):
        """``run_filters`` further select runs (a shard's slice, runs not yet done when
        resuming); a run every filter accepts and ``--resume-id``/``--stop-id`` select runs."""
        self.spec = spec
        self.options = options
        self.registries = registries
        self.factories = factories
        self.sinks = list(sinks)
        self.run_filters = list(run_filters)

    def plan(self) -> Iterable[PlannedRun]:
        return plan_runs(self.spec, self.registries.config_iterators, self.options.device)

    def total(self) -> Optional[int]:
        return count_runs(self.spec, self.registries.config_iterators)

    def _executor(self):
        if self.options.dry_run:
            return None
        if self.options.isolate:
            from .isolation import IsolatedExecutor

            return IsolatedExecutor(self)
        from .executor import Executor  # the torch side; a dry run never imports it

        return Executor(self)

    def run(self) -> RunSummary:
        """Run every selected run; a signal ends the loop between runs, not the bookkeeping."""
        summary = RunSummary()
        selector = RunSelector(self.options.resume_id, self.options.stop_id)
        for sink in self.sinks:
            sink.start(self.total())
        executor = None
        try:
            executor = self._executor()
            for run in self.plan():
                if not selector.wants(run) or not all(f(run) for f in self.run_filters):
                    summary.skipped += 1
                    self._emit(run, None)
                    if selector.stopped:
                        break
                    continue
                if executor is None:
                    record = RunRecord(run.op_name, run.id, run.config(), STATUS_DRY_RUN)
                    summary.dry_run += 1
                else:
                    record = executor.execute(run)
                    if record.status == STATUS_OK:
                        summary.ok += 1
                    else:
                        summary.failed.append(record)
                self._emit(run, record)
                if self.options.fail_fast and record.status == STATUS_ERROR:
                    summary.stopped_early = True
                    log.warning("stopping at the first failure (--fail-fast)")
                    break
        except (KeyboardInterrupt, Interrupted) as stop:
            summary.interrupted = getattr(stop, "signum", signal.SIGINT)
            log.warning("interrupted by %s: writing the summary", signal.Signals(
                summary.interrupted).name)
        finally:
            if executor is not None:
                executor.close()
        summary.unmatched_ids = [] if summary.interrupted else selector.unmatched()
        for message in summary.unmatched_ids:
            log.warning("%s", message)
        for sink in self.sinks:
            sink.finish(summary)
        return summary

    def _emit(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        for sink in self.sinks:
            sink.run_done(run, record)



"""The engine: run plan -> (executor: built operators, data, timed passes) -> records -> sinks.

This module imports no torch; the measuring side lives in ``executor``, which a dry run never
loads. (A dry run's toolchain still imports torch: the built-in workloads and operator-name
resolution need it to know what ``torch.add`` is.)
"""

from __future__ import annotations

import logging
import signal
from typing import Any, Dict, Iterable, List, Optional, Sequence

from param_compute.operators.unsafe import custom_namespace, unsafe_reason
from param_compute.plan.runplan import PlannedRun, count_runs, plan_runs
from param_compute.plan.selection import Selection
from param_compute.runtime.options import RunOptions
from param_compute.results.records import (STATUS_DRY_RUN, STATUS_ERROR, STATUS_OK, RunError,
                                           RunRecord)
from param_compute.results.sinks.base import Hooks, RecordSink, RunSummary, as_sink
from param_compute.runtime.child import ChildSetupError
from param_compute.errors import JobBroken
from param_compute.process.signals import GUARD, Interrupted
from param_compute.spec.model import BenchmarkSpec

log = logging.getLogger("param_compute")


class Engine:
    """Runs a validated spec with given options, streaming records to the sinks."""

    def __init__(self, spec: BenchmarkSpec, options: RunOptions, toolchain,
                 sinks: Iterable[RecordSink] = (), selection: Optional[Selection] = None,
                 refused: Optional[Dict[str, str]] = None, journal: Optional[Any] = None,
                 extra_runs: Sequence[PlannedRun] = (), job: Optional[Any] = None):
        """``toolchain`` (``runtime.toolchain.Toolchain``) gives the config iterators and the
        executor's context; ``selection`` (``plan.selection``) says which runs are measured
        (default: the options' ``--resume-id``/``--stop-id`` window, every run in it);
        ``refused``: runs not executed but recorded as errors, by key -> message (a config
        that crashed the previous attempt: ``runtime.crash_marker``); ``journal``: where
        ``--repetitions`` keeps each measurement (``runtime.repetition_journal``);
        ``extra_runs``: runs planned after the spec's own (the step replay's:
        ``runtime.step_run``); ``job``: a job's plan for this rank (``plan.job.JobPlan``:
        which runs, with the rank's own inputs, in the job's order)."""
        self.spec = spec
        self.options = options
        self.iterators = toolchain.registries.config_iterators
        self.toolchain = toolchain
        self.sinks = [as_sink(sink) for sink in sinks]
        self.hooks = Hooks(self.sinks)
        self.selection = selection if selection is not None else Selection(
            options.resume_id, options.stop_id)
        self._isolated = None  # the worker for runs that must be isolated (``_execute``)
        self.refused: Dict[str, str] = dict(refused or {})
        self.journal = journal
        self._isolated_ops: set = set()  # custom-namespace operators already said isolated
        self.extra_runs = tuple(extra_runs)
        self.job = job

    def plan(self) -> Iterable[PlannedRun]:
        """The spec's runs in order, then the extra runs (the step replay); a job's rank: its
        runs in the job's order (``plan.job``)."""
        runs = plan_runs(self.spec, self.iterators, self.options.device)
        if self.job is not None:
            yield from self.job.order(runs, self.extra_runs)
            return
        yield from runs
        yield from self.extra_runs

    def total(self) -> Optional[int]:
        if self.job is not None:
            return sum(1 for _ in self.plan())
        counted = count_runs(self.spec, self.iterators)
        return None if counted is None else counted + len(self.extra_runs)

    def _executor(self):
        if self.options.dry_run:
            return None
        context = self.toolchain.context(self.spec, self.options)
        if self.job is not None:  # the executor joins the job (``runtime.job``)
            import dataclasses

            context = dataclasses.replace(context, job=self.job)
        if self.options.repetitions > 1:  # each repetition in a fresh worker process
            from param_compute.runtime.isolation import IsolatedExecutor
            from param_compute.runtime.repetitions import RepeatedExecutor

            from param_compute.measure.canary import Canary

            return RepeatedExecutor(lambda: IsolatedExecutor(context), self._selected(),
                                    self.options.repetitions, self.options.seed,
                                    Canary() if self.options.canary else None,
                                    self.options.keep_samples, self.journal)
        if self.options.isolate:
            from param_compute.runtime.isolation import IsolatedExecutor

            return IsolatedExecutor(context)
        from param_compute.runtime.executor import Executor  # the torch side

        return Executor(context)

    def _selected(self) -> List[PlannedRun]:
        """The runs ``run`` will measure, in plan order (``--repetitions`` measures them all
        before the first record is emitted)."""
        selection = self.selection.restart()
        return [run for run in self.plan() if selection.wants(run)]

    def run(self) -> RunSummary:
        """Run every selected run; a signal ends the loop between runs, not the bookkeeping."""
        summary = RunSummary()
        selector = self.selection.restart()
        total = self.total() if self.hooks.start else None  # counted once, for every sink
        for start in self.hooks.start:
            start(total)
        executor = None
        try:
            executor = self._executor()
            self._loop(executor, selector, summary)
        except (KeyboardInterrupt, Interrupted) as stop:
            summary.interrupted = getattr(stop, "signum", signal.SIGINT)
            log.warning("interrupted by %s: writing the summary", signal.Signals(
                summary.interrupted).name)
        except ChildSetupError as exc:  # the same for every run: said once, the run ends
            summary.aborted = str(exc)
            summary.finish_fields["aborted"] = summary.aborted
            log.error("%s; no further run is tried", exc)
        except JobBroken as exc:  # a job's rank gone or hung: said once, every rank ends
            summary.aborted = str(exc)
            summary.finish_fields["aborted"] = summary.aborted
            log.error("%s; the job ends here, every record measured is kept", exc)
        finally:
            self._pass_lines()
            if executor is not None:
                executor.close()
            if self._isolated is not None:
                self._isolated.close()
                self._isolated = None
        summary.unmatched_ids = [] if summary.interrupted else selector.unmatched()
        for message in summary.unmatched_ids:
            log.warning("%s", message)
        self._end_runs(summary)
        # However many signals arrive now, every sink finishes (one finish line, always).
        with GUARD.held() as held:
            for finish in self.hooks.finish:
                finish(summary)
        if held.signum is not None and not summary.interrupted:
            summary.interrupted = held.signum
        return summary

    def _loop(self, executor, selector: Selection, summary: RunSummary) -> None:
        for run in self.plan():
            for before_run in self.hooks.before_run:
                before_run(run)
            if self.hooks.pending_lines:
                self._pass_lines()
            if not selector.wants(run):
                summary.skipped += 1
                self._emit(run, None)
                if selector.stopped:
                    break
                continue
            if executor is None:  # planned only (a step replay's record still says so)
                record = RunRecord(run.op_name, run.id, run.config(), STATUS_DRY_RUN,
                                   step={} if run.step is not None else None)
                summary.dry_run += 1
            else:
                record = self._execute(executor, run)
                if record is None:  # never measured (``--repetitions`` cut short): skipped
                    summary.skipped += 1
                    self._emit(run, None)
                    continue
                if record.status == STATUS_OK:
                    summary.ok += 1
                else:
                    summary.failed.append(record)
            self._emit(run, record)
            broken = getattr(executor, "broken", None)
            if broken is not None:  # after this run's record: the job cannot go on
                raise broken
            if self.options.fail_fast and record.status == STATUS_ERROR:
                summary.stopped_early = True
                log.warning("stopping at the first failure (--fail-fast)")
                break

    def _isolation_reason(self, run: PlannedRun) -> Optional[str]:
        """Why this run must be measured in an isolated worker although the run is not
        isolated: an operator known to touch memory out of bounds, or one of a custom
        namespace (its kernels are not torch's; a crash there must not end the run)."""
        if self.options.isolate or self.options.repetitions > 1:  # in a worker already
            return None
        if run.step is not None:  # a step replay: its calls were judged as configs
            return None
        reason = unsafe_reason(run.op_name, run.input,
                               self.spec.operators[run.op_index].input_data_generator)
        if reason is not None:
            log.warning("%s: %s: measured in an isolated worker", run.key, reason)
            return reason
        namespace = custom_namespace(run.op_name)
        if namespace is not None and self.options.isolate_custom:
            if run.op_name not in self._isolated_ops:
                self._isolated_ops.add(run.op_name)
                log.info("%s: operator of the custom namespace %s::, measured in an isolated "
                         "worker (--no-isolate-custom: in this process)", run.op_name, namespace)
            return f"custom namespace {namespace}"
        return None

    def _execute(self, executor, run: PlannedRun) -> RunRecord:
        """A run of an operator known to touch memory out of bounds (``operators.unsafe``) goes
        to an isolated worker even without ``--isolate``: its crash is an error record."""
        if run.key in self.refused:
            return RunRecord(run.op_name, run.id, run.config(), STATUS_ERROR,
                             error=RunError("CrashedBefore", self.refused[run.key], "run"))
        for before_execute in self.hooks.before_execute:
            before_execute(run)
        if self._isolation_reason(run) is None:
            return executor.execute(run)
        if self._isolated is None:
            from param_compute.runtime.isolation import IsolatedExecutor

            self._isolated = IsolatedExecutor(self.toolchain.context(self.spec, self.options))
        return self._isolated.execute(run)

    def _end_runs(self, summary: RunSummary) -> None:
        """The sinks' ``end_runs``, ``finish_fields`` and ``summary_lines`` hooks, in order."""
        for end_runs in self.hooks.end_runs:
            try:
                end_runs(summary)
            except (KeyboardInterrupt, Interrupted) as stop:  # the finish still happens
                summary.interrupted = summary.interrupted or getattr(stop, "signum",
                                                                     signal.SIGINT)
            finally:
                self._pass_lines()
        for finish_fields in self.hooks.finish_fields:
            summary.finish_fields.update(finish_fields(summary))
        for summary_lines in self.hooks.summary_lines:
            summary.notes.extend(summary_lines(summary))

    def _pass_lines(self) -> None:
        """Lines sinks made for the results file (``pending_lines``), handed to every sink."""
        for pending_lines in self.hooks.pending_lines:
            for line in pending_lines():
                for add_line in self.hooks.add_line:
                    add_line(line)

    def _emit(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        for run_done in self.hooks.run_done:
            run_done(run, record)



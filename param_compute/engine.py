"""The engine: run plan -> built operators -> generated data -> timed passes -> records -> sinks.

Operators are built once per build config (runs sharing a build share the built operator) and
cleaned up when the build changes, so memory is released deterministically without a forced
garbage collection. A failure in one run becomes an error record and the run goes on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Protocol

from .expansion import PlannedRun, count_runs, plan_runs
from .options import RunOptions
from .records import (STATUS_DRY_RUN, STATUS_ERROR, STATUS_OK, PassResult, RunError,
                      RunRecord)
from .validation import BenchmarkSpec

log = logging.getLogger("param_compute")


@dataclass
class RunSummary:
    ok: int = 0
    failed: List[RunRecord] = field(default_factory=list)
    dry_run: int = 0
    skipped: int = 0
    unmatched_ids: List[str] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
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


def _error(run: PlannedRun, exc: BaseException, phase: str) -> RunRecord:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return RunRecord(run.op_name, run.id, run.config(), STATUS_ERROR,
                     error=RunError(type(exc).__name__, message, phase))


class _BuiltOperator:
    """The operator for the current build config, created lazily and cleaned up on change."""

    def __init__(self, factories: Callable[[str], Callable], registries, options: RunOptions):
        self.factories = factories
        self.registries = registries
        self.options = options
        self.key = None
        self.op = None
        self.failure: Optional[BaseException] = None

    def get(self, run: PlannedRun, op_spec, seed_run: Callable[[str], None]):
        if run.build_key != self.key:
            self.release()
            self.key = run.build_key
            try:
                op = self.factories(run.op_name)()
                op.device = self.options.device
                if run.build:
                    seed_run(f"{run.op_name}|{run.config_index}|{run.build_id}|build")
                    generator = self.registries.data_generators[op_spec.build_data_generator]()
                    args, kwargs = generator.get_data(run.build, self.options.device)
                    op.build(*args, **kwargs)
                self.op = op
            except Exception as exc:  # every run of this build reports the build failure
                log.debug("build failed for %s", run.key, exc_info=True)
                self.failure = exc
        if self.failure is not None:
            raise self.failure
        return self.op

    def release(self) -> None:
        if self.op is not None:
            try:
                self.op.cleanup()
            except Exception:  # cleanup must never hide results already measured
                log.warning("cleanup of %s failed", self.key, exc_info=True)
        self.op = None
        self.failure = None
        self.key = None


class _PhaseError(Exception):
    def __init__(self, phase: str, cause: BaseException):
        self.phase = phase
        self.cause = cause


class Engine:
    """Runs a validated spec with given options, streaming records to the sinks."""

    def __init__(self, spec: BenchmarkSpec, options: RunOptions, registries,
                 factories: Optional[Callable[[str], Callable]] = None,
                 sinks: Iterable[RecordSink] = ()):
        self.spec = spec
        self.options = options
        self.registries = registries
        self.factories = factories
        self.sinks = list(sinks)

    def plan(self) -> Iterable[PlannedRun]:
        return plan_runs(self.spec, self.registries.config_iterators, self.options.device)

    def total(self) -> Optional[int]:
        return count_runs(self.spec, self.registries.config_iterators)

    def run(self) -> RunSummary:
        summary = RunSummary()
        selector = RunSelector(self.options.resume_id, self.options.stop_id)
        for sink in self.sinks:
            sink.start(self.total())
        executor = None if self.options.dry_run else _Executor(self)
        try:
            for run in self.plan():
                if not selector.wants(run):
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
        finally:
            if executor is not None:
                executor.close()
        summary.unmatched_ids = selector.unmatched()
        for message in summary.unmatched_ids:
            log.warning("%s", message)
        for sink in self.sinks:
            sink.finish(summary)
        return summary

    def _emit(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        for sink in self.sinks:
            sink.run_done(run, record)


class _Executor:
    """Measures planned runs (the torch side of the engine)."""

    def __init__(self, engine: Engine):
        import torch

        from .data_generation import seed_for_run, seed_generators
        from .devices import clock_for
        from .timing import time_calls

        self.torch = torch
        self.options = engine.options
        self.registries = engine.registries
        self.spec = engine.spec
        self.time_calls = time_calls
        self._seed_for_run = seed_for_run
        self._seed_generators = seed_generators
        torch.set_num_threads(self.options.num_threads)
        self.clock = clock_for(self.options.device)
        self.built = _BuiltOperator(engine.factories, self.registries, self.options)
        self.generators: Dict[str, Any] = {}

    def seed_run(self, run_key: str) -> None:
        self._seed_generators(self._seed_for_run(self.options.seed, run_key))

    def _generator(self, name: str):
        if name not in self.generators:
            self.generators[name] = self.registries.data_generators[name]()
        return self.generators[name]

    def execute(self, run: PlannedRun) -> RunRecord:
        """Measure one run; a failure becomes an error record keeping any pass already measured."""
        op_spec = self.spec.operators[run.op_index]
        passes: List[PassResult] = []
        try:
            op = self._phase("build", lambda: self.built.get(run, op_spec, self.seed_run))
            self.seed_run(run.key)
            args, kwargs = self._phase("data", lambda: self._generator(
                op_spec.input_data_generator).get_data(run.input, self.options.device))
            passes.append(self._phase("forward", lambda: self._forward(op, args, kwargs)))
            if self.options.backward:
                passes.append(self._phase("backward", lambda: self._backward(op, args, kwargs)))
        except _PhaseError as failure:
            log.debug("run %s failed in %s", run.key, failure.phase, exc_info=failure.cause)
            log.warning("%s failed in %s: %s: %s", run.key, failure.phase,
                        type(failure.cause).__name__, failure.cause)
            record = _error(run, failure.cause, failure.phase)
            record.passes = passes
            return record
        return RunRecord(run.op_name, run.id, run.config(), STATUS_OK, passes)

    @staticmethod
    def _phase(phase: str, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except _PhaseError:
            raise
        except Exception as exc:
            raise _PhaseError(phase, exc) from exc

    def _forward(self, op, args, kwargs) -> PassResult:
        fn = op.bind_forward(args, kwargs)
        options, clock, time_calls = self.options, self.clock, self.time_calls
        warmup = time_calls(fn, options.warmup, clock, options.exec_mode)
        measure = time_calls(fn, options.iteration, clock, options.exec_mode)
        return PassResult("forward", warmup, measure)

    def _backward(self, op, args, kwargs) -> PassResult:
        if not op.supports_backward:
            raise RuntimeError(f"{type(op).__name__} has no backward pass (in-place operator)")

        def prepare() -> None:
            op.run_forward_for_backward(args, kwargs)
            op.create_grad()

        options, clock, time_calls = self.options, self.clock, self.time_calls
        warmup = time_calls(op.backward, options.warmup, clock, options.exec_mode, prepare)
        measure = time_calls(op.backward, options.iteration, clock, options.exec_mode, prepare)
        op.drop_outputs()  # the graph of the last forward is not kept past its run
        return PassResult("backward", warmup, measure)

    def close(self) -> None:
        self.built.release()
        self.generators.clear()

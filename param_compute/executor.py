"""The measuring side of the engine: build operators, generate data, time passes.

Operators are built once per build config (runs sharing a build share the built operator) and
cleaned up when the build changes, so memory is released deterministically without a forced
garbage collection. A failure in one run becomes an error record, keeping any pass measured
before it, and the run goes on.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from .annotations import (Annotator, iteration_range_name, iteration_ranges, phase_range_name,
                          run_range_name)
from .data_generation import seed_for_run, seed_generators
from .devices import open_device
from .expansion import PlannedRun
from .memory_guard import MemoryLimitExceeded, default_limit, format_size, spec_bytes
from .options import RunOptions
from .records import STATUS_ERROR, STATUS_OK, PassResult, RunError, RunRecord
from .throughput import FlopCounter, gradient_bytes, tensor_bytes
from .timing import ExecMode, time_calls

log = logging.getLogger("param_compute")


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


class Executor:
    """Measures planned runs (the torch side of the engine)."""

    def __init__(self, engine):
        self.options = options = engine.options
        self.registries = engine.registries
        self.spec = engine.spec
        torch.set_num_threads(options.num_threads)
        self.device = open_device(options.device, flush_l2=not options.cuda_l2_cache)
        self.annotator = Annotator(profiling=options.profile or options.execution_trace)
        self.flop_counter = FlopCounter() if options.throughput else None
        self.memory_limit = (default_limit(options.device) if options.max_memory == "auto"
                             else options.max_memory)
        self.built = _BuiltOperator(engine.factories, self.registries, options)
        self.generators: Dict[str, Any] = {}

    def seed_run(self, run_key: str) -> None:
        seed_generators(seed_for_run(self.options.seed, run_key), self.options.device)

    def _generator(self, name: str):
        if name not in self.generators:
            self.generators[name] = self.registries.data_generators[name]()
        return self.generators[name]

    def execute(self, run: PlannedRun) -> RunRecord:
        """Measure one run; a failure becomes an error record keeping any pass already measured."""
        op_spec = self.spec.operators[run.op_index]
        passes: List[PassResult] = []
        try:
            with self.annotator.range(run_range_name(run.op_name, run.id)):
                self._phase("memory", lambda: self._check_memory(run))
                op = self._phase("build", lambda: self.built.get(run, op_spec, self.seed_run))
                self.seed_run(run.key)
                args, kwargs = self._phase("data", lambda: self._generator(
                    op_spec.input_data_generator).get_data(run.input, self.options.device))
                fn, setup = self._phase("forward", lambda: self._bind(op, args, kwargs))
                passes.append(self._phase("forward", lambda: self._forward(
                    run, fn, setup, args, kwargs)))
                if self.options.backward:
                    passes.append(self._phase("backward", lambda: self._backward(
                        run, op, fn, args, kwargs)))
        except _PhaseError as failure:
            return self._failed(run, failure, passes)
        return RunRecord(run.op_name, run.id, run.config(), STATUS_OK, passes)

    def _failed(self, run: PlannedRun, failure: "_PhaseError", passes) -> RunRecord:
        cause = failure.cause
        log.debug("run %s failed in %s", run.key, failure.phase, exc_info=cause)
        log.warning("%s failed in %s: %s: %s", run.key, failure.phase, type(cause).__name__,
                    cause)
        record = _error(run, cause, failure.phase)
        record.passes = passes
        # The traceback's frames hold this run's tensors: drop them now, so the memory is free
        # before the next config (after an out-of-memory error above all).
        cause.__traceback__ = None
        if isinstance(cause, (MemoryError, torch.OutOfMemoryError)):
            self.built.release()
            self.device.release_cached_memory()
        return record

    def _check_memory(self, run: PlannedRun) -> None:
        if self.memory_limit is None:
            return
        needed = spec_bytes(run.input) + spec_bytes(run.build)
        if needed > self.memory_limit:
            raise MemoryLimitExceeded(
                f"the config's tensors need an estimated {format_size(needed)}, over the "
                f"{format_size(self.memory_limit)} limit (--max-memory); nothing was allocated")

    @staticmethod
    def _phase(phase: str, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except _PhaseError:
            raise
        except Exception as exc:
            raise _PhaseError(phase, exc) from exc

    def _bind(self, op, args, kwargs) -> Tuple[Callable[[], Any], Dict[str, float]]:
        """The callable the forward pass times: bound once, compiled or graph-captured on request.

        Compilation and capture happen here, before any timed call; their cost is reported as
        ``compile.time`` / ``capture.time``, never inside the iteration times.
        """
        fn = op.bind_forward(args, kwargs)
        setup: Dict[str, float] = {}
        if self.options.pt2_model:
            compiled = torch.compile(fn)
            start = time.perf_counter()
            compiled()  # the first call compiles
            self.device.clock.synchronize()
            setup["compile.time"] = (time.perf_counter() - start) * 1e3
            fn = compiled
        if self.options.cuda_graph:
            start = time.perf_counter()
            fn = self.device.capture_graph(fn)
            setup["capture.time"] = (time.perf_counter() - start) * 1e3
        return fn, setup

    def _timed_phases(self, run: PlannedRun, pass_name: str, fn: Callable[[], Any],
                      prepare: Optional[Callable[[], Any]]) -> PassResult:
        """Warm-up then measurement of one pass, each in its own profiler range."""
        options, device, mode = self.options, self.device, self.options.exec_mode
        result = PassResult(pass_name, [], [])
        measured = fn
        if options.nvtx_iterations:  # the profiler child: one NVTX range per measured call
            measured = iteration_ranges(fn, iteration_range_name(run.op_name, run.id, pass_name))
        for phase, count in (("warmup", options.warmup), ("measure", options.iteration)):
            host: List[float] = []
            with self.annotator.range(phase_range_name(run.op_name, run.id, phase, pass_name)):
                device.reset_peak_memory()
                times = time_calls(measured if phase == "measure" else fn, count, device.clock,
                                   mode, prepare, host)
                calls = count
                if phase == "measure" and options.min_time > 0:
                    calls = self._extend_to_min_time(measured, prepare, times, host, calls)
                peak = device.peak_memory_mb()
            setattr(result, f"{phase}_ms", times)
            if host:
                result.extra[f"{phase}.host_time"] = host
            if peak is not None:
                result.extra[f"{phase}.gpu.memory"] = [peak]
            if phase == "measure":
                result.iterations = calls
        return result

    def _extend_to_min_time(self, fn, prepare, times: List[float], host: List[float],
                            calls: int) -> int:
        """Adaptive iterations: keep measuring, in doubling blocks, until the measured time
        reaches ``--min-time`` or the calls reach ``--max-iteration``."""
        options, clock, mode = self.options, self.device.clock, self.options.exec_mode
        target_ms = options.min_time * 1e3
        per_value_calls = calls if mode is ExecMode.CONTINUOUS else 1
        spent = sum(times) * per_value_calls
        while spent < target_ms and calls < options.max_iteration:
            block = min(calls, options.max_iteration - calls)
            more = time_calls(fn, block, clock, mode, prepare, host)
            times.extend(more)
            spent += sum(more) * (block if mode is ExecMode.CONTINUOUS else 1)
            calls += block
        return calls

    def _forward(self, run: PlannedRun, fn: Callable[[], Any], setup: Dict[str, float], args,
                 kwargs) -> PassResult:
        work = None
        if self.flop_counter is not None:
            flops, output = self.flop_counter.count(fn)
            work = (flops, tensor_bytes(args) + tensor_bytes(kwargs) + tensor_bytes(output))
            del output
        result = self._timed_phases(run, "forward", fn, None)
        result.extra.update({k: [v] for k, v in setup.items()})
        if work is not None:
            result.flops, result.bytes = work
        return result

    def _backward(self, run: PlannedRun, op, fn: Callable[[], Any], args, kwargs) -> PassResult:
        if not op.supports_backward:
            raise RuntimeError(f"{type(op).__name__} has no backward pass (in-place operator)")

        def prepare() -> None:
            op.remember_output(fn())
            op.create_grad()

        work = None
        if self.flop_counter is not None:
            prepare()
            flops, _ = self.flop_counter.count(op.backward)
            work = (flops, tensor_bytes(getattr(op, "_grad", None)) + gradient_bytes(args)
                    + gradient_bytes(kwargs))
        result = self._timed_phases(run, "backward", op.backward, prepare)
        op.drop_outputs()  # the graph of the last forward is not kept past its run
        if work is not None:
            result.flops, result.bytes = work
        return result

    def close(self) -> None:
        self.built.release()
        self.generators.clear()

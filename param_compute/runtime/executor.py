"""The measuring side of the engine: build operators, generate data, time passes.

Operators are built once per build config (runs sharing a build share the built operator) and
cleaned up when the build changes, so memory is released deterministically without a forced
garbage collection. A failure in one run becomes an error record, keeping any pass measured
before it, and the run goes on.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch

from param_compute.measure.ranges import Annotator, run_range_name
from param_compute.measure.cold import ColdCache
from param_compute.runtime.context import ExecutionContext
from param_compute.data.generator import seed_for_run, seed_generators
from param_compute.measure.devices import open_device
from param_compute.measure.device_samples import watch_clocks
from param_compute.plan.runplan import PlannedRun
from param_compute.plan.runkey import format_key
from param_compute.runtime.memory_guard import (MemoryLimitExceeded, build_weight_bytes,
                                                cold_bytes, config_bytes, default_limit,
                                                format_size, output_bytes)
from param_compute.runtime.options import RunOptions
from param_compute.results.records import STATUS_ERROR, STATUS_OK, PassResult, RunError, RunRecord
from param_compute.runtime.throughput import FlopCounter, gradient_bytes, tensor_bytes
from param_compute.measure.canary import Canary
from param_compute.measure.measurer import Measurer
from param_compute.measure.calibrate import main_dtype, peaks_for_run
from param_compute.operators.collectives import is_collective

log = logging.getLogger("param_compute")

#: An error message longer than this is cut (a 50 MB message would be stored and logged).
MAX_MESSAGE_CHARS = 4000


def error_message(exc: BaseException) -> str:
    """The first line of an exception's message, at most ``MAX_MESSAGE_CHARS`` (and a note)."""
    text = str(exc).strip()
    end = text.find("\n", 0, MAX_MESSAGE_CHARS + 1)
    first = text[:end] if end >= 0 else text[:MAX_MESSAGE_CHARS + 1]
    if len(first) > MAX_MESSAGE_CHARS:
        whole = len(text.split("\n", 1)[0]) if end < 0 else end
        first = f"{first[:MAX_MESSAGE_CHARS]}... [truncated: {whole} characters in all]"
    return first or type(exc).__name__


def _error(run: PlannedRun, exc: BaseException, phase: str) -> RunRecord:
    message = error_message(exc)
    return RunRecord(run.op_name, run.id, run.config(), STATUS_ERROR,
                     error=RunError(type(exc).__name__, message, phase))


class _BuiltOperator:
    """The operator for the current build config, created lazily and cleaned up on change."""

    def __init__(self, factories: Callable[[str], Callable],
                 data_generators: Mapping[str, Callable[[], Any]], options: RunOptions):
        self.factories = factories
        self.data_generators = data_generators
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
                    seed_run(format_key(run.op_name, run.config_index, run.build_id, "build"))
                    generator = self.data_generators[op_spec.build_data_generator]()
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
        self.op = self.failure = self.key = None


def _target(op_spec, run: PlannedRun) -> Optional[Dict[str, Any]]:
    """The ``target`` of the run's config entry, if it has one."""
    configs = getattr(op_spec, "configs", ())
    entry = configs[run.config_index] if run.config_index < len(configs) else None
    return entry.get("target") if isinstance(entry, dict) else None


class _PhaseError(Exception):
    def __init__(self, phase: str, cause: BaseException):
        self.phase, self.cause = phase, cause


class Executor:
    """Measures planned runs (the torch side of the engine)."""

    def __init__(self, context: ExecutionContext):
        self.options = options = context.options
        self.data_generators = context.data_generators
        self.spec = context.spec
        torch.set_num_threads(options.num_threads)
        self.device = open_device(options.device, flush_l2=not options.cuda_l2_cache)
        self.watch = watch_clocks(self.device)  # per-sample GPU clocks (NVML), None off CUDA
        self.cold = ColdCache.attach(options.cold, self.device)  # --cold (measure.cold)
        self.annotator = Annotator(profiling=options.profile or options.execution_trace)
        self.measurer = Measurer(options.measuring(), self.device, self.annotator, self.watch,
                                 options.num_threads)
        self.canary = Canary() if options.canary and not options.nvtx_iterations else None
        self.flop_counter = FlopCounter() if options.throughput else None
        self.peaks = (peaks_for_run(options.device, options.num_threads, options.peaks)
                      if options.throughput else None)
        self.memory_limit = (default_limit(options.device) if options.max_memory == "auto"
                             else options.max_memory)
        self.built = _BuiltOperator(context.operator_factory, self.data_generators, options)
        self.generators: Dict[str, Any] = {}
        # (build key, estimated weight bytes, the operator object that estimated them)
        self.weights: Tuple[Any, int, Any] = (object(), 0, None)
        self.eager_forward: Optional[Callable[[], Any]] = None  # the run's uncompiled call
        self.context = context
        self.step_device = None  # the step replay's device (``_step_device``)
        #: A job's rank (``runtime.job``): its groups built now; ``broken``: the job's end,
        #: set by a failed collective after its run's record (the engine ends the run then).
        self.job = None
        self.broken = None
        if context.job is not None:
            from param_compute.runtime.job import Job

            self.job = Job.start(context.job.job_rank, options.device, options.dist_backend,
                                 options.dist_timeout, context.spec.process_groups)

    def seed_run(self, run_key: str) -> None:
        seed_generators(seed_for_run(self.options.seed, run_key), self.options.device)

    def _generator(self, name: str):
        if name not in self.generators:
            self.generators[name] = self.data_generators[name]()
        return self.generators[name]

    def execute(self, run: PlannedRun) -> RunRecord:
        """Measure one run, the canary read around it (``measure.canary``) unless turned off."""
        if self.canary is None:
            return self._execute(run)
        started = self.canary.before()
        record = self._execute(run)
        record.canary_drift = self.canary.after(started)
        return record

    def _execute(self, run: PlannedRun) -> RunRecord:
        """Measure one run; a failure becomes an error record keeping any pass already measured."""
        if run.step is not None:
            return self._execute_step(run)
        if self.job is not None and is_collective(run.op_name):
            from param_compute.runtime.job_runs import execute_collective

            return execute_collective(self, run)
        op_spec = self.spec.operators[run.op_index]
        passes: List[PassResult] = []
        try:
            with self.annotator.range(run_range_name(run.op_name, run.id)):
                self._phase("memory", lambda: self._check_memory(run, op_spec))
                op = self._phase("build", lambda: self.built.get(run, op_spec, self.seed_run))
                self.seed_run(run.key)
                args, kwargs = self._phase("data", lambda: self._generator(
                    op_spec.input_data_generator).get_data(run.input, self.options.device))
                fn, setup = self._phase("forward", lambda: self._bind(op, args, kwargs))
                timed = self._phase("data", lambda: self._cold_copies(
                    run, op, op_spec, fn, args, kwargs))
                passes.append(self._phase("forward", lambda: self._forward(
                    run, timed, setup, args, kwargs)))
                if self.options.backward:
                    passes.append(self._phase("backward", lambda: self._backward(
                        run, op, fn, args, kwargs)))
                if self.cold is not None:
                    self.cold.note(passes, timed)
                verdict = (self._phase("verify", lambda: self._verify(op, fn, args, kwargs))
                           if self.options.verify else None)
        except _PhaseError as failure:
            return self._failed(run, failure, passes)
        return RunRecord(run.op_name, run.id, run.config(), STATUS_OK, passes,
                         target=_target(op_spec, run), verify=verdict)

    def _execute_step(self, run: PlannedRun) -> RunRecord:
        """The step replay's run (``runtime.step_run``): the step file read and checked, its
        estimated memory against the limit before anything is allocated, the step bound,
        then measured by the run's ``Measurer``; ``--verify`` asks that every call ran on
        the inputs it was captured with. A failure is an error record, as for any run."""
        from param_compute.runtime.step_replay import StepReplay
        from param_compute.runtime.step_run import (load_step, measure_step, spec_marks,
                                                    verify_step)

        passes: List[PassResult] = []
        details = verdict = None
        self.step_agreed = False  # a job's ranks agreed to start it (``job_runs``)
        try:
            with self.annotator.range(run_range_name(run.op_name, run.id)):
                _, step, runs = self._phase("build", lambda: load_step(
                    None, run.step, self.spec, self.context.config_iterators,
                    self.options.device, self.context.job))
                self._phase("memory", lambda: self._check_step_memory(step, runs))
                replay = self._phase("build", lambda: StepReplay(
                    step, runs, self.spec, self.context, self._step_device()))
                if self.job is not None:  # every rank ready, then in step (``job_runs``)
                    from param_compute.runtime.job_runs import step_measurer

                    measurer = self._phase("step", lambda: step_measurer(self, replay))
                else:
                    measurer = Measurer(self.options.measuring(), replay.device,
                                        self.annotator, self.watch, self.options.num_threads)
                measured, details = self._phase("step", lambda: measure_step(
                    replay, measurer, (run.op_name, run.id)))
                passes.append(measured)
                details.update(spec_marks(run))  # a foreign or stale step file, said
                verdict = verify_step(details) if self.options.verify else None
                del replay
        except _PhaseError as failure:
            if self.job is not None:
                from param_compute.runtime.job_runs import job_failure

                self.broken = job_failure(self, failure.cause, "the step replay")
            record = self._failed(run, failure, passes, quiet=self.broken is not None)
            record.step = {**(details or {}), **spec_marks(run)}  # still the step's line
            return record
        return RunRecord(run.op_name, run.id, run.config(), STATUS_OK, passes, verify=verdict,
                         step=details)

    def _step_device(self):
        """The device a step replays on: the run's, without an L2 flush before each step (a
        step's own cache state is part of it)."""
        if self.step_device is None:
            self.step_device = open_device(self.options.device, flush_l2=False)
        return self.step_device

    def _check_step_memory(self, step, runs) -> None:
        """Refuse a step whose replay is estimated above the limit (``runtime.step_memory``)."""
        from param_compute.runtime.step_memory import step_bytes

        if self.memory_limit is None:
            return
        needed = step_bytes(step, runs, self.spec, self._generator)
        if needed > self.memory_limit:
            raise MemoryLimitExceeded(
                f"the step's replay needs an estimated {format_size(needed)} (its calls' bound "
                f"arguments and the fed tensors alive together), over the "
                f"{format_size(self.memory_limit)} limit (--max-memory); nothing was "
                "allocated")

    def _failed(self, run: PlannedRun, failure: "_PhaseError", passes,
                quiet: bool = False) -> RunRecord:
        """An error record; ``quiet``: not said (the job's one message says it)."""
        cause = failure.cause
        log.debug("run %s failed in %s", run.key, failure.phase, exc_info=cause)
        record = _error(run, cause, failure.phase)
        if not quiet:
            log.warning("%s failed in %s: %s: %s", run.key, failure.phase,
                        type(cause).__name__, record.error.message)
        record.passes = passes
        # The traceback's frames hold this run's tensors: drop them now, so the memory is free
        # before the next config (after an out-of-memory error above all).
        cause.__traceback__ = None
        if isinstance(cause, (MemoryError, torch.OutOfMemoryError)):
            self.built.release()
            self.device.release_cached_memory()
        return record

    def _cold_copies(self, run: PlannedRun, op, op_spec, fn, args, kwargs):
        """``fn``, or with ``--cold`` a rotation over it and ``op`` bound to more copies of the
        inputs (the same values: the generator reseeded for each) past the cache."""
        if self.cold is None:
            return fn
        generator = self._generator(op_spec.input_data_generator)

        def bind_copy():
            self.seed_run(run.key)
            return op.bind_forward(*generator.get_data(run.input, self.options.device))
        return self.cold.forward(fn, tensor_bytes(args) + tensor_bytes(kwargs), bind_copy)

    def _check_memory(self, run: PlannedRun, op_spec) -> None:
        """Refuse the run if its data, build data, built weights and the outputs of one call
        (estimated: see ``memory_guard``) exceed the limit; the weights are estimated once per
        build, on an operator object kept for the outputs' estimates of that build."""
        if self.memory_limit is None:
            return
        inputs = self._generator(op_spec.input_data_generator)
        input_bytes = config_bytes(inputs, run.input)
        cold, cold_words = cold_bytes(self.cold, input_bytes)  # every copy --cold will make
        needed = (input_bytes + cold
                  + config_bytes(self._generator(op_spec.build_data_generator), run.build))
        if needed <= self.memory_limit and run.build_key != self.weights[0]:
            op = self.built.factories(run.op_name)()
            op.device = self.options.device
            self.weights = (run.build_key, build_weight_bytes(
                op, self._generator(op_spec.build_data_generator), run.build), op)
        if needed <= self.memory_limit and run.build_key == self.weights[0]:
            needed += self.weights[1]
            if needed <= self.memory_limit:
                needed += output_bytes(self.weights[2], inputs, run.input)
        if needed > self.memory_limit:
            raise MemoryLimitExceeded(
                f"the config's tensors need an estimated {format_size(needed)}"
                f"{f' {cold_words}' if cold_words else ''}, over the "
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
        # FLOPs are counted on the eager call: a compiled callable run under the counting
        # dispatch mode has dynamo skip its frame for good (every later call ran eager), and a
        # graph replay runs no aten ops to count. An operator that compiles itself (a captured
        # graph, ``operators.graphs``) gives its eager call, and its compile time.
        eager = getattr(op, "bind_eager", None)
        self.eager_forward = eager(args, kwargs) if eager is not None else fn
        setup: Dict[str, float] = {}
        if getattr(op, "compile_ms", None) is not None:
            setup["compile.time"] = op.compile_ms
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

    def _pass_peaks(self, args, kwargs) -> Optional[Dict[str, Any]]:
        """The machine's peaks for the dtype of the run's largest floating tensor."""
        return self.peaks.for_dtype(main_dtype((args, kwargs))) if self.peaks else None

    def _verify(self, op, fn: Callable[[], Any], args, kwargs) -> Dict[str, Any]:
        """``--verify``: what was timed against eager (or float64 eager), untimed."""
        from param_compute.runtime.verify import verify

        graph_output = (lambda: self.device.graph_output) if self.options.cuda_graph else None
        # (a captured graph's eager reference is its aten ops one by one: ``bind_eager``)
        verdict = verify(fn, getattr(op, "bind_eager", op.bind_forward), args, kwargs,
                         self.options.verify, self.options.backward, graph_output)
        op.drop_outputs()
        return verdict

    def _forward(self, run: PlannedRun, fn: Callable[[], Any], setup: Dict[str, float], args,
                 kwargs) -> PassResult:
        work = None
        if self.flop_counter is not None:
            flops, output = self.flop_counter.count(self.eager_forward)
            moved = (tensor_bytes(args) + tensor_bytes(kwargs) + tensor_bytes(output)
                     if self.flop_counter.moved else 0)  # a view moves no data
            work = (flops, moved)
            del output
        result = self.measurer.measure(fn, None, "forward", (run.op_name, run.id))
        result.extra.update({k: [v] for k, v in setup.items()})
        if work is not None:
            result.flops, result.bytes = work
            result.peaks = self._pass_peaks(args, kwargs)
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
                    + gradient_bytes(kwargs) if self.flop_counter.moved else 0)
        result = self.measurer.measure(op.backward, prepare, "backward", (run.op_name, run.id))
        op.drop_outputs()  # the graph of the last forward is not kept past its run
        if work is not None:
            result.flops, result.bytes = work
            result.peaks = self._pass_peaks(args, kwargs)
        return result

    def close(self) -> None:
        self.built.release()
        self.generators.clear()
        if self.job is not None:
            self.job.close()
            self.job = None

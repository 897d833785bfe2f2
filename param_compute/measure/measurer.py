"""The Measurer: one protocol and one clock measuring any callable into one typed measurement.

Everything timed goes through it: a config's forward and backward passes, the step replay (the
whole step is its callable), a live capture's unprofiled step, calibration and the canary. It
takes a ``Protocol`` (``measure.protocol``) and a device (whose ``clock`` is the seam:
``measure.devices``), and returns a ``PassResult`` (``results.records``): the raw times, what
the measurement knows beside them, and statistics derived once (``results.stats``).

Every driver calls the one timing loop (``measure.timing.time_calls``) in blocks and decides
between blocks: the ``iteration`` calls alone (one block), ``min_time`` (doubling blocks until
the time is spent), ``max_noise`` (blocks growing by a quarter until the median's 95% interval
is within ±PCT of it, at least ``min_samples`` values and ``min_time``, at most
``max_time``/``max_iteration``; ``stop_reason`` says which ended it). A clock that agrees
across the ranks of a job (``measure.ranks``: ``agree``) has every decision taken on the agreed
samples, so the ranks stop together; with its ``slowest`` they are the samples kept. On the host
with one
thread the loop also reads the thread's CPU time per sample (``measure.clocks``): the stats get
``descheduled``, and ``timer="cpu"`` makes those CPU times the sample. ``involuntary_switches``
counts the kernel's preemptions over the measurement; ``peak_bytes`` is the memory taken above
what was allocated when each phase began, at its peak (the device's seam). Raw times are
thinned to ``keep_samples`` after the statistics are taken from all of them.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, List, Optional, Tuple

from param_compute.measure.protocol import Protocol
from param_compute.results.records import PER_SAMPLE, PassResult
from param_compute.results.stats import median, median_ci
from param_compute.measure.clocks import pick_times, reads_thread_cpu
from param_compute.measure.device_samples import finish_measure
from param_compute.measure.disturbance import involuntary_switches, judge
from param_compute.measure.ranges import (iteration_range_name, iteration_ranges,
                                          phase_range_name)
from param_compute.measure.timing import (CONTINUOUS_BLOCKS, ExecMode, spent_ms, time_calls,
                                          warm_up)

#: Continuous mode with --min-time: blocks of about this many ms, 10 to 100 of them.
CONTINUOUS_BLOCK_MS = 10.0
MAX_CONTINUOUS_BLOCKS = 100
#: --max-noise: each block adds this fraction of the calls made so far (at least one call).
SURE_GROWTH = 0.25


def relative_half_width(times: List[float]) -> float:
    """The larger distance from the median to an end of its 95% interval, over the median."""
    ordered = sorted(times)
    low, high = median_ci(ordered)
    middle = median(ordered)
    return max(middle - low, high - middle) / middle if middle > 0 else math.inf


class _NoRanges:
    """No profiler ranges (a measurement nobody profiles)."""

    @staticmethod
    def range(name: str):
        return contextlib.nullcontext()


class Measurer:
    """Measures callables with one protocol on one device, each phase in a profiler range."""

    def __init__(self, protocol: Protocol, device, annotator=None, watch=None,
                 num_threads: Optional[int] = 1):
        """``device``: its ``clock`` times, its memory statistics give ``peak_bytes``;
        ``annotator``: profiler ranges around each phase (``measure.ranges``); ``watch``: on
        CUDA, the GPU clocks per sample (``measure.gpu_clocks``), or None; ``num_threads``:
        the intra-op threads (one: the host loop also reads the thread's CPU time; None: it
        never does)."""
        self.protocol = protocol
        self.device = device
        self.annotator = annotator if annotator is not None else _NoRanges()
        self.watch = watch
        self.pair_cpu = reads_thread_cpu(device.clock, num_threads)
        #: The ranks' agreement (``measure.ranks``): decisions on the samples it returns.
        self.agree = getattr(device.clock, "agree", None)
        self.slowest = bool(getattr(device.clock, "slowest", False))

    def _agreed(self, times: List[float]) -> List[float]:
        """The samples every rank decides on (its own where the clock agrees with no one)."""
        return times if self.agree is None else self.agree(times)

    def measure(self, fn: Callable[[], Any], prepare: Optional[Callable[[], Any]] = None,
                name: str = "forward", label: Tuple[str, str] = ("", "")) -> PassResult:
        """Warm-up then measurement of ``fn`` (``prepare`` runs untimed before each discrete
        call, once before each continuous block): the measurement named ``name`` (a pass:
        ``forward``, ``backward``, ``step``); ``label`` (op, run id) names its ranges."""
        options, device, mode = self.protocol, self.device, self.protocol.exec_mode
        result = PassResult(name, [], [])
        measured = fn
        if options.nvtx_iterations:  # the profiler child: one NVTX range per measured call
            measured = iteration_ranges(fn, iteration_range_name(label[0], label[1], name))
        grown: List[int] = []
        for phase, count in (("warmup", options.warmup), ("measure", options.iteration)):
            host: List[float] = []
            cpu: Optional[List[float]] = [] if self.pair_cpu and phase == "measure" else None
            with self.annotator.range(phase_range_name(label[0], label[1], phase, name)):
                device.reset_peak_memory()
                switches = involuntary_switches()
                times = time_calls(measured if phase == "measure" else fn, count, device.clock,
                                   mode, prepare, host, cpu_out=cpu)
                seen = self._agreed(times)
                if self.slowest:
                    times = seen
                calls = count
                if phase == "measure" and options.extends:
                    calls, result.facts["stop_reason"] = self._extend(
                        measured, prepare, times, host, cpu, calls, seen)
                elif phase == "warmup" and options.warmup_time > 0:
                    self._warm_for_time(fn, prepare, times, count, result)
                peak = device.peak_memory_mb()
                grown.append(device.peak_bytes())
            if phase == "measure":
                times = self._judge(result, times, cpu, host, switches)
                result.iterations = calls
            setattr(result, f"{phase}_ms", times)
            if host:
                result.extra[f"{phase}.host_time"] = host
            if peak is not None:
                result.extra[f"{phase}.gpu.memory"] = [peak]
        known = [value for value in grown if value is not None]
        if known:
            result.facts["peak_bytes"] = max(known)
        finish_measure(result, self.watch, options, device.clock, fn, prepare)  # CUDA only
        result.keep_at_most(options.keep_samples, PER_SAMPLE)
        return result

    def _judge(self, result: PassResult, times: List[float], cpu: Optional[List[float]],
               host: List[float], switches: Optional[int]) -> List[float]:
        """The measured times by the asked timer, the descheduled fraction (and discarded
        samples), and the involuntary context switches since ``switches``."""
        after = involuntary_switches()
        if switches is not None and after is not None:
            result.facts["involuntary_switches"] = after - switches
        if cpu is None or len(cpu) != len(times):
            return times
        result.facts.update(judge(times, cpu, self.protocol.discard_disturbed, (host,)))
        times, other_name, other = pick_times(self.protocol.timer, times, cpu)
        if other_name is not None:
            result.extra[other_name] = other
        return times

    def _extend(self, fn, prepare, times: List[float], host: List[float],
                cpu: Optional[List[float]], calls: int, seen: List[float]) -> Tuple[int, str]:
        if self.protocol.max_noise:
            return self._until_sure(fn, prepare, times, host, cpu, calls, seen)
        calls = self._extend_to_min_time(fn, prepare, times, host, cpu, calls, seen)
        return calls, "max_iteration" if calls >= self.protocol.max_iteration else "min_time"

    def _warm_for_time(self, fn, prepare, times: List[float], count: int,
                       result: PassResult) -> None:
        """``--warmup-time``: after the ``-w`` calls, warm until that many seconds of calls have
        run (with ``--min-time``, also until the per-block median settles)."""
        options = self.protocol
        warm = warm_up(fn, options.warmup_time, self.device.clock, options.exec_mode, prepare,
                       settle=options.min_time > 0,
                       spent_before_ms=spent_ms(self._agreed(times), count, options.exec_mode),
                       agree=self.agree)
        result.extra["warmup.extra_iterations"] = [warm.calls]
        result.extra["warmup.total_time"] = [warm.spent_ms]
        result.extra["warmup.block_median"] = warm.block_medians

    def _more(self, fn, prepare, count: int, times: List[float], host: List[float],
              cpu: Optional[List[float]], seen: List[float], **blocks: Any) -> List[float]:
        """Another block of ``count`` calls: kept in ``times``, its agreed samples (what the
        decisions read) in ``seen`` (the same list where no ranks agree)."""
        clock, mode = self.device.clock, self.protocol.exec_mode
        more = time_calls(fn, count, clock, mode, prepare, host, cpu_out=cpu, **blocks)
        agreed = self._agreed(more)
        times.extend(agreed if self.slowest else more)
        if seen is not times:
            seen.extend(agreed)
        return agreed

    def _until_sure(self, fn, prepare, times: List[float], host: List[float],
                    cpu: Optional[List[float]], calls: int,
                    seen: Optional[List[float]] = None) -> Tuple[int, str]:
        """``max_noise``: blocks of a quarter more calls until the median's interval is within
        ±PCT (at least ``min_samples`` values and ``min_time`` spent), or ``max_time`` (once
        ``min_samples`` values are in) or ``max_iteration`` is reached."""
        options, mode = self.protocol, self.protocol.exec_mode
        seen = times if seen is None or self.agree is None else seen
        target, min_ms, max_ms = options.max_noise / 100, options.min_time * 1e3, \
            options.max_time * 1e3
        spent = spent_ms(seen, calls, mode)
        while True:
            if spent >= min_ms and len(seen) >= options.min_samples \
                    and relative_half_width(seen) <= target:
                return calls, "noise"
            if calls >= options.max_iteration:
                return calls, "max_iteration"
            if spent >= max_ms and len(seen) >= options.min_samples:
                return calls, "max_time"  # the cap: never below the least samples
            per_call = spent / calls if calls else 0.0
            block = max(1, int(calls * SURE_GROWTH), options.min_samples - len(seen))
            if per_call > 0:  # not far past --max-time
                block = min(block, max(1, math.ceil((max_ms - spent) / per_call)))
            block = min(block, options.max_iteration - calls)
            more = self._more(fn, prepare, block, times, host, cpu, seen)
            spent += spent_ms(more, block, mode)
            calls += block

    def _extend_to_min_time(self, fn, prepare, times: List[float], host: List[float],
                            cpu: Optional[List[float]], calls: int,
                            seen: Optional[List[float]] = None) -> int:
        """Adaptive iterations: keep measuring, in doubling blocks, until the measured time
        reaches ``--min-time`` or the calls reach ``--max-iteration``."""
        options, mode = self.protocol, self.protocol.exec_mode
        seen = times if seen is None or self.agree is None else seen
        target_ms = options.min_time * 1e3
        spent = spent_ms(seen, calls, mode)
        if mode is ExecMode.CONTINUOUS and spent < target_ms:
            return self._continuous_to_min_time(fn, prepare, times, host, cpu, spent / calls)
        while spent < target_ms and calls < options.max_iteration:
            block = min(calls, options.max_iteration - calls)
            more = self._more(fn, prepare, block, times, host, cpu, seen)
            spent += spent_ms(more, block, mode)
            calls += block
        return calls

    def _continuous_to_min_time(self, fn, prepare, times: List[float], host: List[float],
                                cpu: Optional[List[float]], per_call_ms: float) -> int:
        """Continuous mode with ``--min-time``: the ``-i`` calls only estimate the per-call time
        (like torch.utils.benchmark's block-size estimation); then one back-to-back loop long
        enough for ``--min-time`` (topped up if the estimate fell short), stamped in blocks of
        about ``CONTINUOUS_BLOCK_MS``, replaces them: every value a mean of as many calls."""
        options, mode = self.protocol, self.protocol.exec_mode
        target_ms = options.min_time * 1e3
        blocks = max(CONTINUOUS_BLOCKS, min(MAX_CONTINUOUS_BLOCKS,
                                            int(target_ms / CONTINUOUS_BLOCK_MS)))
        total = min(options.max_iteration, max(1, math.ceil(target_ms / max(per_call_ms, 1e-6))))
        block = max(1, total // blocks)
        times.clear()
        host.clear()
        if cpu is not None:
            cpu.clear()
        calls = spent = 0.0
        while spent < target_ms and calls < options.max_iteration:
            count = min(options.max_iteration - int(calls),
                        max(block, math.ceil((target_ms - spent) / max(per_call_ms, 1e-6))))
            parts = max(1, count // block)
            more = self._more(fn, prepare, count, times, host, cpu, times, blocks=parts)
            took = spent_ms(more, count, mode, blocks=parts)
            spent += took
            calls += count
            per_call_ms = took / count
        return int(calls)

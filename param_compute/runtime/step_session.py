"""The step replay inside a run: find and check the step file, measure, write the step record.

``run_benchmark -c SPEC --replay-step`` (or ``--step FILE``) makes the session add a
``StepReplaySink``: the step file is read and checked against the spec before anything runs (a
bad one is invalid input, exit 2); after the isolated runs it replays the step
(``step_replay``) and hands one ``{"step_replay": {...}}`` line to the results file
(``pending_lines``), keyed by run key per config.
"""

from __future__ import annotations

import gc
import logging
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional

from param_compute.spec.step_file import (StepFileError, read_step_file, step_path)
from param_compute.errors import Problem
from param_compute.plan.runplan import plan_runs
from param_compute.results.sinks.base import RecordSink
from param_compute.results.stats import summarize

log = logging.getLogger("param_compute")

#: Untimed steps whose calls' page faults are counted (host only).
FAULT_PASSES = 3
#: Steps timing the replay's own host step before host gaps are fitted (``--host-gaps``).
GAP_FIT_STEPS = 3
#: Host gaps adding this many seconds to the step-timed passes in all are announced first.
LONG_WAITS_S = 10.0


def find_step_file(spec_path: Path, step_file: Optional[Path]) -> Path:
    path = Path(step_file) if step_file is not None else step_path(Path(spec_path))
    if not path.exists():
        raise StepFileError(str(path), [Problem((), "no step file: capture writes it beside "
                                                "the spec (NAME.step.json); name another "
                                                "with --step FILE")])
    return path


def planned_runs(step: Dict[str, Any], spec, iterators, device: str, source: str):
    """run key -> ``PlannedRun`` for every run the step names; every key must be in the spec."""
    wanted = {entry["run"] for entry in step["calls"]}
    runs = {}
    for run in plan_runs(spec, iterators, device):
        if run.key in wanted:
            runs[run.key] = run
    problems = [Problem(("calls", index, "run"), f"{entry['run']!r} is no run of the spec")
                for index, entry in enumerate(step["calls"]) if entry["run"] not in runs]
    if problems:
        raise StepFileError(source, problems[:20])
    return runs


def _median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def measure(replay, options) -> Dict[str, Any]:
    """The protocol (see ``step_replay``): checked pass, warm-up, alternating step-timed and
    call-timed passes, ``-i`` of each, extended to ``--min-time``."""
    import time

    replay.checked_pass()
    for _ in range(options.warmup):
        replay.run_step()
    if options.warmup_time > 0:
        end = time.perf_counter() + options.warmup_time
        while time.perf_counter() < end:
            replay.run_step()
    host = getattr(replay.clock, "name", "") == "host"
    if replay.wants_gaps:  # the replay's own host step, then the original's gaps fitted to it
        replay.fit_host_gaps(statistics.median(replay.host_step_us()
                                               for _ in range(GAP_FIT_STEPS)))
        if replay.scheduled:
            _say_long_waits(replay.gap_fit, options)
    step_ms: List[float] = []
    passes: List[List[float]] = []
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        while True:
            for _ in range(max(1, options.iteration)):
                step_ms.append(replay.time_step())
                times = [0] * len(replay.calls)
                replay.run_step_timed(times)
                passes.append(times)
            if sum(step_ms) >= options.min_time * 1e3 or len(step_ms) >= options.max_iteration:
                break
    finally:
        if collecting:
            gc.enable()
    per_config: Dict[str, List[int]] = {}
    for index, call in enumerate(replay.calls):
        if call.failed is None:
            per_config.setdefault(call.run_key, []).append(index)
    # Page faults per call, on the host: untimed passes after the timed ones (the counter's
    # system calls would otherwise sit between the timed calls).
    faults = replay.count_faults(FAULT_PASSES) if host else None
    originals = [entry.get("faults") for entry in replay.step["calls"]]
    configs = {}
    for key, indices in per_config.items():
        per_pass = [sum(times[i] for i in indices) / len(indices) / 1e3 for times in passes]
        configs[key] = {"in_step_us": round(_median(per_pass), 3), "calls": len(indices)}
        if faults is not None:
            configs[key]["faults"] = round(sum(faults[i] for i in indices) / len(indices), 1)
        known = [originals[i] for i in indices if originals[i] is not None]
        if len(known) == len(indices):
            configs[key]["original_faults"] = round(sum(known) / len(known), 1)
    failed = [{"call": i, "run": c.run_key, "error": c.failed}
              for i, c in enumerate(replay.calls) if c.failed is not None]
    per_call_ms = [sum(times) / 1e6 for times in passes]
    return {"calls": len(replay.calls), "replayed_calls": len(replay.calls) - len(failed),
            "held_outputs": replay.held, "held_past_step": len(replay.carried),
            "externals": len(replay.externals), "fed_inputs": sum(len(c.fills)
                                                                  for c in replay.calls),
            "dataflow_mismatches": replay.mismatch_count, "mismatch_examples": replay.mismatches,
            "failed_calls": len(failed), "failures": failed[:20],
            "warmup": options.warmup, "iterations": len(step_ms),
            "step_ms": [round(t, 4) for t in step_ms], "stats": summarize(step_ms),
            "per_call_clock": "host perf_counter_ns around each call" if host
            else f"{getattr(replay.clock, 'name', 'device')} stamps around each call, a spin "
                 "kernel before each (launch cover)",
            "per_call_sum_ms": [round(t, 4) for t in per_call_ms],
            "faults_counted": f"minor page faults per call, median of {FAULT_PASSES} untimed "
                              "steps" if host else None,
            "host_gaps": host_gaps(replay, options), "configs": configs}


def _say_long_waits(fit: Dict[str, Any], options) -> None:
    """Warn before the step-timed passes when the host gaps kept make them long (a step file
    may ask for up to 10 minutes a step): how long, and how to replay without them."""
    steps = max(1, options.iteration)
    added_s = fit["added_us"] / 1e6
    if added_s * steps >= LONG_WAITS_S:
        log.warning("step replay: keeping the original's host gaps waits %.1f s in each of "
                    "the %d step-timed steps (its host step %.1f s, the replay's %.3f ms), "
                    "about %.0f s in all; --host-gaps off replays back to back", added_s,
                    steps, fit["real_host_us"] / 1e6, fit["replay_host_us"] / 1e3,
                    added_s * steps)


def host_gaps(replay, options) -> Dict[str, Any]:
    """What the step-timed passes did about the original's host time between calls."""
    end = replay.step.get("real_host_us")
    if replay.scheduled:
        return {"kept": True, **replay.gap_fit,
                "how": "the original's host step less the replay's own, spread over the "
                       "gaps as captured (gap_us), waited before each call in step-timed "
                       "passes"}
    host = getattr(replay.clock, "name", "") == "host"
    why = ("the step file has no host gaps (capture --run writes them, and --from-et with a "
           "Kineto trace's step window)" if end is None
           else "--host-gaps off" if options.host_gaps == "off"
           else (replay.gap_fit or {}).get("why", "not fitted") if replay.wants_gaps
           else "on the host the time between calls is the framework's own work: "
                "--host-gaps on to keep it" if host
           else "the trace's host step is a profiled one (an upper bound: the profiler's "
                "cost between calls is in it): --host-gaps on to keep it anyway")
    return {"kept": False, **(replay.gap_fit or {"real_host_us": end}), "why": why}


class StepReplaySink(RecordSink):
    """Replays the captured step after the isolated runs; its record goes to the results file
    through ``pending_lines``."""

    def __init__(self, step_file: Path, step: Dict[str, Any], runs, spec, toolchain, options):
        self.step_file = step_file
        self.step = step
        self.runs = runs
        self.spec = spec
        self.toolchain = toolchain
        self.options = options
        self.record: Optional[Dict[str, Any]] = None
        self.note: Optional[str] = None
        self._lines: List[Dict[str, Any]] = []

    @classmethod
    def load(cls, spec_path: Optional[Path], step_file: Optional[str], spec, toolchain,
             options) -> "StepReplaySink":
        """Find, read and check the step file (``StepFileError``: invalid input)."""
        if spec_path is None and step_file is None:
            raise StepFileError("--replay-step", [Problem((), "a spec given as a dict has no "
                                                          "step file beside it: name one with "
                                                          "--step FILE (step_file=)")])
        path = find_step_file(spec_path, Path(step_file) if step_file is not None else None)
        step = read_step_file(path)
        runs = planned_runs(step, spec, toolchain.registries.config_iterators, options.device,
                            str(path))
        return cls(path, step, runs, spec, toolchain, options)

    def pending_lines(self) -> List[Dict[str, Any]]:
        lines, self._lines = self._lines, []
        return lines

    def end_runs(self, summary) -> None:
        if summary.interrupted:
            self.note = "step replay: not run (interrupted)"
            return
        if self.options.dry_run:
            self.note = f"step replay: {len(self.step['calls'])} calls planned (dry run)"
            return
        from param_compute.runtime.step_replay import StepReplay

        record: Dict[str, Any] = {"step_file": str(self.step_file),
                                  "device": self.options.device,
                                  "num_threads": self.options.num_threads}
        try:
            replay = StepReplay(self.step, self.runs, self.spec,
                                self.toolchain.context(self.spec, self.options))
            record.update(measure(replay, self.options))
            del replay
        except Exception as exc:  # a failed step replay is said, the isolated runs are kept
            log.debug("step replay failed", exc_info=True)
            record["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:500]}"
            log.warning("step replay failed: %s", record["error"])
        for key in ("real_step_us", "original"):
            if self.step.get(key) is not None:
                record[key] = self.step[key]
        self.record = record
        self._lines.append({"step_replay": record})

    def summary_lines(self, summary) -> List[str]:
        if self.note:
            return [self.note]
        record = self.record or {}
        if self.record is None and summary.interrupted:  # stopped in the replay itself
            return ["step replay: interrupted (not recorded)"]
        if "error" in record or not record.get("stats"):
            return [f"step replay failed: {record.get('error', 'nothing measured')}"]
        line = (f"step replay: {record['stats']['median']:.3f} ms per step (median of "
                f"{record['iterations']}), {record['replayed_calls']} of {record['calls']} "
                f"calls, {record['fed_inputs']} inputs fed by earlier calls")
        if record.get("real_step_us"):
            line += f"; real step {record['real_step_us'] / 1e3:.3f} ms"
        gaps = record.get("host_gaps") or {}
        if gaps.get("kept"):
            line += (f"; {gaps['added_us'] / 1e3:.3f} ms of the original's host time between "
                     "calls kept (--host-gaps)")
        extra = []
        if not gaps.get("kept") and self.options.host_gaps == "on":  # asked for, not kept
            extra.append(f"host gaps not kept (--host-gaps on): {gaps.get('why', 'unknown')}")
        if record["dataflow_mismatches"]:
            extra.append(f"{record['dataflow_mismatches']} fed inputs replaced by generated "
                         "data (shape or dtype differed)")
        if record["failed_calls"]:
            extra.append(f"{record['failed_calls']} calls failed and were left out")
        return [line] + [f"  {e}" for e in extra]

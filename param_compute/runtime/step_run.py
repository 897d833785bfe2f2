"""The step replay as a planned run: its step file checked, its run, and its measurement.

``run_benchmark -c SPEC --replay-step`` (or ``--step FILE``) adds one run to the plan, after the
spec's own: ``step_replay|0|0|0``, whose callable is the whole captured step (``step_replay``).
The session reads and checks the step file against the spec before anything runs (a bad one is
invalid input, exit 2: ``load_step``), and says whether it belongs to that spec
(``check_step_spec``: a step file captured with another spec is refused unless ``--step``
names it, one captured before the spec changed is replayed with a warning and marked
``stale``); the engine schedules the run like any other (resume,
shards, ``--repetitions``, ``--isolate``, the canary), and the executor measures it with the
run's one ``Measurer`` and protocol (``measure_step``): its record carries the same ``stats``,
stop reason, disturbance marks and verdicts as any run's, under the pass name ``step``, and
the replay's own details under ``step`` (``kind: "step"`` in the results file).

The measurement: one checked pass (``StepReplay.checked_pass``); a step in which no call ran
is refused. Where host gaps are kept, the replay's own host step is measured first and the
original's gaps fitted to it. Then the protocol: warm-up, and whole steps timed with nothing
per call; in discrete mode each timed step is preceded, untimed, by a step with a clock around
every call (the ``prepare`` of the measurement), so the two kinds alternate and drift affects
both alike; in continuous mode those call-timed steps follow the timed ones. On the host a few
untimed steps then count each call's minor page faults. Each config's in-step time is the
median over the call-timed steps of its mean time per call; one call-timed step, the one whose
sum is nearest the median's, is kept call by call as the record's ``timeline``
(``step_timeline``), which the tools draw beside the original.
"""

from __future__ import annotations

import array
import collections
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from param_compute.errors import Problem
from param_compute.formatting import printable
from param_compute.measure.protocol import Protocol
from param_compute.measure.timing import ExecMode
from param_compute.plan.runplan import PlannedRun, plan_runs
from param_compute.results.stats import median
from param_compute.runtime.step_timeline import MEASURED, PACKED, build_timeline
from param_compute.spec.step_file import StepFileError, rank_step, read_step_file, step_path
from param_compute.spec.wording import short

log = logging.getLogger("param_compute")

#: The step replay's run: its operator name and id (its key: ``step_replay|0|0|0``).
STEP_OP = "step_replay"
STEP_ID = "0|0|0"
#: Untimed steps whose calls' page faults are counted (host only).
FAULT_PASSES = 3
#: Steps timing the replay's own host step before host gaps are fitted (``--host-gaps``).
GAP_FIT_STEPS = 3
#: Host gaps adding this many seconds to the timed steps in all are announced first.
LONG_WAITS_S = 10.0
#: Call-timed steps kept for the in-step times (the latest; each holds a time per call).
MAX_CALL_PASSES = 200
#: Call-timed steps after a continuous measurement: at least this many.
MIN_CALL_PASSES = 5


class ForeignStepFile(StepFileError):
    """A step file captured with another spec than the one given (invalid input, exit 2)."""

    def render(self) -> str:
        return f"{self.source}: {self.problems[0].message}"


class StepNotRun(Exception):
    """A step replay that cannot be measured (no call of it ran); the message says why."""


def find_step_file(spec_path: Optional[Path], step_file: Optional[Path]) -> Path:
    if spec_path is None and step_file is None:
        raise StepFileError("--replay-step", [Problem((), "a spec given as a dict has no "
                                                      "step file beside it: name one with "
                                                      "--step FILE (step_file=)")])
    path = Path(step_file) if step_file is not None else step_path(Path(spec_path))
    if not path.exists():
        raise StepFileError(str(path), [Problem((), "no step file: capture writes it beside "
                                                "the spec (NAME.step.json); name another "
                                                "with --step FILE")])
    return path


def _name(spec_path: Path) -> str:
    return printable(spec_path, 300)


def check_step_spec(path: Path, step: Dict[str, Any], spec_path: Optional[Path],
                    digest: Optional[str], explicit: bool) -> Dict[str, bool]:
    """Whether the step file at ``path`` was captured with the spec given (``spec_path``, whose
    bytes hash to ``digest``; None: a spec given as a dict), said once, before anything runs.

    The step file records the spec's file name (``spec``) and the sha256 of its bytes
    (``spec_sha256``). The same hash: the same spec, whatever its name now. Another name (and
    another hash): a step file of another spec, *foreign*: refused (``StepFileError``, exit 2,
    naming both files) unless ``explicit`` (``--step FILE`` named it), then warned. The same
    name and another hash: the spec changed since the capture, *stale*: warned. No hash (a
    step file written before it was recorded): it cannot be told whether it is current,
    warned. The marks for the step's record: ``{"foreign": True}``, ``{"stale": True}`` or
    ``{}``."""
    recorded_name, recorded_hash = step.get("spec"), step.get("spec_sha256")
    captured = (f"captured with the spec {short(recorded_name, 300)}"
                if recorded_name is not None else "naming no spec")
    if spec_path is None:
        log.warning("%s: the spec was given as a dict, so whether this step file (%s) was "
                    "captured with it cannot be told", printable(path, 300), captured)
        return {}
    if recorded_hash is not None and recorded_hash == digest:
        return {}
    given = _name(spec_path)
    if recorded_name is not None and recorded_name != spec_path.name:
        if not explicit:
            raise ForeignStepFile(str(path), [Problem(("spec",), (
                f"this step file was {captured}, not with {given} (the spec given): it "
                f"belongs to another spec; name it with --step {printable(path, 300)} to "
                "replay it against this spec anyway"))])
        log.warning("%s: this step file was %s, not with %s (the spec given): replaying it "
                    "anyway (--step names it), its calls matched to this spec's runs by key",
                    printable(path, 300), captured, given)
        return {"foreign": True}
    if recorded_hash is None:
        log.warning("%s: the step file records no spec_sha256 (it was written before step "
                    "files did), so whether it is current with %s cannot be told; capture "
                    "again to have it checked", printable(path, 300), given)
        return {}
    log.warning("%s is stale: %s changed since the capture (sha256 %s..., the step file "
                "records %s...): its calls replay as captured against the spec as it is now, "
                "and the step's record says stale", printable(path, 300), given,
                (digest or "?")[:12], recorded_hash[:12])
    return {"stale": True}


def planned_runs(step: Dict[str, Any], spec, iterators, device: str, source: str,
                 job: Any = None):
    """run key -> ``PlannedRun`` for every run the step names; every key must be in the spec
    (a job's: each as the step's rank makes it, ``plan.job``)."""
    wanted = {entry["run"] for entry in step["calls"]}
    runs = {}
    for run in plan_runs(spec, iterators, device):
        if run.key in wanted:
            mine = job.mine(run) if job is not None else run
            if mine is not None:
                runs[run.key] = mine
    problems = [Problem(("calls", index, "run"), f"{entry['run']!r} is no run of the spec")
                for index, entry in enumerate(step["calls"]) if entry["run"] not in runs]
    if problems:
        raise StepFileError(source, problems[:20])
    return runs


def load_step(spec_path: Optional[Path], step_file: Optional[str], spec, iterators,
              device: str, job: Any = None) -> Tuple[Path, Dict[str, Any],
                                                     Dict[str, PlannedRun]]:
    """The step file found, read and checked against the spec: (its path, its content, the
    planned run of every key it names). A job's rank (``job``: ``plan.job.JobPlan``) gets its
    own step of a version-2 file, and a world size other than the file's is refused.
    ``StepFileError`` (invalid input) names the file and entry."""
    path = find_step_file(spec_path, Path(step_file) if step_file is not None else None)
    data = read_step_file(path)
    rank = job.job_rank.rank if job is not None else 0
    world = job.job_rank.world_size if job is not None else 1
    written = data.get("world_size", 1)
    if written != world:
        raise StepFileError(str(path), [Problem(("world_size",), (
            f"the step is a job of {written} ranks; this run has {world}: start it with "
            f"torchrun --nproc_per_node {written}") if written != 1 else (
            f"the step is one rank's; this run is a job of {world} ranks"))])
    step = rank_step(data, rank)
    return path, step, planned_runs(step, spec, iterators, device, str(path), job)


def step_run(path: Path, step: Dict[str, Any],
             marks: Optional[Dict[str, bool]] = None) -> PlannedRun:
    """The step replay's planned run: its callable is the step in ``path``; ``marks``
    (``check_step_spec``) travel with it into the step's record (``spec_marks``)."""
    config_index, build_id, input_id = STEP_ID.split("|")
    return PlannedRun(STEP_OP, -1, int(config_index), build_id, None, input_id,
                      {"step_file": str(path), "calls": len(step["calls"]), **(marks or {})},
                      step=str(path))


def spec_marks(run: PlannedRun) -> Dict[str, bool]:
    """The marks ``check_step_spec`` gave the step run (``stale``, ``foreign``), for its
    record's ``step``."""
    return {key: True for key in ("stale", "foreign") if run.input.get(key) is True}


def is_step(run: PlannedRun) -> bool:
    return run.step is not None


# -- the measurement -------------------------------------------------------------------------

def measure_step(replay, measurer, label: Tuple[str, str] = (STEP_OP, STEP_ID)):
    """(the step's measurement, the replay's details): see the module's doc."""
    replay.checked_pass()
    if all(call.failed is not None for call in replay.calls):
        first = next((c.failed for c in replay.calls if c.failed), "no calls")
        raise StepNotRun(f"no call of the step ran ({len(replay.calls)} calls; the first "
                         f"failure: {first})")
    protocol: Protocol = measurer.protocol
    if replay.wants_gaps:  # the replay's own host step, then the original's gaps fitted to it
        replay.fit_host_gaps(host_step_us(replay, measurer.device))
        if replay.scheduled:
            _say_long_waits(replay.gap_fit, protocol)
    passes: collections.deque = collections.deque(maxlen=MAX_CALL_PASSES)
    count = len(replay.calls)
    comms: collections.deque = collections.deque(maxlen=MAX_CALL_PASSES)
    collectives = any(call.collective for call in replay.calls)
    # a job's ranks (``measure.ranks``) start each call-timed step together too
    together = measurer.device.clock.barrier if hasattr(measurer.device.clock, "agree") \
        else None

    def call_timed() -> None:  # untimed by the step's clock: a clock around every call
        times = [0] * count
        starts = array.array("q", bytes(8 * count))  # where each call began (the timeline)
        if together is not None:
            together()
        if collectives:
            replay.begin_comm_pass()
        replay.run_step_timed(times, starts)
        passes.append((times, starts))
        if collectives:
            comms.append(replay.end_comm_pass(times))

    discrete = protocol.exec_mode is ExecMode.DISCRETE
    result = measurer.measure(replay.step_callable(), call_timed if discrete else None,
                              "step", label)
    measured = result.iterations or 0
    if discrete:  # the call-timed steps of the measured phase: the last ones
        kept = list(passes)[-max(1, min(measured, len(passes))):] if passes else []
    else:
        for _ in range(max(MIN_CALL_PASSES, min(measured, MAX_CALL_PASSES))):
            call_timed()
        kept = list(passes)
    out = details(replay, [times for times, _ in kept], protocol)
    out["timeline"] = build_timeline(
        [call.run_key for call in replay.calls], [call.failed is not None for call in
                                                  replay.calls], kept,
        MEASURED if getattr(replay.clock, "name", "") == "host" else PACKED)
    if collectives:
        out.update(communication(replay, list(comms)[-len(kept):] if kept else []))
    return result, out


def host_step_us(replay, device) -> float:
    """The replay's own host step without host gaps, µs: the median of ``GAP_FIT_STEPS``
    steps measured by the one ``Measurer`` on the host's clock (to the last call's return:
    on a device, its launches), the device drained before each."""
    from param_compute.measure.devices import Device
    from param_compute.measure.measurer import Measurer
    from param_compute.measure.timing import HostClock

    result = Measurer(Protocol(warmup=0, iteration=GAP_FIT_STEPS), Device("host", HostClock()),
                      num_threads=None).measure(replay.run_step, replay.clock.synchronize,
                                                "host_step")
    replay.clock.synchronize()
    return result.stats()["median"] * 1e3


def communication(replay, passes: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A job's step: each collective config's communication time in the step (``comm_us``:
    each of its calls' median over the call-timed steps, issue to completion, averaged over
    its calls: the statistic the capture gives the original, each call's median over the
    trace's steps; a median of per-step means would not be, where the times are skewed),
    beside the original's (the step file's ``comm_us``), and the step's totals
    (``communication``: the collectives' time, and the part not hidden behind compute, the
    time spent waiting on them), each per step, ms."""
    per_config: Dict[str, List[int]] = {}
    for index, call in enumerate(replay.calls):
        if call.collective and call.failed is None:
            per_config.setdefault(call.run_key, []).append(index)
    originals = [entry.get("comm_us") for entry in replay.step["calls"]]
    configs: Dict[str, Dict[str, Any]] = {}
    for key, indices in per_config.items():
        medians = []
        for index in indices:
            times = [p["per_call"][index] / 1e3 for p in passes
                     if p and index in p["per_call"]]
            if times:
                medians.append(median(times))
        row: Dict[str, Any] = {"comm_us": round(sum(medians) / len(medians), 3)
                               if len(medians) == len(indices) else None}
        known = [originals[i] for i in indices if originals[i] is not None]
        if len(known) == len(indices):
            row["original_comm_us"] = round(sum(known) / len(known), 3)
        configs[key] = row
    totals = [sum(p["per_call"].values()) / 1e6 for p in passes if p]
    exposed = [p["exposed_ns"] / 1e6 for p in passes if p]
    original = [c for c in originals if c is not None]
    return {"collectives": configs, "communication": {
        "calls": sum(len(v) for v in per_config.values()),
        "comm_ms": round(median(totals), 4) if totals else None,
        "exposed_ms": round(median(exposed), 4) if exposed else None,
        "original_comm_ms": round(sum(original) / 1e3, 4) if original else None,
        "how": "per call-timed step: each collective from its issue until its work completed "
               "(the work's future), the exposed part the time spent waiting on them (and "
               "synchronous collectives whole); medians over the call-timed steps"}}


def details(replay, passes: List[List[int]], protocol: Protocol) -> Dict[str, Any]:
    """What the step record says besides its times: the replay's dataflow and failures, each
    config's in-step time per call (and page faults), the host gaps kept."""
    host = getattr(replay.clock, "name", "") == "host"
    per_config: Dict[str, List[int]] = {}
    for index, call in enumerate(replay.calls):
        if call.failed is None:
            per_config.setdefault(call.run_key, []).append(index)
    # Page faults per call, on the host: untimed passes after the timed ones (the counter's
    # system calls would otherwise sit between the timed calls).
    faults = replay.count_faults(FAULT_PASSES) if host else None
    originals = [entry.get("faults") for entry in replay.step["calls"]]
    original_us = [entry.get("original_us") for entry in replay.step["calls"]]
    configs = {}
    for key, indices in per_config.items():
        per_pass = [sum(times[i] for i in indices) / len(indices) / 1e3 for times in passes]
        configs[key] = {"in_step_us": round(median(per_pass), 3) if per_pass else None,
                        "calls": len(indices)}
        if faults is not None:
            configs[key]["faults"] = round(sum(faults[i] for i in indices) / len(indices), 1)
        known = [originals[i] for i in indices if originals[i] is not None]
        if len(known) == len(indices):
            configs[key]["original_faults"] = round(sum(known) / len(known), 1)
        times = [original_us[i] for i in indices if original_us[i] is not None]
        if len(times) == len(indices):  # the ledger's original where the run has no record
            configs[key]["original_us"] = round(sum(times) / len(times), 3)
    failed = [{"call": i, "run": c.run_key, "error": c.failed}
              for i, c in enumerate(replay.calls) if c.failed is not None]
    out = {"calls": len(replay.calls), "replayed_calls": len(replay.calls) - len(failed),
           "held_outputs": replay.held, "held_past_step": len(replay.carried),
           "externals": len(replay.externals),
           "fed_inputs": sum(len(c.fills) for c in replay.calls),
           "dataflow_mismatches": replay.mismatch_count, "mismatch_examples": replay.mismatches,
           "failed_calls": len(failed), "failures": failed[:20],
           "call_timed_steps": len(passes),
           "per_call_clock": "host perf_counter_ns around each call" if host
           else f"{getattr(replay.clock, 'name', 'device')} stamps around each call, a spin "
                "kernel before each (launch cover)",
           "per_call_sum_ms": [round(sum(times) / 1e6, 4) for times in passes],
           "faults_counted": f"minor page faults per call, median of {FAULT_PASSES} untimed "
                             "steps" if host else None,
           "host_gaps": host_gaps(replay, protocol), "configs": configs}
    graphs = graph_details(replay)
    if graphs:
        out["graphs"] = graphs
    for key in ("real_step_us", "original", "rank", "world_size"):
        if replay.step.get(key) is not None:
            out[key] = replay.step[key]
    return out


def graph_details(replay) -> Optional[Dict[str, Any]]:
    """How the step's captured graphs (``graph::NAME`` calls of compiled regions) were
    replayed: compiled with Inductor (each one's compile time, kept out of the step's) or
    eagerly (``--eager-regions``); None for a step without graphs."""
    compiled = {op.name: round(op.compile_total_ms, 1)
                for op in replay.operators() if hasattr(op, "compile_total_ms")}
    if not compiled:
        return None
    eager = bool(getattr(replay.options, "eager_regions", False))
    calls = sum(1 for call in replay.calls if call.run_key.startswith("graph::"))
    out = {"count": len(compiled), "calls": calls, "mode": "eager" if eager else "compiled",
           "how": "each region as PyTorch runs it uncompiled (--eager-regions): its eager "
                  "forward and backward ops, or where the capture has none the graph's own "
                  "aten ops one by one" if eager
           else "each graph compiled with Inductor before the step was timed",
           "compile_ms": {} if eager else compiled}
    if eager:
        out["eager_as"] = {op.name: op.eager_form for op in replay.operators()
                           if hasattr(op, "eager_form")}
    return out


def _say_long_waits(fit: Dict[str, Any], protocol: Protocol) -> None:
    """Warn before the timed steps when the host gaps kept make them long (a step file may ask
    for up to 10 minutes a step): how long, and how to replay without them."""
    added_s = fit["added_us"] / 1e6
    steps = max(1, protocol.warmup + protocol.iteration)
    if added_s * steps >= LONG_WAITS_S:
        log.warning("step replay: keeping the original's host gaps waits %.1f s in each "
                    "timed step (its host step %.1f s, the replay's %.3f ms), at least %.0f s "
                    "for the %d steps the protocol starts with; --host-gaps off replays back "
                    "to back", added_s, fit["real_host_us"] / 1e6, fit["replay_host_us"] / 1e3,
                    added_s * steps, steps)


def host_gaps(replay, protocol: Any = None) -> Dict[str, Any]:
    """What the timed steps did about the original's host time between calls."""
    end = replay.step.get("real_host_us")
    if replay.scheduled:
        return {"kept": True, **replay.gap_fit,
                "how": "the original's host step less the replay's own, spread over the "
                       "gaps as captured (gap_us), waited before each call in the timed "
                       "steps"}
    host = getattr(replay.clock, "name", "") == "host"
    mode = replay.options.host_gaps
    why = ("the step file has no host gaps (capture --run writes them, and --from-et with a "
           "Kineto trace's step window)" if end is None
           else "--host-gaps off" if mode == "off"
           else (replay.gap_fit or {}).get("why", "not fitted") if replay.wants_gaps
           else "on the host the time between calls is the framework's own work: "
                "--host-gaps on to keep it" if host
           else "the trace's host step is a profiled one (an upper bound: the profiler's "
                "cost between calls is in it): --host-gaps on to keep it anyway")
    return {"kept": False, **(replay.gap_fit or {"real_host_us": end}), "why": why}


def verify_step(details: Dict[str, Any]) -> Dict[str, Any]:
    """``--verify`` of a step replay: every call ran, and every input an earlier call fed had
    the shape and dtype the call was captured with (no generated stand-in); else ``FAIL``."""
    failed, mismatched = details["failed_calls"], details["dataflow_mismatches"]
    verdict: Dict[str, Any] = {
        "status": "PASS" if not failed and not mismatched else "FAIL",
        "check": "every call of the step replayed, each fed input of its captured shape and "
                 "dtype", "failed_calls": failed, "dataflow_mismatches": mismatched}
    if verdict["status"] == "FAIL":
        verdict["why"] = "; ".join(
            part for part in (f"{failed} call(s) failed" if failed else "",
                              f"{mismatched} fed input(s) replaced by generated data"
                              if mismatched else "") if part)
    return verdict

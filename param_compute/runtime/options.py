"""Run options: one typed object from the command line (or library call) to the engine."""

from __future__ import annotations

import enum
import math
import os
import typing
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

from param_compute.errors import OptionsError
from param_compute.measure.clocks import MAX_SECONDS, TIMERS, measuring_refusal, timer_refusal
from param_compute.runtime.flags import flag
from param_compute.runtime.option_values import host_gaps_refusal, typed_value
from param_compute.measure.protocol import FIELDS as PROTOCOL_FIELDS
from param_compute.measure.protocol import PROTOCOLS, Protocol, resolve
from param_compute.measure.timing import ExecMode


#: ``--num-threads`` may oversubscribe the CPUs this process can use up to this factor.
THREADS_PER_CPU = 4


def max_threads() -> int:
    """The most ``--num-threads`` this machine allows (``THREADS_PER_CPU`` per usable CPU)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return THREADS_PER_CPU * max(cpus, os.cpu_count() or 1)


def _exec_mode(value: Any) -> ExecMode:
    return ExecMode(value)


def _memory(value: str) -> Union[int, str, None]:
    from param_compute.runtime.memory_guard import parse_size

    return "auto" if value == "auto" else parse_size(value)


def _texts(values: Any) -> Tuple[str, ...]:
    return tuple(str(v) for v in values)


#: PARAM's header forms of the pass and the exec mode (``ExecutionPass.FORWARD``, ...).
PARAM_PASS_TYPE = {False: "ExecutionPass.FORWARD", True: "ExecutionPass.BACKWARD"}


def param_exec_mode(mode: str) -> str:
    """``"continuous_events"`` -> ``"OpExecutionMode.CONTINUOUS_EVENTS"``."""
    return f"OpExecutionMode.{str(mode).upper()}"


@dataclass(frozen=True)
class RunOptions:
    """Everything a run, and every process it starts (isolated worker, profiled child), needs.

    A field with a flag (``runtime.flags.flag``) is set from the command line by that flag;
    :meth:`to_json` is the one JSON form (results header, batch files, worker setup)."""

    device: str = flag("-d", "--device", default="cpu",
                       help="cpu, cuda or cuda:N (default cpu)")
    #: The measuring protocol (``measure.protocol``): "auto" (by time and noise) unless a
    #: count is given, then "param" (PARAM's exact counts). The counts and time bounds below
    #: are None until resolved (``__post_init__``): None is "not given".
    protocol: Optional[str] = flag(
        "--protocol", default=None, choices=list(PROTOCOLS),
        help="auto (default without -w/-i): warm up for 10 ms, then at least 5 samples and "
             "more until the median's 95%% interval is within ±2%% or 0.1 s of measuring "
             "(--max-noise, --max-time change those); param: PARAM's -w 1 -i 1 (-w/-i given "
             "imply it)")
    warmup: Optional[int] = flag("-w", "--warmup", default=None, type=int,
                                 help="warm-up iterations (PARAM's counts: default 1)")
    iteration: Optional[int] = flag("-i", "--iteration", default=None, type=int,
                                    help="measured iterations (PARAM's counts: default 1; "
                                         "--protocol auto: at least this many)")
    backward: bool = flag("-b", "--backward", default=False, action="store_true",
                          help="also time the backward pass (gradient creation is not timed)")
    exec_mode: ExecMode = flag(
        "--exec-mode", default=ExecMode.DISCRETE, parse=_exec_mode,
        choices=[m.value for m in ExecMode], cli_default=ExecMode.DISCRETE.value,
        help="discrete (each iteration timed alone), continuous (the loop back to back, "
             "stamped at the boundaries of up to 10 blocks: each block's mean per call is one "
             "value), continuous_events (CUDA: an event pair per iteration, one synchronize)")
    num_threads: int = flag("--num-threads", default=1, type=int,
                            help="torch intra-op threads (default 1, as PARAM)")
    seed: int = flag("--seed", default=0, type=int,
                     help="seed for generated data; same seed, same data (default 0)")
    resume_id: Optional[str] = flag(
        "-r", "--resume-id", default=None,
        help="skip runs before this op_name|id; it and the runs after it run")
    stop_id: Optional[str] = flag(
        "-s", "--stop-id", "--stop_id", default=None,
        help="stop at this op_name|id: it and everything after are skipped")
    only: Tuple[str, ...] = flag(  # the run filters (plan.filters): --only, -k, --input-id
        "--only", default=(), parse=_texts, action="append", metavar="GLOB",
        help="run only operators whose name matches GLOB (torch.mm, torch.nn.*; repeatable)")
    keywords: Tuple[str, ...] = flag(
        "-k", default=(), parse=_texts, action="append", metavar="EXPR",
        help="run only runs whose op, id or config (512x512, bf16) contains EXPR or matches "
             "it as a glob; terms join with and, or, not, parentheses (repeatable: all must "
             "match)")
    input_ids: Tuple[str, ...] = flag(
        "--input-id", default=(), parse=_texts, action="append", metavar="ID",
        help="run only this input id (1, 0_3), run id (0|0|1) or key (op|0|0|1) (repeatable)")
    dry_run: bool = flag("--dry-run", default=False, action="store_true",
                         help="validate and expand only: write the planned runs, allocate "
                              "nothing")
    #: Adaptive iterations: keep measuring until the measured time reaches this many seconds.
    min_time: Optional[float] = flag(
        "--min-time", default=None, type=float, metavar="S",
        help="adaptive: after -i iterations keep measuring until the measured time reaches S "
             "seconds (capped by --max-iteration)")
    max_iteration: int = flag("--max-iteration", default=100_000, type=int,
                              help="cap on measured iterations when measuring by time or noise "
                                   "(--min-time, --max-noise, the default protocol; default "
                                   "100000)")
    #: Time-based warm-up: after the ``warmup`` calls keep warming until this many seconds of
    #: calls have run (with ``min_time``, also until the per-block median stops drifting).
    warmup_time: Optional[float] = flag(
        "--warmup-time", default=None, type=float, metavar="S",
        help="after the -w calls keep warming up until S seconds of calls have run (with "
             "--min-time also until the per-block median settles; --protocol auto: 0.01)")
    #: --max-noise/--max-time (``measure.measurer``); --timer (``measure.clocks.TIMERS``).
    max_noise: Optional[float] = flag(
        "--max-noise", default=None, type=float, metavar="PCT",
        help="keep measuring until the median's 95%% interval is within ±PCT%% of it (at least "
             "--min-time, at most --max-time/--max-iteration); stats say why it stopped "
             "(--protocol auto: 2)")
    max_time: Optional[float] = flag(
        "--max-time", default=None, type=float, metavar="S",
        help="upper bound of --max-noise's measuring, seconds (--protocol auto: 0.1; with "
             "PARAM's counts: 10)")
    timer: str = flag("--timer", default="wall", choices=list(TIMERS),
                      help="wall (default): the device's clock; cpu: the calling thread's CPU "
                           "time (CPU, --num-threads 1): time spent descheduled not counted; "
                           "kernel (CUDA): also the summed kernel time per call")
    discard_disturbed: bool = flag(
        "--discard-disturbed", default=False, action="store_true",
        help="drop samples whose wall time exceeds their thread CPU time by over 10%%")
    canary: bool = flag("--no-canary", default=True, action="store_false",
                        help="no canary workload between configs (measure.canary)")
    keep_samples: int = flag("--keep-samples", default=2000, type=int, metavar="N",
                             help="keep at most N raw times per pass, evenly spread (default "
                                  "2000); the stats come from all")
    #: Check what was timed against eager ("eager") or a float64 eager run ("fp64").
    verify: Optional[str] = flag(
        "--verify", default=None, nargs="?", const="eager", choices=["eager", "fp64"],
        help="check what was timed (compiled, graph-replayed) against an eager call (or, =fp64, "
             "a float64 eager call): outputs and, with -b, gradients; a FAIL exits 1")
    #: A peaks file (FLOP/s per dtype, bytes/s) instead of the calibrated ones in the cache.
    peaks: Optional[str] = flag(
        "--peaks", default=None, metavar="FILE", parse=str,
        help="machine peaks (FLOP/s per dtype, bytes/s) for utilization, instead of those "
             "`python -m param_compute.calibrate` cached for this machine")
    #: Keep the CUDA L2 cache warm between discrete iterations instead of flushing it.
    cuda_l2_cache: bool = flag(
        "--cuda-l2-cache", default=False, parse=lambda value: value == "on",
        choices=["on", "off"], nargs="?", const="on", cli_default="off",
        help="off (default): flush the L2 cache before each discrete iteration; on (or the bare "
             "flag): keep it warm, as PARAM's default")
    #: Count FLOPs and bytes once per config (one extra untimed call per pass).
    throughput: bool = flag("--no-throughput", default=True, action="store_false",
                            help="skip counting FLOPs/bytes (one extra untimed call per pass)")
    pt2_model: bool = flag("--pt2-model", default=False, action="store_true",
                           help="torch.compile each operator call; compile time reported "
                                "separately")
    cuda_graph: bool = flag("--cuda-graph", default=False, action="store_true",
                            help="capture the forward call in a CUDA graph once, replay it per "
                                 "iteration")
    profile: bool = flag("-p", "--profile", default=False, action="store_true",
                         help="run under torch.profiler; write a Chrome trace beside the "
                              "results")
    execution_trace: bool = flag("--et", default=False, action="store_true",
                                 help="write a PyTorch execution trace of the run beside the "
                                      "results")
    #: Stop at the first failed run.
    fail_fast: bool = flag("--fail-fast", default=False, action="store_true",
                           help="stop at the first failed run")
    #: Refuse configs whose tensors are estimated above this many bytes: "auto" (half of the
    #: memory available at start), an int, or None (no limit).
    max_memory: Union[int, str, None] = flag(
        "--max-memory", default="auto", parse=_memory, metavar="SIZE",
        help="refuse configs whose tensors are estimated above SIZE (e.g. 8GB, 512MiB) without "
             "allocating; 'auto' (default): half the memory available at start (the host's, "
             "or less where ulimit -v or a cgroup limit leaves less); 'none': no limit")
    #: The whole plan measured N times, fresh process and seeded order each (runtime.repetitions).
    repetitions: int = flag(
        "--repetitions", default=1, type=int, metavar="N",
        help="measure the whole plan N times, each in a fresh process and a random order "
             "(seeded by --seed); stats give the median of repetition medians")
    discard_throttled: bool = flag(
        "--discard-throttled", default=False, action="store_true",
        help="CUDA with NVML: drop samples taken while the GPU throttled (the record says "
             "how many)")
    #: Run configs in a reusable worker subprocess; ``timeout`` bounds each config (seconds).
    isolate: bool = flag("--isolate", default=False, action="store_true",
                         help="run configs in a worker subprocess (reused while healthy): a "
                              "crash or hang becomes an error record and the run goes on")
    timeout: Optional[float] = flag("--timeout", default=None, type=float, metavar="S",
                                    help="bound each config to S seconds (implies --isolate)")
    #: Configs of operators outside aten and torch (``fbgemm::...``) run in an isolated worker
    #: even without ``isolate``: a custom kernel that crashes becomes an error record.
    isolate_custom: bool = flag(
        "--no-isolate-custom", default=True, action="store_false",
        help="measure operators of custom namespaces (--allow-namespace) in this process "
             "instead of an isolated worker (a crash then ends the whole run)")
    #: Namespaces besides aten whose ``ns::op`` operators the spec may name.
    allow_namespaces: Tuple[str, ...] = flag(
        "--allow-namespace", default=(), parse=_texts, action="append", metavar="NS",
        help="let NS::op operators of the spec run (fbgemm, ...; repeatable): besides aten, a "
             "namespace runs only where the run allows it")
    #: Folders whose ``.py`` files are imported as workload modules, in order.
    workloads_dirs: Tuple[str, ...] = flag(
        "--workloads-dir", default=(), parse=_texts, action="append", type=Path, metavar="DIR",
        help="import every .py in DIR as a workload module (repeatable)")
    #: Put each measured iteration in its own NVTX range (the --ncu/--nsys profiler child only).
    nvtx_iterations: bool = False
    #: Time with a cold cache: "rotate" among copies of the inputs, "flush" a buffer before
    #: each discrete iteration, or "both" (``measure.cold``); None: warm, as PARAM.
    cold: Optional[str] = flag(
        "--cold", default=None, nargs="?", const="rotate", choices=["rotate", "flush", "both"],
        help="time with the inputs out of the cache: rotate (the bare flag) among copies of "
             "each config's inputs exceeding the last-level cache, flush a buffer before each "
             "discrete iteration, or both")
    #: Run with the device and thread count a captured spec records (``__capture__``).
    match_capture: bool = flag(
        "--match-capture", default=False, action="store_true",
        help="run with the device and thread count a captured spec records (__capture__) "
             "instead of -d/--num-threads (a run that differs is warned about; so is one "
             "under other allocator settings, which only the environment can give)")
    #: After the isolated runs, replay the captured step in order (``runtime.step_run``);
    #: ``step_file``: its step file (default ``NAME.step.json`` beside the spec).
    replay_step: bool = flag(
        "--replay-step", default=False, action="store_true",
        help="also replay the captured step as a whole, in order, outputs fed to their "
             "consumers (NAME.step.json beside the spec): one more run, step_replay|0|0|0, "
             "measured by the run's protocol; its record (kind step) gives each config's "
             "in-step time too")
    step_file: Optional[str] = flag("--step", default=None, type=str, metavar="FILE",
                                    help="the step file for --replay-step (implies it); "
                                         "one captured with another spec is replayed only "
                                         "when named here, with a warning")
    #: Keep the original host's time between calls in the step replay's step-timed passes
    #: ("on"), or replay back to back ("off"); "auto": on a device (``runtime.step_gaps``).
    host_gaps: str = flag(
        "--host-gaps", default="auto", choices=["auto", "on", "off"],
        help="--replay-step: keep the original host's time between calls (its host step less "
             "the replay's, waited before the calls where the capture saw it): on a device, "
             "launches then come at the original host's pace. auto (default): on a device, "
             "for an unprofiled host time; off on the host, where that time is the "
             "framework's own work and not the ops' (the ledger shows it)")
    #: Replay the captured graphs of compiled regions (``graph::NAME``) as PyTorch runs them
    #: uncompiled, their aten ops one by one, instead of compiled with Inductor
    #: (``operators.graphs``).
    eager_regions: bool = flag(
        "--eager-regions", default=False, action="store_true",
        help="run each captured torch.compile region (graph::NAME, isolated and in the "
             "step) as PyTorch runs it uncompiled, its aten ops one by one, instead of "
             "compiled with Inductor: beside a run without it, what compilation buys here")

    #: A job (``plan.job``): the backend of its process groups ("auto": gloo on the CPU,
    #: nccl on CUDA) and how long a collective may take before the job ends.
    dist_backend: str = flag(
        "--dist-backend", default="auto", choices=["auto", "gloo", "nccl"],
        help="a job (a spec with collectives or __process_groups__, under torchrun): the "
             "backend of its process groups; auto (default): gloo on the CPU, nccl on CUDA")
    dist_timeout: float = flag(
        "--dist-timeout", default=300.0, type=float, metavar="S",
        help="a job: a collective (or barrier) not complete in S seconds, or a rank gone, "
             "ends every rank with one message naming the rank and call (default 300)")

    def __post_init__(self) -> None:
        # Library callers may pass the mode by name ("continuous").
        object.__setattr__(self, "exec_mode", ExecMode(self.exec_mode))
        # The protocol's counts and bounds where not given (``measure.protocol.resolve``).
        given = {name: getattr(self, name) for name in PROTOCOL_FIELDS}
        for name, value in resolve(self.protocol, given).items():
            object.__setattr__(self, name, value)
        for name in ("allow_namespaces", "workloads_dirs", "only", "keywords",
                     "input_ids"):  # any iterable of names or paths (or one name)
            value = getattr(self, name)
            value = (value,) if isinstance(value, (str, os.PathLike)) else value
            object.__setattr__(self, name, tuple(str(item) for item in value))
        if self.step_file is not None:  # a step file given is a step to replay
            object.__setattr__(self, "replay_step", True)
        if self.timeout is not None:  # a per-config bound needs a process that can be killed
            object.__setattr__(self, "isolate", True)

    def measuring(self) -> Protocol:
        """The protocol every measurement of this run follows (``measure.protocol``)."""
        return Protocol(
            warmup=self.warmup, iteration=self.iteration, warmup_time=self.warmup_time,
            min_time=self.min_time, max_noise=self.max_noise or 0.0, max_time=self.max_time,
            max_iteration=self.max_iteration, min_samples=PROTOCOLS[self.protocol][
                "min_samples"], exec_mode=self.exec_mode, timer=self.timer,
            discard_disturbed=self.discard_disturbed, discard_throttled=self.discard_throttled,
            keep_samples=self.keep_samples, nvtx_iterations=self.nvtx_iterations)

    def check(self) -> "RunOptions":
        if self.warmup < 0:
            raise OptionsError(f"--warmup must be >= 0, got {self.warmup}")
        if self.iteration < 0:  # 0: nothing measured (an empty measurement), as PARAM allows
            raise OptionsError(f"--iteration must be >= 0, got {self.iteration}")
        if self.iteration == 0 and self.min_time > 0:
            raise OptionsError("--min-time extends a measurement: it needs --iteration >= 1")
        if self.repetitions < 1:
            raise OptionsError(f"--repetitions must be >= 1, got {self.repetitions}")
        if self.repetitions > 1 and (self.profile or self.execution_trace):
            raise OptionsError("--repetitions measures in worker processes: -p/--et would "
                               "trace only this one; drop one of them")
        if self.num_threads < 1:
            raise OptionsError(f"--num-threads must be >= 1, got {self.num_threads}")
        most = max_threads()
        if self.num_threads > most:  # OpenMP would try to start them all (a segfault)
            raise OptionsError(f"--num-threads {self.num_threads} is more than this machine "
                               f"allows: at most {most} ({THREADS_PER_CPU} per CPU)")
        for flag_name, seconds in (("--min-time", self.min_time),
                                   ("--warmup-time", self.warmup_time)):
            if not (math.isfinite(seconds) and seconds >= 0):
                raise OptionsError(f"{flag_name} must be >= 0 seconds and finite, got {seconds}")
            if seconds > MAX_SECONDS:
                raise OptionsError(f"{flag_name} {seconds:g} s is more than a week "
                                   f"({MAX_SECONDS:g} s): a typo?")
        why = timer_refusal(self.timer, self.device, self.num_threads, self.discard_disturbed) \
            or measuring_refusal(
            self.max_noise, self.max_time, self.min_time, self.iteration, self.keep_samples) \
            or host_gaps_refusal(self.host_gaps, self.replay_step)
        if why is not None:
            raise OptionsError(why)
        if self.verify not in (None, "eager", "fp64"):
            raise OptionsError(f"--verify must be eager or fp64, got {self.verify!r}")
        if self.max_iteration < self.iteration:
            raise OptionsError(f"--max-iteration ({self.max_iteration}) must be >= --iteration "
                               f"({self.iteration})")
        if self.cuda_graph and not self.device.startswith("cuda"):
            raise OptionsError("--cuda-graph needs a CUDA device (-d cuda)")
        if not (math.isfinite(self.dist_timeout) and 0 < self.dist_timeout <= MAX_SECONDS):
            raise OptionsError(f"--dist-timeout must be a number of seconds from 0 to "
                               f"{MAX_SECONDS:g}, got {self.dist_timeout}")
        if self.timeout is not None and not (math.isfinite(self.timeout) and self.timeout > 0):
            raise OptionsError(f"--timeout must be a finite number of seconds > 0, got "
                               f"{self.timeout}")
        if self.max_memory not in ("auto", None) and not (
                isinstance(self.max_memory, int) and self.max_memory > 0):
            raise OptionsError(f"--max-memory must be a positive size, 'auto' or None, got "
                               f"{self.max_memory!r}")
        if self.cuda_graph and self.backward:
            raise OptionsError("--cuda-graph replays the forward pass only; drop -b/--backward")
        if self.cold not in (None, "rotate", "flush", "both"):
            raise OptionsError(f"--cold must be rotate, flush or both, got {self.cold!r}")
        if self.cold in ("flush", "both") and self.exec_mode is not ExecMode.DISCRETE:
            raise OptionsError(f"--cold {self.cold} flushes before each discrete iteration: "
                               "use --exec-mode discrete, or --cold rotate")
        if self.cold in ("flush", "both") and self.cuda_l2_cache \
                and self.device.startswith("cuda"):
            raise OptionsError(f"--cold {self.cold} flushes the L2 cache: drop --cuda-l2-cache "
                               "on")
        if self.cold in ("rotate", "both") and (self.cuda_graph or self.pt2_model):
            raise OptionsError(f"--cold {self.cold} rotates eager calls over copies of the "
                               "inputs: drop --cuda-graph/--pt2-model, or use --cold flush")
        kind, _, index = self.device.partition(":")
        if kind not in ("cpu", "cuda") or (index and not index.isdigit()) \
                or (kind == "cpu" and index):
            raise OptionsError(f"--device must be cpu, cuda or cuda:N, got {self.device!r}")
        return self

    def to_json(self) -> Dict[str, Any]:
        """The one JSON form (results header, Nsight batch files, isolated worker, profiled
        child): every field by name, plus PARAM readers' keys in PARAM's forms
        (``DERIVED_KEYS``: ``pass_type`` ``"ExecutionPass.FORWARD"``, ``op_exec_mode``,
        ``pt2-model``...); plain JSON values. :meth:`from_json` reads it back to equal options."""
        out = asdict(self)
        out["exec_mode"] = self.exec_mode.value
        out["allow_namespaces"] = list(self.allow_namespaces)
        for name in ("workloads_dirs", "only", "keywords", "input_ids"):
            out[name] = list(getattr(self, name))
        out["pass_type"] = PARAM_PASS_TYPE[self.backward]
        out["op_exec_mode"] = param_exec_mode(self.exec_mode.value)
        out["resume_op_run_id"] = self.resume_id
        out["stop_op_run_id"] = self.stop_id
        out["time_unit"] = "millisecond"
        out["pt2-model"] = self.pt2_model
        out["cuda-graph"] = self.cuda_graph
        return out

    @classmethod
    def from_param(cls, run_options: Dict[str, Any]) -> "RunOptions":
        """PARAM's ``run_options`` dict (``get_benchmark_options()`` and a script's edits, or a
        PARAM batch file's): its enums or their ``str()`` forms, its dashed names. Library
        defaults of PARAM: no FLOP counting, no memory cap."""
        exec_mode = _param_enum(run_options.get("op_exec_mode", "discrete")) or "discrete"
        cuda_l2_cache = run_options.get("cuda_l2_cache", False)
        if isinstance(cuda_l2_cache, str):
            cuda_l2_cache = cuda_l2_cache == "on"
        return cls(
            device=str(run_options.get("device") or "cpu"),
            warmup=int(run_options.get("warmup", 1)),
            iteration=int(run_options.get("iteration", 1)),
            backward=_param_enum(run_options.get("pass_type", "forward")) == "backward",
            exec_mode=exec_mode, cuda_l2_cache=bool(cuda_l2_cache),
            resume_id=run_options.get("resume_op_run_id"),
            stop_id=run_options.get("stop_op_run_id"),
            pt2_model=bool(run_options.get("pt2-model", run_options.get("pt2_model", False))),
            cuda_graph=bool(run_options.get("cuda-graph", run_options.get("cuda_graph", False))),
            throughput=False)  # max_memory: the default guard ("auto"), as run_benchmark

    @classmethod
    def from_json(cls, values: Any, where: str = "run_options",
                  ignore_unknown: bool = False) -> "RunOptions":
        """Options from :meth:`to_json`'s form; a missing field takes its default.
        ``OptionsError`` names the key (``where.key``) and what is wrong; unknown keys are an
        error unless ``ignore_unknown`` (a results header also holds ``config_file``...)."""
        if not isinstance(values, dict):
            raise OptionsError(f"{where}: expected a JSON object, got {type(values).__name__}")
        hints = _field_types()
        given: Dict[str, Any] = {}
        for key, value in values.items():
            if key in DERIVED_KEYS:
                continue
            if key not in hints:
                if ignore_unknown:
                    continue
                raise OptionsError(f"{where}.{key}: not a run option")
            if key == "cuda_l2_cache" and value in ("on", "off"):
                value = value == "on"
            given[key] = typed_value(value, hints[key], f"{where}.{key}")
        try:
            return cls(**given)
        except ValueError as exc:  # an exec mode that is not one
            raise OptionsError(f"{where}: {exc}") from None


#: Keys of :meth:`RunOptions.to_json` that repeat a field under PARAM's name (read back from the
#: field itself).
DERIVED_KEYS = frozenset({"op_exec_mode", "pass_type", "resume_op_run_id", "stop_op_run_id",
                          "time_unit", "pt2-model", "cuda-graph"})


def _param_enum(value: Any) -> Any:
    """PARAM's enums, their values, or their ``str()`` forms (``"ExecutionPass.BACKWARD"``)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, str) and "." in value:
        return value.split(".", 1)[1].lower()
    return value


@lru_cache(maxsize=1)
def _field_types() -> Dict[str, Any]:
    hints = typing.get_type_hints(RunOptions)
    return {f.name: hints[f.name] for f in fields(RunOptions)}

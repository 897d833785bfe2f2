"""Run options: one typed object from the command line (or library call) to the engine."""

from __future__ import annotations

import math
import os
import typing
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from typing import Any, Dict, Optional, Union

from param_compute.errors import OptionsError
from param_compute.runtime.timing import ExecMode


#: ``--num-threads`` may oversubscribe the CPUs this process can use up to this factor.
THREADS_PER_CPU = 4


def max_threads() -> int:
    """The most ``--num-threads`` this machine allows (``THREADS_PER_CPU`` per usable CPU)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return THREADS_PER_CPU * max(cpus, os.cpu_count() or 1)


@dataclass(frozen=True)
class RunOptions:
    device: str = "cpu"
    warmup: int = 1
    iteration: int = 1
    backward: bool = False
    exec_mode: ExecMode = ExecMode.DISCRETE
    num_threads: int = 1
    seed: int = 0
    resume_id: Optional[str] = None
    stop_id: Optional[str] = None
    dry_run: bool = False
    #: Adaptive iterations: keep measuring until the measured time reaches this many seconds.
    min_time: float = 0.0
    max_iteration: int = 100_000
    #: Time-based warm-up: after the ``warmup`` calls keep warming until this many seconds of
    #: calls have run (with ``min_time``, also until the per-block median stops drifting).
    warmup_time: float = 0.0
    #: Check what was timed against eager ("eager") or a float64 eager run ("fp64").
    verify: Optional[str] = None
    #: A peaks file (FLOP/s per dtype, bytes/s) instead of the calibrated ones in the cache.
    peaks: Optional[str] = None
    #: Keep the CUDA L2 cache warm between discrete iterations instead of flushing it.
    cuda_l2_cache: bool = False
    #: Count FLOPs and bytes once per config (one extra untimed call per pass).
    throughput: bool = True
    pt2_model: bool = False
    cuda_graph: bool = False
    profile: bool = False
    execution_trace: bool = False
    #: Stop at the first failed run.
    fail_fast: bool = False
    #: Refuse configs whose tensors are estimated above this many bytes: "auto" (half of the
    #: memory available at start), an int, or None (no limit).
    max_memory: Union[int, str, None] = "auto"
    #: Run configs in a reusable worker subprocess; ``timeout`` bounds each config (seconds).
    isolate: bool = False
    timeout: Optional[float] = None
    #: Put each measured iteration in its own NVTX range (the --ncu/--nsys profiler child only).
    nvtx_iterations: bool = False
    #: Time with a cold cache: "rotate" among copies of the inputs, "flush" a buffer before
    #: each discrete iteration, or "both" (``runtime.cold``); None: warm, as PARAM.
    cold: Optional[str] = None

    def __post_init__(self) -> None:
        # Library callers may pass the mode by name ("continuous").
        object.__setattr__(self, "exec_mode", ExecMode(self.exec_mode))
        if self.timeout is not None:  # a per-config bound needs a process that can be killed
            object.__setattr__(self, "isolate", True)

    def check(self) -> "RunOptions":
        if self.warmup < 0:
            raise OptionsError(f"--warmup must be >= 0, got {self.warmup}")
        if self.iteration < 0:  # 0: nothing measured (an empty measurement), as PARAM allows
            raise OptionsError(f"--iteration must be >= 0, got {self.iteration}")
        if self.iteration == 0 and self.min_time > 0:
            raise OptionsError("--min-time extends a measurement: it needs --iteration >= 1")
        if self.num_threads < 1:
            raise OptionsError(f"--num-threads must be >= 1, got {self.num_threads}")
        most = max_threads()
        if self.num_threads > most:  # OpenMP would try to start them all (a segfault)
            raise OptionsError(f"--num-threads {self.num_threads} is more than this machine "
                               f"allows: at most {most} ({THREADS_PER_CPU} per CPU)")
        if self.min_time < 0:
            raise OptionsError(f"--min-time must be >= 0 seconds, got {self.min_time}")
        if self.warmup_time < 0:
            raise OptionsError(f"--warmup-time must be >= 0 seconds, got {self.warmup_time}")
        if self.verify not in (None, "eager", "fp64"):
            raise OptionsError(f"--verify must be eager or fp64, got {self.verify!r}")
        if self.max_iteration < self.iteration:
            raise OptionsError(f"--max-iteration ({self.max_iteration}) must be >= --iteration "
                               f"({self.iteration})")
        if self.cuda_graph and not self.device.startswith("cuda"):
            raise OptionsError("--cuda-graph needs a CUDA device (-d cuda)")
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
        """The one JSON form (results header, Nsight batch files, isolated worker): every
        field by name, plus PARAM's run_options keys (``DERIVED_KEYS``); plain JSON values.
        :meth:`from_json` reads it back to equal options."""
        out = asdict(self)
        out["exec_mode"] = self.exec_mode.value
        out["op_exec_mode"] = self.exec_mode.value
        out["pass_type"] = "backward" if self.backward else "forward"
        out["resume_op_run_id"] = self.resume_id
        out["stop_op_run_id"] = self.stop_id
        out["cuda_l2_cache"] = "on" if self.cuda_l2_cache else "off"
        return out

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
            given[key] = _typed(value, hints[key], f"{where}.{key}")
        try:
            return cls(**given)
        except ValueError as exc:  # an exec mode that is not one
            raise OptionsError(f"{where}: {exc}") from None


#: Keys of :meth:`RunOptions.to_json` that repeat a field under PARAM's name (read back from the
#: field itself).
DERIVED_KEYS = frozenset({"op_exec_mode", "pass_type", "resume_op_run_id", "stop_op_run_id"})


@lru_cache(maxsize=1)
def _field_types() -> Dict[str, Any]:
    hints = typing.get_type_hints(RunOptions)
    return {f.name: hints[f.name] for f in fields(RunOptions)}


def _typed(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against a field's type (ints accepted for floats, exec modes by name)."""
    allowed = typing.get_args(hint) if typing.get_origin(hint) is Union else (hint,)
    for kind in allowed:
        if kind is type(None) and value is None:
            return None
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, str):
            return value
        if kind is ExecMode and value in {m.value for m in ExecMode}:
            return ExecMode(value)
    names = [("null" if k is type(None) else
              "one of " + ", ".join(m.value for m in ExecMode) if k is ExecMode else
              {bool: "true/false", int: "an integer", float: "a number",
               str: "text"}.get(k, getattr(k, "__name__", str(k)))) for k in allowed]
    return _fail(where, " or ".join(names), value)


def _fail(where: str, expected: str, value: Any) -> Any:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    raise OptionsError(f"{where}: expected {expected}, got {shown}")

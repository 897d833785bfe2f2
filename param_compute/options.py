"""Run options: one typed object from the command line (or library call) to the engine."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Union

from .errors import OptionsError
from .timing import ExecMode


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

    def __post_init__(self) -> None:
        # Library callers may pass the mode by name ("continuous").
        object.__setattr__(self, "exec_mode", ExecMode(self.exec_mode))
        if self.timeout is not None:  # a per-config bound needs a process that can be killed
            object.__setattr__(self, "isolate", True)

    def check(self) -> "RunOptions":
        if self.warmup < 0:
            raise OptionsError(f"--warmup must be >= 0, got {self.warmup}")
        if self.iteration < 1:
            raise OptionsError(f"--iteration must be >= 1, got {self.iteration}")
        if self.num_threads < 1:
            raise OptionsError(f"--num-threads must be >= 1, got {self.num_threads}")
        if self.min_time < 0:
            raise OptionsError(f"--min-time must be >= 0 seconds, got {self.min_time}")
        if self.max_iteration < self.iteration:
            raise OptionsError(f"--max-iteration ({self.max_iteration}) must be >= --iteration "
                               f"({self.iteration})")
        if self.cuda_graph and not self.device.startswith("cuda"):
            raise OptionsError("--cuda-graph needs a CUDA device (-d cuda)")
        if self.timeout is not None and self.timeout <= 0:
            raise OptionsError(f"--timeout must be > 0 seconds, got {self.timeout}")
        if self.max_memory not in ("auto", None) and not (
                isinstance(self.max_memory, int) and self.max_memory > 0):
            raise OptionsError(f"--max-memory must be a positive size, 'auto' or None, got "
                               f"{self.max_memory!r}")
        if self.cuda_graph and self.backward:
            raise OptionsError("--cuda-graph replays the forward pass only; drop -b/--backward")
        kind, _, index = self.device.partition(":")
        if kind not in ("cpu", "cuda") or (index and not index.isdigit()) \
                or (kind == "cpu" and index):
            raise OptionsError(f"--device must be cpu, cuda or cuda:N, got {self.device!r}")
        return self

    def to_json(self) -> Dict[str, Any]:
        """PARAM's run_options keys where they exist, plus ours; plain JSON values only."""
        out = asdict(self)
        out["exec_mode"] = self.exec_mode.value
        out["op_exec_mode"] = self.exec_mode.value
        out["pass_type"] = "backward" if self.backward else "forward"
        out["resume_op_run_id"] = self.resume_id
        out["stop_op_run_id"] = self.stop_id
        out["cuda_l2_cache"] = "on" if self.cuda_l2_cache else "off"
        return out

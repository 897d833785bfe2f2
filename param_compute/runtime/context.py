"""What an executor is given to measure runs: options, the spec, operator and data factories.

The executor (in-process, the isolated worker's, the Nsight child's) needs exactly this, never
the engine that drives it. Torch-free: building one imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Tuple

from param_compute.runtime.options import RunOptions

if TYPE_CHECKING:  # only for annotations
    from param_compute.spec.model import BenchmarkSpec


@dataclass(frozen=True)
class ExecutionContext:
    options: RunOptions
    #: The validated spec: ``spec.operators[run.op_index]`` names the run's data generators.
    spec: "BenchmarkSpec"
    #: Operator name -> a factory making a fresh operator (the toolchain's resolver).
    operator_factory: Callable[[str], Callable[[], Any]]
    #: Data generator name -> a factory making a generator (the toolchain's registry table).
    data_generators: Mapping[str, Callable[[], Any]]
    #: The ``--workloads-dir`` folders the toolchain loaded, for a worker that starts its own.
    workloads_dirs: Tuple[Path, ...] = ()
    #: Config iterator name -> class (a step replay plans the runs its calls name).
    config_iterators: Mapping[str, type] = field(default_factory=dict)
    #: A job's plan for this rank (``plan.job.JobPlan``); None for any other run.
    job: Any = None

"""The toolchain: one set of plugin registries and the operator resolver, and spec loading.

Each toolchain owns its registries (``plugins.loading`` fills them), so two toolchains in one
process, with different ``--workloads-dir`` folders, never see each other's plugins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence, Tuple, Union

from param_compute.errors import SpecError
from param_compute.plan.iterators import BUILTIN_ITERATORS
from param_compute.plugins.loading import load_plugins
from param_compute.plugins.registry import Registries
from param_compute.runtime.context import ExecutionContext
from param_compute.runtime.options import RunOptions
from param_compute.spec.limits import nesting_depth_problem
from param_compute.spec.loader import read_spec_file
from param_compute.spec.model import DEFAULT_DATA_GENERATORS, BenchmarkSpec
from param_compute.spec.semantic import SpecValidator


def _default_data_generator():
    """``PyTorch:DefaultDataGenerator``, imported (with torch) only when data are generated."""
    from param_compute.runtime.data import DefaultDataGenerator

    return DefaultDataGenerator()


@dataclass
class Toolchain:
    """The registries and the operator resolver, ready after start-up."""

    registries: Registries
    resolver: Any

    @classmethod
    def start(cls, workloads_dirs: Sequence[Path] = ()) -> "Toolchain":
        registries = load_plugins(Registries(), list(workloads_dirs), BUILTIN_ITERATORS,
                                  dict.fromkeys(DEFAULT_DATA_GENERATORS, _default_data_generator))
        from param_compute.operators.resolution import OperatorResolver

        return cls(registries, OperatorResolver(registries))

    @property
    def workloads_dirs(self) -> Tuple[Path, ...]:
        """The ``--workloads-dir`` folders loaded, resolved, in order."""
        return tuple(self.registries.workloads_dirs)

    def validate(self, raw: Any, source: str) -> BenchmarkSpec:
        from param_compute.operators.resolution import check_aten_schema

        validator = SpecValidator(source, self.registries, self.resolver, check_aten_schema)
        return validator.validate(raw)

    def load(self, spec: Union[str, Path, dict]) -> BenchmarkSpec:
        """Validate a spec given as a path, or as parsed JSON (a dict; anything else is reported
        as a spec that is not a JSON object)."""
        if isinstance(spec, (str, os.PathLike)):
            return self.validate(read_spec_file(Path(spec)), str(spec))
        source = f"<{type(spec).__name__}>"
        problem = nesting_depth_problem(spec)
        if problem:
            raise SpecError(source, [problem])
        return self.validate(spec, source)

    def context(self, spec: BenchmarkSpec, options: RunOptions) -> ExecutionContext:
        """What an executor needs to measure ``spec``'s runs with ``options``."""
        return ExecutionContext(options, spec, self.resolver.factory,
                                self.registries.data_generators, self.workloads_dirs)

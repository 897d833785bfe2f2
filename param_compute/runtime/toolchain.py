"""The toolchain: one set of plugin registries and the operator resolver, and spec loading.

Each toolchain owns its registries (``plugins.loading`` fills them), so two toolchains in one
process, with different ``--workloads-dir`` folders, never see each other's plugins.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence, Tuple, Union

from param_compute.errors import OptionsError, SpecError
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
    def start(cls, workloads_dirs: Sequence[Path] = (),
              allow_namespaces: Sequence[str] = ()) -> "Toolchain":
        """Plugins of ``workloads_dirs`` loaded; ``ns::op`` names of ``allow_namespaces``
        resolve besides aten's."""
        registries = load_plugins(Registries(), [Path(d) for d in workloads_dirs],
                                  BUILTIN_ITERATORS,
                                  dict.fromkeys(DEFAULT_DATA_GENERATORS, _default_data_generator))
        from param_compute.operators.resolution import OperatorResolver

        resolver = OperatorResolver(registries)
        resolver.allow(allow_namespaces)
        return cls(registries, resolver)

    @classmethod
    def for_options(cls, options: RunOptions) -> "Toolchain":
        """The toolchain a run with ``options`` uses: its plugin folders, its namespaces (the
        same in the main process, an isolated worker and a profiled child)."""
        return cls.start(options.workloads_dirs, options.allow_namespaces)

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

    def complete(self, options: RunOptions) -> RunOptions:
        """``options`` naming this toolchain's plugin folders and namespaces, so a child process
        that rebuilds its toolchain from them (``runtime.child``) has the same one."""
        return dataclasses.replace(
            options, workloads_dirs=tuple(str(d) for d in self.workloads_dirs),
            allow_namespaces=tuple(sorted(self.resolver.allow_namespaces)))

    def context(self, spec: BenchmarkSpec, options: RunOptions) -> ExecutionContext:
        """What an executor needs to measure ``spec``'s runs with ``options`` (completed:
        see :meth:`complete`)."""
        return ExecutionContext(self.complete(options), spec, self.resolver.factory,
                                self.registries.data_generators, self.workloads_dirs)

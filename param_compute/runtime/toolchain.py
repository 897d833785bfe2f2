"""The toolchain: one set of plugin registries and the operator resolver, and spec loading.

Each toolchain owns its registries (``plugins.loading`` fills them), so two toolchains in one
process, with different ``--workloads-dir`` folders, never see each other's plugins.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from functools import partial
from typing import Any, Callable, Optional, Sequence, Tuple, Union

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


def _full_resolver(registries: Registries):
    from param_compute.operators.resolution import OperatorResolver  # imports torch

    return OperatorResolver(registries)


def _check_graph(name: str, graph: Any):
    """``operators.graphs.check_graph``, imported (with torch) only for a spec with graphs."""
    from param_compute.operators.graphs import check_graph

    return check_graph(name, graph)


def _default_data_generator():
    """``PyTorch:DefaultDataGenerator``, imported (with torch) only when data are generated."""
    from param_compute.data.generator import DefaultDataGenerator

    return DefaultDataGenerator()


@dataclass
class Toolchain:
    """The registries and the operator resolver, ready after start-up."""

    registries: Registries
    resolver: Any
    #: Checks an aten schema string of a spec (``operators.resolution.check_aten_schema``).
    check_aten_schema: Optional[Callable[[str, object], Optional[str]]] = None

    @classmethod
    def start(cls, workloads_dirs: Sequence[Path] = (), allow_namespaces: Sequence[str] = (),
              index: Any = None) -> "Toolchain":
        """Plugins of ``workloads_dirs`` loaded; ``ns::op`` names of ``allow_namespaces``
        resolve besides aten's. With an operator-name ``index``
        (``operators.name_index.NameIndex``) the built-in workloads are not loaded and names
        resolve from the index where it knows them: a toolchain that needs no torch to
        validate a spec naming none of the built-in workloads' entries."""
        registries = load_plugins(Registries(), [Path(d) for d in workloads_dirs],
                                  BUILTIN_ITERATORS,
                                  dict.fromkeys(DEFAULT_DATA_GENERATORS, _default_data_generator),
                                  builtin_workloads=index is None)
        if index is not None:
            from param_compute.operators.name_index import IndexedResolver

            resolver = IndexedResolver(registries, index, partial(_full_resolver, registries))
            resolver.allow(allow_namespaces)
            return cls(registries, resolver, resolver.check_aten_schema)
        resolver = _full_resolver(registries)
        resolver.allow(allow_namespaces)
        return cls(registries, resolver)

    @staticmethod
    def bare_registries() -> Registries:
        """The registries of a toolchain without plugins of its own: the built-in iterators
        and data generators and what scripts registered, not the built-in workloads."""
        return load_plugins(Registries(), (), BUILTIN_ITERATORS,
                            dict.fromkeys(DEFAULT_DATA_GENERATORS, _default_data_generator),
                            builtin_workloads=False)

    @classmethod
    def for_options(cls, options: RunOptions, index: Any = None) -> "Toolchain":
        """The toolchain a run with ``options`` uses: its plugin folders, its namespaces (the
        same in the main process, an isolated worker and a profiled child)."""
        for directory in options.workloads_dirs:
            if not Path(directory).is_dir():
                raise OptionsError(f"--workloads-dir {directory}: not a directory")
        return cls.start(options.workloads_dirs, options.allow_namespaces, index)

    @property
    def workloads_dirs(self) -> Tuple[Path, ...]:
        """The ``--workloads-dir`` folders loaded, resolved, in order."""
        return tuple(self.registries.workloads_dirs)

    def validate(self, raw: Any, source: str) -> BenchmarkSpec:
        check = self.check_aten_schema
        if check is None:
            from param_compute.operators.resolution import check_aten_schema as check
        validator = SpecValidator(source, self.registries, self.resolver, check, _check_graph)
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
        factory = self.resolver.factory
        if spec.graphs:  # graph::NAME bound to the spec's own graph, never by name alone
            from param_compute.operators.graphs import graph_factory

            factory = graph_factory(factory, spec.graphs, options.eager_regions)
        return ExecutionContext(self.complete(options), spec, factory,
                                self.registries.data_generators, self.workloads_dirs,
                                self.registries.config_iterators)

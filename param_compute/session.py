"""One benchmark session end to end: load plugins, read and validate a spec, run it.

Shared by the command line (``run_benchmark``) and library use (``param_compute.run``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, List, Optional, Sequence, Union

from .engine import Engine, RecordSink, RunSummary
from .options import RunOptions
from .registry import Registries, load_plugins
from .spec_loader import nesting_depth_problem, read_spec_file
from .errors import SpecError
from .validation import BenchmarkSpec, SpecValidator
from .writers import RecordCollector


@dataclass
class Toolchain:
    """The registries and the operator resolver, ready after start-up."""

    registries: Registries
    resolver: Any

    @classmethod
    def start(cls, workloads_dirs: Sequence[Path] = ()) -> "Toolchain":
        registries = load_plugins(list(workloads_dirs))
        from .resolution import OperatorResolver

        return cls(registries, OperatorResolver(registries))

    def validate(self, raw: Any, source: str) -> BenchmarkSpec:
        from .resolution import check_aten_schema

        return SpecValidator(source, self.registries, self.resolver, check_aten_schema).validate(raw)

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

    def engine(self, spec: BenchmarkSpec, options: RunOptions, sinks: Iterable[RecordSink],
               run_filters: Sequence = ()) -> Engine:
        return Engine(spec, options.check(), self.registries, self.resolver.factory, sinks,
                      run_filters)


def run(spec: Union[str, Path, dict], options: Optional[RunOptions] = None,
        workloads_dirs: Sequence[Path] = (), sinks: Iterable[RecordSink] = (),
        **option_values: Any) -> "LibraryResult":
    """Validate and run a spec in-process; return its records (JSON form) and summary.

    ``spec`` is a spec dict or a path; options come as a ``RunOptions`` or as keyword arguments
    (``warmup=2, iteration=10, backward=True, ...``). Raises ``SpecError`` for an invalid spec.
    """
    toolchain = Toolchain.start(workloads_dirs)
    options = options or RunOptions(**option_values)
    collector = RecordCollector()
    summary = toolchain.engine(toolchain.load(spec), options, [collector, *sinks]).run()
    return LibraryResult(collector.records, summary)


@dataclass
class LibraryResult:
    records: List[dict]
    summary: RunSummary

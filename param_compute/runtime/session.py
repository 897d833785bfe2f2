"""Library use (``param_compute.run``): start a toolchain, validate a spec, run it in-process.

The caller's process is left as found: torch threads and RNG states are restored
(``process_state``) and the toolchain's plugin registries are its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, List, Optional, Sequence, Union

from param_compute.results.sinks.jsonl import RecordCollector
from param_compute.results.sinks.base import RecordSink, RunSummary
from param_compute.runtime.engine import Engine
from param_compute.runtime.options import RunOptions
from param_compute.runtime.process_state import preserved
from param_compute.runtime.toolchain import Toolchain

__all__ = ["LibraryResult", "Toolchain", "run"]


def run(spec: Union[str, Path, dict], options: Optional[RunOptions] = None,
        workloads_dirs: Sequence[Path] = (), sinks: Iterable[RecordSink] = (),
        **option_values: Any) -> "LibraryResult":
    """Validate and run a spec in-process; return its records (JSON form) and summary.

    ``spec`` is a spec dict or a path; options come as a ``RunOptions`` or as keyword arguments
    (``warmup=2, iteration=10, backward=True, ...``); ``workloads_dirs`` are plugin folders for
    this run only. Raises ``SpecError`` for an invalid spec.
    """
    options = (options or RunOptions(**option_values)).check()
    with preserved(import_torch=not options.dry_run):
        toolchain = Toolchain.start(workloads_dirs)
        collector = RecordCollector()
        summary = Engine(toolchain.load(spec), options, toolchain, [collector, *sinks]).run()
    return LibraryResult(collector.records, summary)


@dataclass
class LibraryResult:
    records: List[dict]
    summary: RunSummary

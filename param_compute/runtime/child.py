"""The child side of a run: what an isolated worker and a profiled (``--ncu``/``--nsys``) child
rebuild from what the main run hands them, with one piece of code.

The main run hands over a *setup*: the spec entries the child replays (``spec_entries``), their
source name for messages, and the run options in their one JSON form (``RunOptions.to_json``),
which carry everything the child's toolchain needs (plugin folders, allowed namespaces, seed,
memory cap). :meth:`ChildReplay.start` checks the options, starts the toolchain for them,
validates the spec and opens the executor; a problem there is a :class:`ChildSetupError` whose
message says what is wrong (the parent reports it once). Torch is imported by the executor only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Union

from param_compute.spec.graphs import GRAPHS_KEY
from param_compute.errors import OptionsError, SpecError
from param_compute.plan.runplan import PlannedRun
from param_compute.results.records import RunRecord
from param_compute.runtime.options import RunOptions

_GENERATOR_KEYS = ("build_iterator", "input_iterator", "build_data_generator",
                   "input_data_generator")


class ChildSetupError(Exception):
    """The child could not rebuild its side (bad options, a spec its toolchain rejects)."""


def operator_entry(op, config_index: Optional[int] = None) -> Dict[str, Any]:
    """A validated operator's spec entry as JSON: its iterators and generators, and all its
    configs or only the one at ``config_index``."""
    entry: Dict[str, Any] = {key: getattr(op, key) for key in _GENERATOR_KEYS}
    entry["config"] = (list(op.configs) if config_index is None
                       else [op.configs[config_index]])
    return entry


def spec_entries(spec) -> Dict[str, Any]:
    """Every operator of a validated spec as JSON (what a worker validates again), and the
    graphs its ``graph::NAME`` operators replay (``spec.graphs``)."""
    entries = {op.name: operator_entry(op) for op in spec.operators}
    if getattr(spec, "graphs", None):
        entries[GRAPHS_KEY] = spec.graphs
    return entries


def setup(spec: Dict[str, Any], source: str,
          options: Union[RunOptions, Dict[str, Any]]) -> Dict[str, Any]:
    """What the main run hands a child (JSON); ``options`` as such or in their JSON form."""
    return {"spec": spec, "source": source,
            "options": options.to_json() if isinstance(options, RunOptions) else options}


class ChildReplay:
    """A child's toolchain, validated spec and executor, rebuilt from a :func:`setup`."""

    def __init__(self, toolchain, spec, options: RunOptions, executor):
        self.toolchain = toolchain
        self.spec = spec
        self.options = options
        self.executor = executor

    @classmethod
    def start(cls, given: Dict[str, Any], **overrides: Any) -> "ChildReplay":
        """From a setup; ``overrides`` replace options (``isolate=False`` in a worker)."""
        from param_compute.measure.devices import check_device
        from param_compute.runtime.executor import Executor
        from param_compute.runtime.toolchain import Toolchain

        try:
            options = RunOptions.from_json(given["options"], "options")
            options = dataclasses.replace(options, **overrides).check()
            if not options.dry_run:
                check_device(options.device)
            toolchain = Toolchain.for_options(options)
            spec = toolchain.validate(given["spec"], given["source"])
        except (OptionsError, SpecError) as exc:
            raise ChildSetupError(str(exc)) from None
        return cls(toolchain, spec, options, Executor(toolchain.context(spec, options)))

    def execute(self, run: PlannedRun) -> RunRecord:
        return self.executor.execute(run)

    def close(self) -> None:
        self.executor.close()

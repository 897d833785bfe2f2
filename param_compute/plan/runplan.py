"""The run plan: a validated spec expanded lazily into ``PlannedRun``s, and their count.

Pure Python, no torch: a dry run plans every run without touching a tensor.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, Iterator, NamedTuple, Optional

from param_compute.plan.iterators import DefaultConfigIterator
from param_compute.plan.runkey import format_id, format_key


class PlannedRun(NamedTuple):
    """One concrete run: an operator, its expanded build config and one expanded input config.

    Immutable; a named tuple rather than a frozen dataclass because one is made per run and a
    named tuple is made three times faster (a frozen dataclass sets each field through
    ``object.__setattr__``), which counts at hundreds of thousands of runs.
    """

    op_name: str
    op_index: int
    config_index: int
    build_id: str
    build: Any
    input_id: str
    input: Dict[str, Any]
    #: The step file of a step replay's run (``runtime.step_run``); None for a config's run.
    step: Optional[str] = None

    @property
    def id(self) -> str:
        return format_id(self.config_index, self.build_id, self.input_id)

    @property
    def key(self) -> str:
        """What ``--resume-id``/``--stop-id`` match: ``op_name|id``."""
        return format_key(self.op_name, self.config_index, self.build_id, self.input_id)

    @property
    def build_key(self) -> tuple:
        """Runs with equal build keys share one built operator."""
        return (self.op_index, self.config_index, self.build_id)

    def config(self) -> Dict[str, Any]:
        return {"build": self.build, "input": self.input}


#: ``PlannedRun(*fields)`` made in C: the named tuple's generated ``__new__`` is a Python call,
#: a tenth of planning a run. Every field is given (defaults are the generated ``__new__``'s).
_planned = functools.partial(tuple.__new__, PlannedRun)


def _builds(op, entry: Dict[str, Any], iterators: Dict[str, type], device: str):
    build = entry.get("build")
    if not build:  # absent, null or []: one build with no build args, id 0
        yield "0", build
        return
    for build_id, build_config in _iterate(iterators[op.build_iterator], entry, "build", device):
        yield str(build_id), build_config


def _iterate(iterator: type, configs: Dict[str, Any], key: str, device: str):
    """``iterator(configs, key, device)``; the built-in default iterator's pairs directly
    (the same pairs, without an iterator object per config of a large captured spec)."""
    if iterator is DefaultConfigIterator:
        return enumerate(configs[key])
    return iterator(configs, key, device)


def plan_runs(spec, iterators: Dict[str, type], device: str = "cpu") -> Iterator[PlannedRun]:
    """Lazily expand a validated spec into planned runs, in run order (memory stays flat)."""
    for op_index, op in enumerate(spec.operators):
        input_iterator = iterators[op.input_iterator]
        if input_iterator is DefaultConfigIterator \
                and iterators[op.build_iterator] is DefaultConfigIterator:
            yield from _plan_default(op, op_index)  # a captured spec's operators, made lean
            continue
        name = op.name
        for config_index, entry in enumerate(op.configs):
            for build_id, build_config in _builds(op, entry, iterators, device):
                view = {"build": build_config, "input": entry["input"]}
                for input_id, input_config in _iterate(input_iterator, view, "input", device):
                    yield _planned((name, op_index, config_index, build_id, build_config,
                                    str(input_id), input_config, None))


def _plan_default(op, op_index: int) -> Iterator[PlannedRun]:
    """``plan_runs`` of one operator whose build and input iterators are both the default
    (each listed config is one run): the same runs, without a generator or a view per entry."""
    name = op.name
    for config_index, entry in enumerate(op.configs):
        inputs = entry["input"]
        build = entry.get("build")
        builds = enumerate(build) if build else (("0", build),)
        for build_id, build_config in builds:
            build_id = str(build_id)
            for input_id, input_config in enumerate(inputs):
                yield _planned((name, op_index, config_index, build_id, build_config,
                                str(input_id), input_config, None))


def count_runs(spec, iterators: Dict[str, type]) -> Optional[int]:
    """Total number of planned runs, computed arithmetically; None when an iterator can't tell."""
    total = 0
    for op in spec.operators:
        input_count = getattr(iterators[op.input_iterator], "count", None)
        build_count = getattr(iterators[op.build_iterator], "count", None)
        for entry in op.configs:
            builds = 1 if not entry.get("build") else (build_count and build_count(entry, "build"))
            inputs = input_count and input_count(entry, "input")
            if builds is None or inputs is None:
                return None
            total += builds * inputs
    return total

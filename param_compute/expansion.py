"""Expansion of a validated spec into the run plan: pure Python, lazy, no torch.

Semantics follow PARAM's iterators:

* ``DefaultConfigIterator``: each arg-spec-list as written; its id is its index.
* ``RangeConfigIterator``: each arg-spec-list (a *variant*) expands into the Cartesian product of
  the attributes named in ``__range__`` (shape dims written ``[min, max(, step)]`` and int values
  are inclusive ranges; bool/str/device/dtype values and tensor ``dtype`` lists are choices;
  genericlist/tuple values expand their items recursively) and ``__list__`` (each element of the
  list is one whole choice). Loops nest in document order, the last varying fastest: args in order,
  then kwargs; inside an arg its attributes in key order; inside a shape its dims in order. After
  each combination, ``__copy__`` entries are applied in arg order (then kwargs), copying one
  element between list attributes of the args. The id is ``"{variant}_{combination}"``.
* ``DummyConfigIterator``: one empty config, id ``0``.

Unlike PARAM, macros work in kwargs too and no macro key is left anywhere in an emitted config.
Emitted configs may share unchanged sub-structures with each other and with the spec: treat them
as read-only.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from .interfaces import ConfigIterator

ATTR_RANGE = "__range__"
ATTR_COPY = "__copy__"
ATTR_LIST = "__list__"
MACRO_KEYS = frozenset((ATTR_RANGE, ATTR_COPY, ATTR_LIST))

DEFAULT_ITERATOR = "DefaultConfigIterator"
RANGE_ITERATOR = "RangeConfigIterator"
DUMMY_ITERATOR = "DummyConfigIterator"

Builder = Callable[[tuple], Any]


def full_range(bounds: List[int]) -> range:
    """``[min, max]`` or ``[min, max, step]``, both ends inclusive (PARAM's convention)."""
    low, high = bounds[0], bounds[1]
    step = bounds[2] if len(bounds) > 2 else 1
    return range(low, high + 1, step)


def strip_macros(value: Any) -> Any:
    """A copy of ``value`` without macro keys at any depth (shares nothing mutable with it)."""
    if isinstance(value, dict):
        return {k: strip_macros(v) for k, v in value.items() if k not in MACRO_KEYS}
    if isinstance(value, list):
        return [strip_macros(v) for v in value]
    return value


def has_macros(value: Any) -> bool:
    if isinstance(value, dict):
        return any(k in MACRO_KEYS for k in value) or any(has_macros(v) for v in value.values())
    if isinstance(value, list):
        return any(has_macros(v) for v in value)
    return False


def _constant(value: Any) -> Builder:
    return lambda combo: value


def _fresh_list(value: List[Any]) -> Builder:
    return lambda combo: list(value)


def _new_axis(axes: List[tuple], choices: Any) -> Builder:
    axes.append(tuple(choices))
    return itemgetter(len(axes) - 1)


def _filled(template: Any, slots: List[Tuple[Any, Builder]]) -> Builder:
    """Builder of a fresh copy of ``template`` (a dict or a list) with ``slots`` filled in.

    Most attributes of a data spec, and most dims of a shape, are constant: copying a prepared
    template and assigning only the varying slots costs a fraction of rebuilding every entry,
    which matters at hundreds of thousands of configs. A dict keeps its key order because every
    slot key is already in the template.
    """
    def build(combo: tuple) -> Any:
        out = template.copy()
        for slot, part in slots:
            out[slot] = part(combo)
        return out

    return build


def _compile_shape(dims: List[Any], axes: List[tuple]) -> Builder:
    template = [None if isinstance(d, list) else d for d in dims]
    slots = [(i, _new_axis(axes, full_range(d))) for i, d in enumerate(dims) if isinstance(d, list)]
    return _filled(template, slots)


def _compile_ranged_attr(arg_type: str, key: str, value: Any, axes: List[tuple]) -> Builder:
    if key == "shape":
        return _compile_shape(value, axes)
    if key == "value" and arg_type in ("int", "long"):
        return _new_axis(axes, full_range(value))
    if key == "value" and arg_type in ("genericlist", "tuple"):
        items = [compile_data_spec(item, axes) for item in value]
        return lambda combo: [item(combo) for item in items]
    # bool/str/device/dtype values, tensor dtype (and any other list attribute): choices.
    return _new_axis(axes, value)


def compile_data_spec(spec: Dict[str, Any], axes: List[tuple]) -> Builder:
    """Compile one data spec into a builder of its macro-free form for a combination.

    Every varying attribute appends an axis (a tuple of choices) to ``axes``; the builder reads
    the chosen values from the combination tuple by position. Constant attributes are shared
    by all the configs built (read-only); varying ones and ``__copy__`` targets are fresh.
    """
    ranged = set(spec.get(ATTR_RANGE, ()))
    listed = set(spec.get(ATTR_LIST, ()))
    copy_targets = {attr for entry in spec.get(ATTR_COPY, ()) for attr in entry}
    if not ranged and not listed and not copy_targets:
        return _constant(strip_macros(spec))

    template: Dict[str, Any] = {}
    slots: List[Tuple[str, Builder]] = []
    for key, value in spec.items():
        if key in MACRO_KEYS:
            continue
        template[key] = None
        if key in listed:
            slots.append((key, _new_axis(axes, value)))
        elif key in ranged:
            slots.append((key, _compile_ranged_attr(spec.get("type"), key, value, axes)))
        elif key in copy_targets:
            slots.append((key, _fresh_list(strip_macros(value))))  # __copy__ writes into it
        else:
            template[key] = strip_macros(value)
    return _filled(template, slots)


@dataclass(frozen=True)
class CompiledArgSpecList:
    """An arg-spec-list compiled for fast repeated expansion."""

    axes: Tuple[tuple, ...]
    build: Callable[[tuple], Dict[str, Any]]

    def count(self) -> int:
        total = 1
        for axis in self.axes:
            total *= len(axis)
        return total

    def expand(self) -> Iterator[Dict[str, Any]]:
        build = self.build
        for combo in itertools.product(*self.axes):
            yield build(combo)


def _copy_steps(arg_spec_list: Dict[str, Any]) -> List[Tuple[str, Any, str, int, int, int]]:
    steps = []
    for section in ("args", "kwargs"):
        entries = arg_spec_list.get(section) or ([] if section == "args" else {})
        keyed = enumerate(entries) if section == "args" else entries.items()
        for where, spec in keyed:
            for entry in spec.get(ATTR_COPY, ()) if isinstance(spec, dict) else ():
                for attr, (target, (src_arg, src_elem)) in entry.items():
                    steps.append((section, where, attr, target, src_arg, src_elem))
    return steps


def compile_arg_spec_list(arg_spec_list: Dict[str, Any]) -> CompiledArgSpecList:
    axes: List[tuple] = []
    arg_builders = ([compile_data_spec(a, axes) for a in arg_spec_list["args"]]
                    if "args" in arg_spec_list else None)
    kwarg_builders = ({k: compile_data_spec(v, axes) for k, v in arg_spec_list["kwargs"].items()}
                      if "kwargs" in arg_spec_list else None)
    copies = _copy_steps(arg_spec_list)
    count = arg_spec_list.get("count")  # a captured config's occurrences, for every combination

    def build(combo: tuple) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if arg_builders is not None:
            out["args"] = [b(combo) for b in arg_builders]
        if kwarg_builders is not None:
            out["kwargs"] = {k: b(combo) for k, b in kwarg_builders.items()}
        if count is not None:
            out["count"] = count
        for section, where, attr, target, src_arg, src_elem in copies:
            out[section][where][attr][target] = out["args"][src_arg][attr][src_elem]
        return out

    return CompiledArgSpecList(tuple(axes), build)


# --- config iterators -----------------------------------------------------------------------

class DefaultConfigIterator(ConfigIterator):
    """Each arg-spec-list as written; id = its index."""

    def __init__(self, configs: Dict[str, Any], key: str, device: str):
        super().__init__(configs, key, device)
        self._items = enumerate(configs[key])

    def __next__(self) -> Tuple[Any, Dict[str, Any]]:
        index, config = next(self._items)
        return index, config

    @classmethod
    def count(cls, configs: Dict[str, Any], key: str) -> int:
        return len(configs[key])


class RangeConfigIterator(ConfigIterator):
    """Cartesian expansion of ``__range__``/``__list__`` attributes; id = ``variant_combination``."""

    def __init__(self, configs: Dict[str, Any], key: str, device: str):
        super().__init__(configs, key, device)
        self._generator = self._generate(configs[key])

    @staticmethod
    def _generate(variants: List[Dict[str, Any]]) -> Iterator[Tuple[str, Dict[str, Any]]]:
        for variant, arg_spec_list in enumerate(variants):
            for combination, config in enumerate(compile_arg_spec_list(arg_spec_list).expand()):
                yield f"{variant}_{combination}", config

    def __iter__(self) -> Iterator[Tuple[str, Dict[str, Any]]]:
        # A ``for`` loop then steps the generator itself, without a Python-level ``__next__``
        # call per config; ``next(iterator)`` still works and advances the same generator.
        return self._generator

    def __next__(self) -> Tuple[str, Dict[str, Any]]:
        return next(self._generator)

    @classmethod
    def count(cls, configs: Dict[str, Any], key: str) -> int:
        return sum(compile_arg_spec_list(v).count() for v in configs[key])


class DummyConfigIterator(ConfigIterator):
    """A single empty config (for operators that take no arguments)."""

    def __init__(self, configs: Dict[str, Any], key: str, device: str):
        super().__init__(configs, key, device)
        self._done = False

    def __next__(self) -> Tuple[int, Dict[str, Any]]:
        if self._done:
            raise StopIteration
        self._done = True
        return 0, {"args": [], "kwargs": {}}

    @classmethod
    def count(cls, configs: Dict[str, Any], key: str) -> int:
        return 1


BUILTIN_ITERATORS = {
    DEFAULT_ITERATOR: DefaultConfigIterator,
    RANGE_ITERATOR: RangeConfigIterator,
    DUMMY_ITERATOR: DummyConfigIterator,
}


def register_builtin_iterators() -> None:
    from .registry import REGISTRIES, register_config_iterator

    for name, cls in BUILTIN_ITERATORS.items():
        if name not in REGISTRIES.config_iterators:
            register_config_iterator(name, cls)


# --- the run plan ---------------------------------------------------------------------------

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

    @property
    def id(self) -> str:
        return f"{self.config_index}|{self.build_id}|{self.input_id}"

    @property
    def key(self) -> str:
        """What ``--resume-id``/``--stop-id`` match: ``op_name|id``."""
        return f"{self.op_name}|{self.config_index}|{self.build_id}|{self.input_id}"

    @property
    def build_key(self) -> tuple:
        """Runs with equal build keys share one built operator."""
        return (self.op_index, self.config_index, self.build_id)

    def config(self) -> Dict[str, Any]:
        return {"build": self.build, "input": self.input}


def _builds(op, entry: Dict[str, Any], iterators: Dict[str, type], device: str):
    build = entry.get("build")
    if not build:  # absent, null or []: one build with no build args, id 0
        yield "0", build
        return
    for build_id, build_config in iterators[op.build_iterator](entry, "build", device):
        yield str(build_id), build_config


def plan_runs(spec, iterators: Dict[str, type], device: str = "cpu") -> Iterator[PlannedRun]:
    """Lazily expand a validated spec into planned runs, in run order (memory stays flat)."""
    for op_index, op in enumerate(spec.operators):
        input_iterator = iterators[op.input_iterator]
        for config_index, entry in enumerate(op.configs):
            for build_id, build_config in _builds(op, entry, iterators, device):
                view = {"build": build_config, "input": entry["input"]}
                for input_id, input_config in input_iterator(view, "input", device):
                    yield PlannedRun(op.name, op_index, config_index, build_id, build_config,
                                     str(input_id), input_config)


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

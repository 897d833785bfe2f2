"""The built-in config iterators: how an arg-spec-list expands into concrete configs.

Semantics follow PARAM's iterators:

* ``DefaultConfigIterator``: each arg-spec-list as written; its id is its index.
* ``RangeConfigIterator``: each arg-spec-list (a *variant*) expands into the Cartesian product of
  the attributes named in ``__range__`` and ``__list__`` (``spec.macros`` says how each varies).
  Loops nest in document order, the last varying fastest: args in order, then kwargs; inside an
  arg its attributes in key order; inside a shape its dims in order. After each combination,
  ``__copy__`` entries are applied in arg order (then kwargs), copying one element between list
  attributes of the args. The id is ``"{variant}_{combination}"``.
* ``DummyConfigIterator``: one empty config, id ``0``.

Unlike PARAM, macros work in kwargs too and no macro key is left anywhere in an emitted config.
Emitted configs may share unchanged sub-structures with each other and with the spec: treat them
as read-only. Pure Python, lazy, no torch.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Callable, Dict, Iterator, List, Tuple

from param_compute.plugins.interfaces import ConfigIterator
from param_compute.spec.macros import (ATTR_COPY, ATTR_LIST, ATTR_RANGE, DEFAULT_ITERATOR, DIMS,
                                       DUMMY_ITERATOR, INT_RANGE, ITEMS, MACRO_KEYS,
                                       RANGE_ITERATOR, copy_steps, full_range, is_whole_copy,
                                       strip_macros, variant_count, vary_kind)

Builder = Callable[[tuple], Any]


def _constant(value: Any) -> Builder:
    return lambda combo: value


def _fresh_list(value: List[Any]) -> Builder:
    return lambda combo: list(value)


def _axis(axes: List[tuple], choices: Any) -> int:
    """Append an axis; its place in the combination tuple."""
    axes.append(tuple(choices))
    return len(axes) - 1


def _new_axis(axes: List[tuple], choices: Any) -> Builder:
    return itemgetter(_axis(axes, choices))


def _filled(template: Any, slots: List[Tuple[Any, Builder]]) -> Builder:
    """Builder of a fresh copy of ``template`` (a dict or a list) with ``slots`` filled in.

    Most attributes of a data spec, and most dims of a shape, are constant: copying a prepared
    template and assigning only the varying slots costs a fraction of rebuilding every entry,
    which matters at hundreds of thousands of configs. A dict keeps its key order because every
    slot key is already in the template (a dict display updating one key in place does the same
    for the commonest case, a data spec varying one attribute, without a loop).
    """
    if len(slots) == 1 and isinstance(template, dict):
        [(slot, part)] = slots
        return lambda combo: {**template, slot: part(combo)}

    def build(combo: tuple) -> Any:
        out = template.copy()
        for slot, part in slots:
            out[slot] = part(combo)
        return out

    return build


def _list_of(builders: List[Builder]) -> Builder:
    """Builder of the list of what ``builders`` build, in order (unrolled for up to three: a
    list comprehension's own call costs more than building two data specs)."""
    if len(builders) == 1:
        [first] = builders
        return lambda combo: [first(combo)]
    if len(builders) == 2:
        first, second = builders
        return lambda combo: [first(combo), second(combo)]
    if len(builders) == 3:
        first, second, third = builders
        return lambda combo: [first(combo), second(combo), third(combo)]
    return lambda combo: [build(combo) for build in builders]


def _compile_shape(dims: List[Any], axes: List[tuple]) -> Builder:
    if dims and all(isinstance(d, list) for d in dims):  # every dim ranged: picked at once
        pick = itemgetter(*[_axis(axes, full_range(d)) for d in dims])
        return (lambda combo: [pick(combo)]) if len(dims) == 1 else (
            lambda combo: list(pick(combo)))
    template = [None if isinstance(d, list) else d for d in dims]
    slots = [(i, _new_axis(axes, full_range(d))) for i, d in enumerate(dims) if isinstance(d, list)]
    return _filled(template, slots)


def _compile_varying(kind: str, value: Any, axes: List[tuple]) -> Builder:
    """A builder of one varying attribute (``spec.macros.vary_kind`` says how it varies)."""
    if kind == DIMS:
        return _compile_shape(value, axes)
    if kind == INT_RANGE:
        return _new_axis(axes, full_range(value))
    if kind == ITEMS:
        return _list_of([compile_data_spec(item, axes) for item in value])
    return _new_axis(axes, value)  # listed, or other choices: each element is one


def compile_data_spec(spec: Dict[str, Any], axes: List[tuple]) -> Builder:
    """Compile one data spec into a builder of its macro-free form for a combination.

    Every varying attribute appends an axis (a tuple of choices) to ``axes``; the builder reads
    the chosen values from the combination tuple by position. Constant attributes are shared
    by all the configs built (read-only); varying ones and ``__copy__`` targets are fresh.
    """
    copy_targets = {attr for entry in spec.get(ATTR_COPY, ()) for attr, mapping in entry.items()
                    if not is_whole_copy(mapping)}  # lists a copy writes one element into
    whole_copies = any(is_whole_copy(m) for entry in spec.get(ATTR_COPY, ())
                       for m in entry.values())
    if not spec.get(ATTR_RANGE) and not spec.get(ATTR_LIST) and not copy_targets \
            and not whole_copies:  # a whole-attribute copy writes into a fresh dict
        return _constant(strip_macros(spec))

    template: Dict[str, Any] = {}
    slots: List[Tuple[str, Builder]] = []
    for key, value in spec.items():
        if key in MACRO_KEYS:
            continue
        template[key] = None
        kind = vary_kind(spec, key)
        if kind is not None:
            slots.append((key, _compile_varying(kind, value, axes)))
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
        return map(self.build, itertools.product(*self.axes))


def compile_arg_spec_list(arg_spec_list: Dict[str, Any]) -> CompiledArgSpecList:
    axes: List[tuple] = []
    arg_builders = ([compile_data_spec(a, axes) for a in arg_spec_list["args"]]
                    if "args" in arg_spec_list else None)
    kwarg_builders = ({k: compile_data_spec(v, axes) for k, v in arg_spec_list["kwargs"].items()}
                      if "kwargs" in arg_spec_list else None)
    copies = copy_steps(arg_spec_list)
    count = arg_spec_list.get("count")  # a captured config's occurrences, for every combination
    original_us = arg_spec_list.get("original_us")  # its time in the captured run, likewise
    ranks = arg_spec_list.get("ranks")  # a job's per-rank part (spec.job), likewise
    args = _list_of(arg_builders) if arg_builders is not None else None
    if args is not None and kwarg_builders is None and count is None and original_us is None \
            and ranks is None and not copies:  # a sweep's commonest form: args only
        return CompiledArgSpecList(tuple(axes), lambda combo: {"args": args(combo)})

    def build(combo: tuple) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if args is not None:
            out["args"] = args(combo)
        if kwarg_builders is not None:
            out["kwargs"] = {k: b(combo) for k, b in kwarg_builders.items()}
        if count is not None:
            out["count"] = count
        if original_us is not None:
            out["original_us"] = dict(original_us)
        if ranks is not None:
            out["ranks"] = ranks
        for section, where, attr, target, src_arg, src_elem in copies:
            if target is None:  # the whole attribute, as arg src_arg has it in this combination
                value = out["args"][src_arg][attr]
                out[section][where][attr] = list(value) if isinstance(value, list) else value
            else:
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
    """Cartesian expansion of ``__range__``/``__list__`` attributes.

    The id is ``variant_combination``."""

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
        return sum(variant_count(v) for v in configs[key])


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

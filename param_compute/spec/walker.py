"""The one walk over a spec's data specs: every arg-spec-list and data spec with its JSON path.

A spec is ``{operator: {"config": [{"build": [ASL...], "input": [ASL...]}, ...]}}`` where each
arg-spec-list (ASL) holds data specs in ``args`` (a list) and ``kwargs`` (an object). The walk
goes only through values of the expected types (where a type is wrong there is nothing to walk;
validation reports it), in document order: operators, configs, ``build`` before ``input``, args
before kwargs. Validation, memory estimates, summaries and capture use it rather than each
writing its own loops. Paths are tuples of keys and indices (``errors.format_json_path``).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Tuple

SECTIONS = ("build", "input")

#: Data spec types whose ``value`` is a list of data specs.
CONTAINER_TYPES = ("genericlist", "tuple")

#: How deep ``nested_data_specs`` goes (the spec limits allow less nesting than this).
MAX_NESTED = 64

#: Keys that only one type of data spec reads (on another they would be ignored): its type.
OWNED_KEYS = {"run_device": "device", **dict.fromkeys((
    "value_profile", "distribution", "bags", "values", "pool_window", "stride",
    "storage_offset"), "tensor")}


def misplaced_keys(spec: Dict[str, Any]) -> Iterator[Tuple[str, str, str]]:
    """(key, the type that reads it, a hint) of each key of ``spec`` its type would ignore."""
    return ((key, owner, "drop it" + (" (a tensor without \"device\" is made on the run's "
                                      "device)" if key == "run_device" else ""))
            for key, owner in OWNED_KEYS.items() if key in spec and spec.get("type") != owner)


def config_entries(raw: Any) -> Iterator[Tuple[Dict[str, Any], tuple]]:
    """(config entry, path) of every config entry of every operator."""
    if not isinstance(raw, dict):
        return
    for name, op in raw.items():
        configs = op.get("config") if isinstance(op, dict) else None
        if not isinstance(configs, list):
            continue
        for index, entry in enumerate(configs):
            if isinstance(entry, dict):
                yield entry, (name, "config", index)


def arg_spec_lists(raw: Any) -> Iterator[Tuple[Dict[str, Any], tuple]]:
    """(arg-spec-list, path) of every arg-spec-list, ``build`` ones before ``input`` ones."""
    for entry, path in config_entries(raw):
        for section in SECTIONS:
            lists = entry.get(section)
            if not isinstance(lists, list):
                continue
            for index, asl in enumerate(lists):
                if isinstance(asl, dict):
                    yield asl, path + (section, index)


def asl_data_specs(asl: Dict[str, Any], path: tuple = ()) -> Iterator[Tuple[Any, tuple]]:
    """(data spec, path) of each arg then each kwarg of one arg-spec-list (any JSON value: a
    data spec that is not an object is the schema's to report)."""
    args, kwargs = asl.get("args"), asl.get("kwargs")
    if isinstance(args, list):
        for i, spec in enumerate(args):
            yield spec, path + ("args", i)
    if isinstance(kwargs, dict):
        for key, spec in kwargs.items():
            yield spec, path + ("kwargs", key)


def _items(node: Any, path: tuple) -> Iterator[Tuple[Any, tuple]]:
    if isinstance(node, dict) and node.get("type") in CONTAINER_TYPES:
        items = node.get("value")
        if isinstance(items, list):
            for i, item in enumerate(items):
                yield item, path + ("value", i)


def nested_data_specs(spec: Any, path: tuple = ()) -> Iterator[Tuple[Any, tuple]]:
    """(item, path) of the data specs inside a genericlist/tuple at any depth, in document
    order (not ``spec`` itself). Iterative: a Python dict nested in itself ends the walk at
    ``MAX_NESTED`` levels rather than in a RecursionError."""
    stack = [_items(spec, path)]
    while stack:
        for item, where in stack[-1]:
            yield item, where
            if len(stack) < MAX_NESTED:
                stack.append(_items(item, where))
            break
        else:
            stack.pop()


def data_specs(raw: Any, nested: bool = False) -> Iterator[Tuple[Any, tuple]]:
    """(data spec, path) of every data spec of a spec: the args and kwargs of every
    arg-spec-list, and with ``nested`` also the items of genericlists and tuples, each right
    after the spec that holds it."""
    for asl, path in arg_spec_lists(raw):
        for spec, where in asl_data_specs(asl, path):
            yield spec, where
            if nested and isinstance(spec, dict) and spec.get("type") in CONTAINER_TYPES:
                yield from nested_data_specs(spec, where)

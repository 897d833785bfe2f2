"""What the ``__range__``/``__list__``/``__copy__`` macros mean: which attributes vary, how.

The one statement of the macro arithmetic, shared by validation (which sizes every variant
without expanding it) and by ``plan.iterators`` (which expands it): how many values a range
has, which axes an arg-spec-list creates and in what order, and which lists a ``__copy__`` can
read or write once expanded. Pure Python, no torch.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

ATTR_RANGE = "__range__"
ATTR_COPY = "__copy__"
ATTR_LIST = "__list__"
MACRO_KEYS = frozenset((ATTR_RANGE, ATTR_COPY, ATTR_LIST))

DEFAULT_ITERATOR = "DefaultConfigIterator"
RANGE_ITERATOR = "RangeConfigIterator"
DUMMY_ITERATOR = "DummyConfigIterator"
BUILTIN_ITERATOR_NAMES = (DEFAULT_ITERATOR, RANGE_ITERATOR, DUMMY_ITERATOR)

#: How one attribute of a data spec varies under ``RangeConfigIterator`` (``vary_kind``).
LISTED = "listed"  # named in __list__: each element of the list is one whole choice
DIMS = "dims"  # a ranged shape: each dim written [min, max(, step)] is an axis
INT_RANGE = "int_range"  # a ranged int/long value: [min, max(, step)], inclusive
ITEMS = "items"  # a ranged genericlist/tuple value: its items expand recursively
CHOICES = "choices"  # any other ranged attribute (bool/str/device/dtype values, dtype lists)


def full_range(bounds: List[int]) -> range:
    """``[min, max]`` or ``[min, max, step]``, both ends inclusive (PARAM's convention)."""
    low, high = bounds[0], bounds[1]
    step = bounds[2] if len(bounds) > 2 else 1
    return range(low, high + 1, step)


def range_length(bounds: List[int]) -> int:
    """``len(full_range(bounds))`` by arithmetic: ``len(range)`` overflows past
    ``sys.maxsize``, which int64 bounds reach."""
    step = bounds[2] if len(bounds) > 2 else 1
    return max(0, (bounds[1] - bounds[0]) // step + 1)


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


def vary_kind(spec: Dict[str, Any], key: str) -> Optional[str]:
    """How ``spec[key]`` varies (``LISTED``, ``DIMS``, ``INT_RANGE``, ``ITEMS``, ``CHOICES``),
    or None when it is constant. ``__list__`` wins over ``__range__`` (validation refuses both)."""
    if key in (spec.get(ATTR_LIST) or ()):
        return LISTED
    if key not in (spec.get(ATTR_RANGE) or ()):
        return None
    if key == "shape":
        return DIMS
    if key == "value" and spec.get("type") in ("int", "long"):
        return INT_RANGE
    if key == "value" and spec.get("type") in ("genericlist", "tuple"):
        return ITEMS
    return CHOICES


def data_spec_axis_values(spec: Dict[str, Any],
                          path: tuple = ()) -> Iterator[Tuple[tuple, Union[range, list]]]:
    """(path, values) of each axis one data spec creates, in expansion order (attributes in key
    order, a shape's dims in order, list items in order): a ``range`` for an inclusive
    ``[min, max(, step)]``, else the list of choices."""
    for key, value in spec.items():
        kind = vary_kind(spec, key)
        if kind is None:
            continue
        where = path + (key,)
        if kind == DIMS:
            for i, dim in enumerate(value):
                if isinstance(dim, list):
                    yield where + (i,), full_range(dim)
        elif kind == INT_RANGE:
            yield where, full_range(value)
        elif kind == ITEMS:
            for i, item in enumerate(value):
                yield from data_spec_axis_values(item, where + (i,))
        else:
            yield where, value


def data_spec_axes(spec: Dict[str, Any], path: tuple = ()) -> Iterator[Tuple[tuple, int]]:
    """(path, number of values) of each axis one data spec creates, in expansion order."""
    for where, values in data_spec_axis_values(spec, path):
        # by arithmetic: len(range) overflows past sys.maxsize, which int64 bounds reach
        yield where, (range_length([values.start, values.stop - 1, values.step])
                      if isinstance(values, range) else len(values))


def variant_axes(arg_spec_list: Dict[str, Any], path: tuple = ()) -> Iterator[Tuple[tuple, int]]:
    """(path, number of values) of each axis an arg-spec-list (a variant) expands over: args in
    order, then kwargs; their product is the number of combinations."""
    for i, spec in enumerate(arg_spec_list.get("args") or ()):
        yield from data_spec_axes(spec, path + ("args", i))
    for key, spec in (arg_spec_list.get("kwargs") or {}).items():
        yield from data_spec_axes(spec, path + ("kwargs", key))


#: A variant expanding to more than this many times its literal reading gets a warning.
MISREAD_FACTOR = 10


def literal_count(arg_spec_list: Dict[str, Any]) -> Optional[int]:
    """How many configs a reader who takes every varying list as a list of alternatives taken
    together would expect: the longest list written (``[[64, 256, 64], [128, 256, 128]]`` reads
    as 2 shapes; it expands to 4 x 2). None when nothing in the variant can be misread that way:
    only a shape whose every dim is a range (it looks like a list of shapes) or a ranged int
    value (it looks like a list of choices) can."""
    longest, ambiguous = 1, False
    for section in ("args", "kwargs"):
        entries = arg_spec_list.get(section) or ([] if section == "args" else {})
        for spec in (entries if section == "args" else entries.values()):
            values, misread = _literal_values(spec)
            longest, ambiguous = max(longest, values), ambiguous or misread
    return longest if ambiguous else None


def _literal_values(spec: Any) -> Tuple[int, bool]:
    if not isinstance(spec, dict):
        return 1, False
    longest, ambiguous = 1, False
    for key, value in spec.items():
        kind = vary_kind(spec, key)
        if kind == ITEMS:
            for item in value:
                values, misread = _literal_values(item)
                longest, ambiguous = max(longest, values), ambiguous or misread
        elif kind is not None and isinstance(value, list):
            longest = max(longest, len(value))
            ambiguous = ambiguous or kind == INT_RANGE or (
                kind == DIMS and bool(value) and all(isinstance(d, list) for d in value))
    return longest, ambiguous


def variant_count(arg_spec_list: Dict[str, Any]) -> int:
    """The number of combinations of one variant, by arithmetic (nothing is expanded)."""
    count = 1
    for _, length in variant_axes(arg_spec_list):
        count *= length
    return count


def expanded_lists(spec: Dict[str, Any], attr: str) -> Optional[List[list]]:
    """The lists ``spec[attr]`` can be once expanded (one per alternative), or None if in some
    combination it is no list (a ranged int value or dtype is one value; so is a listed scalar).
    A ranged shape keeps its length; so does a ranged genericlist/tuple value."""
    value = spec.get(attr)
    kind = vary_kind(spec, attr)
    if kind == LISTED:
        forms = value if isinstance(value, list) else []
        return forms if forms and all(isinstance(form, list) for form in forms) else None
    if kind in (INT_RANGE, CHOICES):
        return None
    return [value] if isinstance(value, list) else None


def is_whole_copy(mapping: Any) -> bool:
    """``{"dtype": 0}``: a copy of a whole attribute from arg 0 (else one list element,
    ``{"shape": [target, [arg, element]]}``)."""
    return isinstance(mapping, int) and not isinstance(mapping, bool)


def copy_steps(arg_spec_list: Dict[str, Any]) -> List[Tuple[str, Any, str, Optional[int], int,
                                                            Optional[int]]]:
    """Every ``__copy__`` of an arg-spec-list as (section, arg index or kwarg name, attribute,
    target index, source arg index, source element index), in the order they apply; a copy of
    a whole attribute (``{"dtype": 0}``) has None for both indices."""
    steps: List[Tuple[str, Any, str, Optional[int], int, Optional[int]]] = []
    for section in ("args", "kwargs"):
        entries = arg_spec_list.get(section) or ([] if section == "args" else {})
        keyed = enumerate(entries) if section == "args" else entries.items()
        for where, spec in keyed:
            for entry in spec.get(ATTR_COPY, ()) if isinstance(spec, dict) else ():
                for attr, mapping in entry.items():
                    if is_whole_copy(mapping):
                        steps.append((section, where, attr, None, mapping, None))
                    else:
                        target, (src_arg, src_elem) = mapping
                        steps.append((section, where, attr, target, src_arg, src_elem))
    return steps

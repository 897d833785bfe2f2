"""A fast, exact "nothing is wrong here" check for the common shapes of a spec.

Captured workloads and large sweeps are mostly plain data specs: a tensor with a dtype and a
shape of sizes, an int, a bool, a device. ``scan`` walks a spec once and proves, for each
arg-spec-list whose data specs all have such a plain shape (no macros), that the value limits,
the JSON Schema and the semantic checks would find nothing in it; the full checks then run only
on the rest (``Scan.rest``). It never decides that something is wrong: anything it does not
recognise goes to the full checks, so every problem is found and said by them, with the same
messages whatever this module accepts. ``scan`` returns None when the structure around the data
specs (operators, configs, arg-spec-lists) is not plainly valid: then everything is checked the
full way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from param_compute.dtypes import DIFFERENTIABLE, DTYPE_NAMES, LAYOUT_NAMES, MEMORY_FORMAT_NAMES
from param_compute.spec.reserved import RESERVED_KEYS
from param_compute.errors import Problem
from param_compute.spec.limits import (INT_MAX, INT_MIN, MAX_JSON_VALUES, MAX_KEY_LENGTH,
                                       MAX_NESTING_DEPTH, MAX_OPERATORS, MAX_STRING_LENGTH,
                                       json_value_problems, walk_values)
from param_compute.spec.walker import SECTIONS

OPERATOR_KEYS = frozenset(("build_iterator", "input_iterator", "build_data_generator",
                           "input_data_generator", "config"))
_NAMED_KEYS = ("build_iterator", "input_iterator", "build_data_generator", "input_data_generator")
CONFIG_ENTRY_KEYS = frozenset(SECTIONS + ("target",))
ARG_SPEC_LIST_KEYS = frozenset(("args", "kwargs", "count", "original_us"))
_TARGET_KEYS = frozenset(("metric", "value", "pass"))
_TARGET_METRICS = frozenset(("latency_ms", "tflops", "gbps", "flops_util", "bw_util"))
_ORIGINAL_US_KEYS = frozenset(("cpu", "device", "comm"))
#: Levels of genericlist/tuple nesting checked here (deeper ones take the full checks).
_MAX_NESTED = 8
_DEVICE_KINDS = frozenset(("cpu", "cuda", "meta", "mps", "xpu"))
_NON_FINITE = frozenset(("inf", "-inf", "nan"))
_LAYOUTS = frozenset(LAYOUT_NAMES)
_MEMORY_FORMATS = frozenset(MEMORY_FORMAT_NAMES)


@dataclass
class Scan:
    """What ``scan`` proved: ``plain`` holds the ids of the arg-spec-lists found free of any
    problem; ``rest`` the (arg-spec-list, path) pairs the full checks must see, in order."""

    plain: set = field(default_factory=set)
    rest: List[Tuple[Dict[str, Any], tuple]] = field(default_factory=list)
    values: int = 0  # an upper bound of the values in the plain parts
    keys: Optional[int] = None  # the object keys in the spec, when everything is plain
    #: ids of the ``config`` lists whose every entry is only plain build and input lists
    proved_configs: set = field(default_factory=set)


def _int(value: Any) -> bool:
    return type(value) is int and INT_MIN <= value <= INT_MAX


def _size(value: Any) -> bool:
    return type(value) is int and 0 <= value <= INT_MAX


def _text(value: Any) -> bool:
    """A string any check accepts: bounded, ASCII (so no lone surrogate) and printable."""
    return type(value) is str and len(value) <= MAX_STRING_LENGTH and value.isascii()


def _name(value: Any) -> bool:
    return type(value) is str and len(value) <= MAX_KEY_LENGTH and value.isprintable()


def _number(value: Any) -> bool:
    kind = type(value)
    return (kind is int and INT_MIN <= value <= INT_MAX) or (kind is float
                                                             and math.isfinite(value))


def _device(value: Any) -> bool:
    if type(value) is not str or len(value) > 64:
        return False
    kind, _, index = value.partition(":")
    return kind in _DEVICE_KINDS and (not _ or (index.isascii() and index.isdigit()))


def _shape(dims: Any) -> bool:
    if type(dims) is not list:
        return False
    for dim in dims:
        if type(dim) is not int or not 0 <= dim <= INT_MAX:
            return False
    return True


def _value_range(bounds: Any, integers: bool) -> bool:
    if type(bounds) is not list or len(bounds) != 2:
        return False
    low, high = bounds
    if integers:
        return _int(low) and _int(high) and low <= high
    return _number(low) and _number(high) and low <= high


_TENSOR_KEYS = frozenset(("type", "name", "dtype", "shape", "requires_grad", "stride",
                          "storage_offset", "device"))


def _tensor(spec: Dict[str, Any]) -> int:
    dtype, shape = spec.get("dtype"), spec.get("shape")
    if type(dtype) is not str or dtype not in DTYPE_NAMES or type(shape) is not list:
        return 0
    for dim in shape:  # _shape, inline: this is the hottest loop of a captured spec
        if type(dim) is not int or not 0 <= dim <= INT_MAX:
            return 0
    if len(spec) == 4 and spec.get("requires_grad") is False:
        return 6 + len(shape)  # type, dtype, shape, requires_grad: false
    if len(spec) > 3:
        if not _TENSOR_KEYS.issuperset(spec):
            return 0
        grad = spec.get("requires_grad", False)
        if type(grad) is not bool or (grad and DTYPE_NAMES[dtype] not in DIFFERENTIABLE):
            return 0
        if "stride" in spec:
            stride = spec["stride"]
            if not _shape(stride) or len(stride) != len(shape):
                return 0
        if "storage_offset" in spec and not _size(spec["storage_offset"]):
            return 0
        if "device" in spec and not _device(spec["device"]):
            return 0
        if "name" in spec and not _text(spec["name"]):
            return 0
        return 2 + len(spec) + len(shape) + len(spec.get("stride", ()))
    return 2 + len(spec) + len(shape) if _TENSOR_KEYS.issuperset(spec) else 0


def _scalar(keys: frozenset, check, required: bool = True, ranged: Optional[bool] = None):
    """A checker of a data spec whose ``value`` is one scalar that ``check`` accepts (and, for
    numbers, a ``value_range`` of integers or numbers as ``ranged`` says)."""
    def plain(spec: Dict[str, Any]) -> int:
        if not keys.issuperset(spec):
            return 0
        if "value" in spec:
            if not check(spec["value"]):
                return 0
        elif required and (ranged is None or "value_range" not in spec):
            return 0
        if "value_range" in spec and not _value_range(spec["value_range"], ranged):
            return 0
        if "name" in spec and not _text(spec["name"]):
            return 0
        return 1 + len(spec) + (2 if "value_range" in spec else 0)
    return plain


def _keys(*names: str) -> frozenset:
    return frozenset(("type", "name") + names)


def _float_value(value: Any) -> bool:
    return _number(value) or (type(value) is str and value in _NON_FINITE)


def _device_spec(spec: Dict[str, Any]) -> int:
    if "run_device" in spec and type(spec["run_device"]) is not bool:
        return 0
    return _device_value(spec)


_device_value = _scalar(_keys("value", "run_device"), _device)


def _items(depth: int):
    def plain(spec: Dict[str, Any], keys: Optional[List[int]] = None) -> int:
        items = spec.get("value")
        if type(items) is not list or depth >= _MAX_NESTED or not _LIST_KEYS.issuperset(spec):
            return 0
        if "name" in spec and not _text(spec["name"]):
            return 0
        total = 2 + len(spec)
        for item in items:
            size = data_spec(item, depth + 1, keys)
            if not size:
                return 0
            total += size
        return total
    return plain


_LIST_KEYS = _keys("value")
_CHECKERS = {
    "tensor": _tensor,
    "int": _scalar(_keys("value", "value_range"), _int, ranged=True),
    "long": _scalar(_keys("value", "value_range"), _int, ranged=True),
    "float": _scalar(_keys("value", "value_range"), _float_value, ranged=False),
    "double": _scalar(_keys("value", "value_range"), _float_value, ranged=False),
    "bool": _scalar(_keys("value"), lambda v: type(v) is bool),
    "str": _scalar(_keys("value"), _text, required=False),
    "device": _device_spec,
    "dtype": _scalar(_keys("value"), lambda v: type(v) is str and v in DTYPE_NAMES),
    "layout": _scalar(_keys("value"), lambda v: type(v) is str and v in _LAYOUTS),
    "memory_format": _scalar(_keys("value"), lambda v: type(v) is str and v in _MEMORY_FORMATS),
    "none": _scalar(_keys("value"), lambda v: v is None, required=False),
}
_NESTED = [_items(depth) for depth in range(_MAX_NESTED + 1)]


def data_spec(spec: Any, depth: int = 0, keys: Optional[List[int]] = None) -> int:
    """An upper bound of the values in ``spec`` if it is plain and free of any problem (no
    macros; every value valid for its type); 0 when the full checks must look at it. ``keys``
    (a one-item list) gains the number of object keys in a plain ``spec``."""
    if type(spec) is not dict:
        return 0
    kind = spec.get("type")
    if kind == "genericlist" or kind == "tuple":
        size = _NESTED[depth](spec, keys)
    else:
        checker = _CHECKERS.get(kind) if type(kind) is str else None
        size = checker(spec) if checker else 0
    if size and keys is not None:
        keys[0] += len(spec)
    return size


def _arg_spec_list(asl: Any, keys: List[int]) -> Optional[int]:
    """The values of a plain, problem-free arg-spec-list; 0 if its data specs need the full
    checks; None if the arg-spec-list itself is not plainly valid."""
    if type(asl) is not dict or not ARG_SPEC_LIST_KEYS.issuperset(asl):
        return None
    total = 1 + len(asl)
    keys[0] += len(asl)
    if "count" in asl:
        count = asl["count"]
        if type(count) is not int or not 1 <= count <= INT_MAX:
            return None
    if "original_us" in asl:
        times = asl["original_us"]
        if type(times) is not dict or not _ORIGINAL_US_KEYS.issuperset(times) or not all(
                value is None or (_number(value) and value >= 0) for value in times.values()):
            return None
        total += len(times)
        keys[0] += len(times)
    plain = True
    if "args" in asl:
        args = asl["args"]
        if type(args) is not list:
            return None
        for spec in args:
            if type(spec) is not dict or spec.get("type") != "tensor":
                size = data_spec(spec, 0, keys)
            elif len(spec) == 4 and spec.get("requires_grad") is False \
                    and type(spec.get("shape")) is list and type(spec.get("dtype")) is str \
                    and spec["dtype"] in DTYPE_NAMES:
                # The hottest shape of a captured spec, inline: a plain 4-key tensor.
                shape = spec["shape"]
                for dim in shape:
                    if type(dim) is not int or not 0 <= dim <= INT_MAX:
                        plain = False
                        break
                else:
                    total += 6 + len(shape)
                    keys[0] += 4
                    continue
                break
            else:
                size = _tensor(spec)
                if size:
                    keys[0] += len(spec)
            if not size:
                plain = False
                break
            total += size
    if "kwargs" in asl:
        kwargs = asl["kwargs"]
        if type(kwargs) is not dict:
            return None
        keys[0] += len(kwargs)
        for key, spec in kwargs.items():
            if not _name(key):
                return None
            if plain:
                size = data_spec(spec, 0, keys)
                if not size:
                    plain = False
                total += size
    return total if plain else 0


def _target(target: Any) -> bool:
    """A config entry's performance target, as the schema has it."""
    if type(target) is not dict or not _TARGET_KEYS.issuperset(target):
        return False
    metric, value = target.get("metric"), target.get("value")
    return (type(metric) is str and metric in _TARGET_METRICS and _number(value) and value > 0
            and target.get("pass", "forward") in ("forward", "backward"))


def _operator(op: Any) -> bool:
    if type(op) is not dict or "config" not in op or not OPERATOR_KEYS.issuperset(op):
        return False
    for key in _NAMED_KEYS:
        if key in op and op[key] is not None and not _text(op[key]):
            return False
    configs = op["config"]
    return type(configs) is list and len(configs) > 0


def scan(raw: Any) -> Optional[Scan]:
    """Prove what can be proved problem-free in ``raw`` quickly; None if the structure around
    the data specs is not plainly valid (then every check runs in full)."""
    if type(raw) is not dict or not raw or len(raw) > MAX_OPERATORS:
        return None
    result = Scan()
    plain, rest = result.plain, result.rest
    values = 1
    keys = [len(raw)]
    for name, op in raw.items():
        if name in RESERVED_KEYS:  # not an operator: semantic checks it (spec.reserved)
            continue
        if not _name(name) or not _operator(op):
            return None
        values += 2 + len(op)
        keys[0] += len(op)
        rest_before, targets = len(rest), False
        for index, entry in enumerate(op["config"]):
            if type(entry) is not dict or "input" not in entry \
                    or not CONFIG_ENTRY_KEYS.issuperset(entry):
                return None
            values += 1 + len(entry)
            keys[0] += len(entry)
            if "target" in entry:
                targets = True
                if not _target(entry["target"]):
                    return None
                values += 4
                keys[0] += len(entry["target"])
            for section in SECTIONS:
                lists = entry.get(section)
                if lists is None:
                    if section == "input":
                        return None
                    continue
                if type(lists) is not list or (section == "input" and not lists):
                    return None
                values += len(lists)
                for list_index, asl in enumerate(lists):
                    size = _arg_spec_list(asl, keys)
                    if size is None:
                        return None
                    if size:
                        plain.add(id(asl))
                        values += size
                    else:
                        rest.append((asl, (name, "config", index, section, list_index)))
        if len(rest) == rest_before and not targets:
            result.proved_configs.add(id(op["config"]))
    result.values = values
    result.keys = None if rest else keys[0]
    return result


#: The last spec a reader proved problem-free and its scan, for the validator that comes next
#: (``take_scan``): a large spec is then scanned once. Cleared when taken.
_handed: List[Any] = [None, None]


def value_problems(raw: Any) -> List[Problem]:
    """``limits.json_value_problems(raw)``, at the cost of a ``scan`` where it proves most."""
    return scanned_value_problems(raw, scan(raw))


def take_scan(raw: Any) -> Optional[Scan]:
    """``scan(raw)``, or the scan ``value_problems`` kept for this very object (taken once: a
    spec changed after it was read is scanned again the next time)."""
    kept, result = _handed
    _handed[:] = [None, None]
    return result if kept is raw else scan(raw)


def scanned_value_problems(raw: Any, result: Optional[Scan], keep: bool = False) -> List[Problem]:
    """``limits.json_value_problems(raw)``, walking only what ``result`` (``scan(raw)``) did not
    prove problem-free (nor reserved keys); any problem found is said by the full walk. With
    ``keep``, a spec without problems hands its scan to ``take_scan`` (one spec at a time)."""
    problems = _scanned_value_problems(raw, result)
    if keep:
        _handed[:] = [raw, result] if not problems and result is not None else [None, None]
    return problems


def _scanned_value_problems(raw: Any, result: Optional[Scan]) -> List[Problem]:
    if result is None or result.values > MAX_JSON_VALUES:
        return json_value_problems(raw)
    budget = MAX_JSON_VALUES - result.values
    for asl, path in result.rest + [(raw[k], (k,)) for k in RESERVED_KEYS if k in raw]:
        problems, seen = walk_values(asl, MAX_NESTING_DEPTH - len(path), budget)
        if problems:
            return json_value_problems(raw)
        budget -= seen
    return []

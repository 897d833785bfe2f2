"""Validation of a parsed spec: JSON Schema first, then the checks a schema can't express.

Every problem in the spec is collected (file, JSON path, what is wrong, what would be right) and
raised together as one ``SpecError``. The result is a typed ``BenchmarkSpec``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .dtypes import DTYPE_NAMES, is_differentiable
from .errors import Problem, SpecError, did_you_mean, format_json_path
from .expansion import (ATTR_COPY, ATTR_LIST, ATTR_RANGE, DEFAULT_ITERATOR, MACRO_KEYS,
                        RANGE_ITERATOR, full_range, has_macros)

log = logging.getLogger("param_compute")

DEFAULT_DATA_GENERATOR = "PyTorch:DefaultDataGenerator"
#: The spec format as JSON Schema (draft 2020-12), usable by editors too.
SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "spec.schema.json"
MAX_RUNS_PER_VARIANT = 10**12
#: Expansion holds each range's values in memory: one range (or list) may have at most this many.
MAX_VALUES_PER_AXIS = 10**6


@dataclass(frozen=True)
class OperatorSpec:
    name: str
    build_iterator: str
    input_iterator: str
    build_data_generator: str
    input_data_generator: str
    configs: Tuple[Dict[str, Any], ...]


@dataclass(frozen=True)
class BenchmarkSpec:
    source: str
    operators: Tuple[OperatorSpec, ...]
    warnings: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Resolution:
    """What operator-name resolution says about a name (supplied by the resolver)."""

    ok: bool
    kind: str = ""  # "workload", "function", "inplace", "module", "aten"
    reason: str = ""
    hint: Optional[str] = None


Resolver = Callable[[str], Resolution]
AtenSchemaChecker = Callable[[str, str], Optional[str]]


@lru_cache(maxsize=1)
def load_schema() -> Dict[str, Any]:
    """The JSON Schema shipped at ``param_compute/schema/spec.schema.json``."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _schema_validator():
    import jsonschema

    return jsonschema.Draft202012Validator(load_schema())


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _schema_problems(error) -> List[Problem]:
    """What a JSON Schema error means, said for a person (one problem per unknown key)."""
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = list(error.schema.get("properties", {}))
        extra = [k for k in error.instance if k not in allowed]
        if allowed and extra:
            path = tuple(error.absolute_path)
            return [Problem(path + (key,), f"unknown key {key!r}",
                            did_you_mean(key, allowed) or f"allowed keys: {', '.join(allowed)}")
                    for key in extra]
    return [_schema_problem(error)]


def _schema_problem(error) -> Problem:
    path = tuple(error.absolute_path)
    kind = error.validator
    custom = error.schema.get("x-error") if isinstance(error.schema, dict) else None
    if custom is None and kind in ("anyOf", "oneOf"):
        # A branch's x-error says what was expected (e.g. a shape dim) better than "not valid
        # under any of the given schemas".
        custom = next((branch["x-error"] for branch in error.validator_value
                       if isinstance(branch, dict) and "x-error" in branch), None)
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return Problem(path, f"missing required key {missing!r}")
    if kind == "enum":
        choices = error.validator_value
        return Problem(path, f"unknown {path[-1] if path else 'value'} {_short(error.instance)}",
                       did_you_mean(error.instance, choices)
                       or f"expected one of: {', '.join(map(str, choices))}")
    if kind == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return Problem(path, f"expected {expected}, got {_json_type(error.instance)} "
                             f"{_short(error.instance)}")
    if kind == "minItems":
        return Problem(path, f"must have at least {error.validator_value} item(s)")
    if kind == "maxItems":
        return Problem(path, f"must have at most {error.validator_value} item(s)")
    if kind == "minimum":
        return Problem(path, f"must be >= {error.validator_value}, got {_short(error.instance)}")
    if kind == "minProperties":
        return Problem(path, "must not be empty")
    if custom:
        return Problem(path, f"{custom}, got {_short(error.instance)}")
    return Problem(path, error.message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _dtype_hint(value: Any) -> str:
    if isinstance(value, str):
        # "bfloat" means bfloat16 rather than float: prefer a name the value begins.
        prefixed = [name for name in DTYPE_NAMES if value and name.startswith(value)]
        if prefixed:
            return f"did you mean {prefixed[0]!r}?"
        close = did_you_mean(value, DTYPE_NAMES)
        if close:
            return close
    return f"known: {', '.join(DTYPE_NAMES)}"


def _range_problem(bounds: Any) -> Optional[str]:
    """What is wrong with a ``[min, max(, step)]`` integer range, or None."""
    if not isinstance(bounds, list) or len(bounds) not in (2, 3) or not all(map(_is_int, bounds)):
        return f"a range is [min, max] or [min, max, step] of integers, got {_short(bounds)}"
    if len(bounds) == 3 and bounds[2] <= 0:
        return f"range step must be > 0, got {bounds[2]}"
    if bounds[0] > bounds[1]:
        return f"range min {bounds[0]} is greater than max {bounds[1]}"
    return None


@dataclass
class _Section:
    """Context for checking one arg-spec-list (an entry of ``build`` or ``input``)."""

    iterator: str  # the iterator name expanding this section
    iterator_key: str = "input_iterator"  # the operator key naming that iterator
    args: List[Any] = field(default_factory=list)

    @property
    def expands_macros(self) -> bool:
        return self.iterator == RANGE_ITERATOR

    @property
    def custom(self) -> bool:
        return self.iterator not in (RANGE_ITERATOR, DEFAULT_ITERATOR, "DummyConfigIterator")


class SpecValidator:
    """Checks one parsed spec; ``validate`` returns a BenchmarkSpec or raises SpecError."""

    def __init__(self, source: str, registries, resolve: Resolver,
                 check_aten_schema: Optional[AtenSchemaChecker] = None):
        self.source = source
        self.registries = registries
        self.resolve = resolve
        self.check_aten_schema = check_aten_schema
        self.problems: List[Problem] = []
        self.warnings: List[str] = []

    # -- entry point ------------------------------------------------------------------------
    def validate(self, raw: Any) -> BenchmarkSpec:
        schema_errors = [problem for error in _schema_validator().iter_errors(raw)
                         for problem in _schema_problems(error)]
        self.problems.extend(schema_errors)
        bad_paths = [p.path for p in schema_errors]
        operators = []
        if isinstance(raw, dict):
            for name, op in raw.items():
                operator = self._check_operator(name, op, bad_paths)
                if operator is not None:
                    operators.append(operator)
        if self.problems:
            raise SpecError(self.source, _dedupe(self.problems))
        for warning in self.warnings:
            log.warning("%s: %s", self.source, warning)
        return BenchmarkSpec(self.source, tuple(operators), tuple(self.warnings))

    def problem(self, path: Sequence[Any], message: str, hint: Optional[str] = None) -> None:
        self.problems.append(Problem(tuple(path), message, hint))

    def warn(self, path: Sequence[Any], message: str) -> None:
        self.warnings.append(f"{format_json_path(path)}: {message}")

    # -- operator level ---------------------------------------------------------------------
    def _registered(self, path, kind: str, name: str, table: Dict[str, Any]) -> None:
        if name not in table:
            self.problem(path, f"unknown {kind} {name!r}",
                         did_you_mean(name, table) or f"registered: {', '.join(sorted(table))}")

    def _check_operator(self, name: str, op: Any, bad_paths) -> Optional[OperatorSpec]:
        if not isinstance(op, dict):
            return None
        path = (name,)
        resolution = self.resolve(name)
        if not resolution.ok:
            self.problem(path, resolution.reason, resolution.hint)
        regs = self.registries
        names = {}
        for key, default in (("build_iterator", DEFAULT_ITERATOR),
                             ("input_iterator", DEFAULT_ITERATOR),
                             ("build_data_generator", DEFAULT_DATA_GENERATOR),
                             ("input_data_generator", DEFAULT_DATA_GENERATOR)):
            value = op.get(key, default)
            if not isinstance(value, str):
                continue  # reported by the schema
            table = regs.config_iterators if key.endswith("iterator") else regs.data_generators
            self._registered(path + (key,), key.replace("_", " "), value, table)
            names[key] = value
        if "input_data_generator" not in op:
            self.warn(path, f"no input_data_generator; using {DEFAULT_DATA_GENERATOR} (PARAM "
                            "would skip this operator)")
        configs = op.get("config")
        if not isinstance(configs, list) or len(names) < 4:
            return None
        for index, entry in enumerate(configs):
            entry_path = path + ("config", index)
            if isinstance(entry, dict) and not _under(entry_path, bad_paths):
                self._check_config_entry(entry, entry_path, names, resolution, bad_paths)
        return OperatorSpec(name, names["build_iterator"], names["input_iterator"],
                            names["build_data_generator"], names["input_data_generator"],
                            tuple(configs))

    def _check_config_entry(self, entry, path, names, resolution: Resolution, bad_paths) -> None:
        for section_key in ("build", "input"):
            iterator_key = f"{section_key}_iterator"
            iterator = names[iterator_key]
            lists = entry.get(section_key)
            if not isinstance(lists, list):
                continue
            for index, arg_spec_list in enumerate(lists):
                list_path = path + (section_key, index)
                if _under(list_path, bad_paths) or not isinstance(arg_spec_list, dict):
                    continue
                self._check_arg_spec_list(arg_spec_list, list_path,
                                          _Section(iterator, iterator_key))
        if resolution.ok and resolution.kind == "aten":
            self._check_aten_build(entry, path)

    def _check_aten_build(self, entry, path) -> None:
        op_name = path[0]
        for index, build in enumerate(entry.get("build") or []):
            args = build.get("args") or []
            first = args[0] if args else None
            if not (isinstance(first, dict) and first.get("type") == "str"):
                continue  # no schema string: the op name picks the overload
            schema = first.get("value")
            if not isinstance(schema, str):
                continue  # reported by the str check
            message = (self.check_aten_schema(op_name, schema) if self.check_aten_schema
                       else None)
            if message:
                self.problem(path + ("build", index, "args", 0, "value"), message)

    # -- arg level --------------------------------------------------------------------------
    def _check_arg_spec_list(self, asl: Dict[str, Any], path, section: _Section) -> None:
        known_problems = len(self.problems)
        args = asl.get("args") or []
        section.args = args
        for index, spec in enumerate(args):
            self._check_data_spec(spec, path + ("args", index), section, copy_allowed=True)
        for key, spec in (asl.get("kwargs") or {}).items():
            self._check_data_spec(spec, path + ("kwargs", key), section, copy_allowed=True)
        if section.expands_macros and len(self.problems) == known_problems:
            count = 1
            for where, length in _variant_axes(asl, path):
                if length > MAX_VALUES_PER_AXIS:
                    self.problem(where, f"this range has {length} values, over the "
                                        f"{MAX_VALUES_PER_AXIS} limit", "use a larger step")
                count *= length
            if count == 0:
                self.problem(path, "this variant expands to no runs (an empty range or list)")
            elif count > MAX_RUNS_PER_VARIANT:
                self.problem(path, f"this variant expands to {count} runs, over the "
                                   f"{MAX_RUNS_PER_VARIANT} limit")

    def _check_data_spec(self, spec: Any, path, section: _Section, copy_allowed: bool) -> None:
        if not isinstance(spec, dict):
            return
        arg_type = spec.get("type")
        ranged = spec.get(ATTR_RANGE) or []
        listed = spec.get(ATTR_LIST) or []
        if (ranged or listed or ATTR_COPY in spec) and not section.custom \
                and not section.expands_macros:
            macro = ATTR_RANGE if ranged else ATTR_LIST if listed else ATTR_COPY
            self.problem(path + (macro,), f"{macro} has no effect with {section.iterator}",
                         f'set the operator\'s "{section.iterator_key}" to '
                         f'"{RANGE_ITERATOR}"')
            return
        if section.custom:
            return  # a custom iterator gives macros its own meaning
        self._check_macro_names(spec, path, arg_type, ranged, listed)
        checkers = {"tensor": self._check_tensor, "int": self._check_integer,
                    "long": self._check_integer, "float": self._check_float,
                    "double": self._check_float, "bool": self._check_bool,
                    "str": self._check_str, "device": self._check_device,
                    "dtype": self._check_dtype_value, "genericlist": self._check_list,
                    "tuple": self._check_list}
        checker = checkers.get(arg_type)
        if checker:
            checker(spec, path, section, "value" in ranged or "value" in listed)
        if ATTR_COPY in spec:
            if copy_allowed:
                self._check_copies(spec, path, section)
            else:
                self.problem(path + (ATTR_COPY,), "__copy__ works on args and kwargs, not on "
                                                  "items nested inside a list or tuple")
        if "value_range" in spec:
            low, high = spec["value_range"]
            if _is_number(low) and _is_number(high) and low > high:
                self.problem(path + ("value_range",), f"min {low} is greater than max {high}",
                             "write [min, max]")

    def _check_macro_names(self, spec, path, arg_type, ranged, listed) -> None:
        rangeable = {"tensor": ("shape", "dtype", "requires_grad"),
                     "genericlist": ("value",), "tuple": ("value",), "none": ()}
        allowed = rangeable.get(arg_type, ("value",))
        for macro, names in ((ATTR_RANGE, ranged), (ATTR_LIST, listed)):
            verb = "ranged" if macro == ATTR_RANGE else "listed"
            for i, attr in enumerate(names):
                if attr not in spec:
                    self.problem(path + (macro, i), f"{macro} names {attr!r}, which this "
                                                    f"{arg_type} arg does not have",
                                 did_you_mean(attr, [k for k in spec if k not in MACRO_KEYS]))
                elif macro == ATTR_RANGE and arg_type in ("float", "double"):
                    # PARAM never ranged floats; [0.1, 1.0] could read as a continuous range.
                    self.problem(path + (macro, i), f"{attr!r} of a {arg_type} arg cannot be "
                                                    "ranged",
                                 'list the choices with "__list__": ["value"]')
                elif attr not in allowed:
                    self.problem(path + (macro, i), f"{attr!r} of a {arg_type} arg cannot be "
                                                    f"{verb}",
                                 f"{verb} here: {', '.join(allowed) or 'nothing'}")
                elif macro == ATTR_LIST:
                    if not isinstance(spec[attr], list) or not spec[attr]:
                        self.problem(path + (attr,), f"{attr!r} is named in __list__ so it must "
                                                     "be a non-empty list of choices")
        both = set(ranged) & set(listed)
        for attr in sorted(both):
            self.problem(path + (ATTR_LIST,), f"{attr!r} is in both __range__ and __list__")

    def _choices(self, spec, path, key, varying: bool, check_one: Callable[[Any, tuple], None]):
        value = spec.get(key)
        if varying:
            if not isinstance(value, list) or not value:
                self.problem(path + (key,), f"{key!r} varies, so it must be a non-empty list")
                return
            for i, item in enumerate(value):
                check_one(item, path + (key, i))
        elif key in spec:
            check_one(value, path + (key,))

    def _check_tensor(self, spec, path, section, _value_varies) -> None:
        ranged = set(spec.get(ATTR_RANGE) or []) | set(spec.get(ATTR_LIST) or [])

        def check_dtype(value, where):
            if not isinstance(value, str) or value not in DTYPE_NAMES:
                self.problem(where, f"unknown dtype {_short(value)}", _dtype_hint(value))

        checks = {"dtype": check_dtype,
                  "requires_grad": self._typed(lambda v: isinstance(v, bool), "true or false")}
        for key, check in checks.items():
            if isinstance(spec.get(key), list) and key not in ranged:
                self.problem(path + (key,), f"{key!r} is a list of choices but is not named in "
                                            "__range__ or __list__",
                             f'add "__list__": ["{key}"] (with {RANGE_ITERATOR}) or give one '
                             "value")
            else:
                self._choices(spec, path, key, key in ranged, check)
        dtypes = spec.get("dtype") if isinstance(spec.get("dtype"), list) else [spec.get("dtype")]
        grads = (spec.get("requires_grad") if isinstance(spec.get("requires_grad"), list)
                 else [spec.get("requires_grad")])
        if True in grads:
            for dtype in dtypes:
                if isinstance(dtype, str) and dtype in DTYPE_NAMES and not is_differentiable(dtype):
                    self.problem(path + ("requires_grad",), f"a {dtype} tensor cannot require "
                                 "grad", "only floating and complex tensors can; drop "
                                         "requires_grad or use a floating dtype")
        shape = spec.get("shape")
        if "shape" in (spec.get(ATTR_RANGE) or []) and "shape" in (spec.get(ATTR_LIST) or []):
            pass  # reported as in both; which form the dims should have is unknown
        elif isinstance(shape, list) and "shape" in spec.get(ATTR_LIST, []):
            for i, alternative in enumerate(shape):
                self._check_shape(alternative, path + ("shape", i), spec, False)
        elif isinstance(shape, list):
            self._check_shape(shape, path + ("shape",), spec, "shape" in ranged)

    def _check_shape(self, shape, path, spec, ranged: bool) -> None:
        if not isinstance(shape, list):
            self.problem(path, f"a shape is a list of dims, got {_short(shape)}")
            return
        copy_targets = {entry["shape"][0] for entry in spec.get(ATTR_COPY, [])
                        if isinstance(entry, dict) and isinstance(entry.get("shape"), list)
                        and entry["shape"] and _is_int(entry["shape"][0])}
        for i, dim in enumerate(shape):
            where = path + (i,)
            if isinstance(dim, list):
                if not ranged:
                    self.problem(where, f"dim {_short(dim)} is a range but 'shape' is not in "
                                        "__range__", 'add "__range__": ["shape"]')
                else:
                    message = _range_problem(dim)
                    if message:
                        self.problem(where, message)
                    elif dim[0] < 0:
                        self.problem(where, f"a dim range must not go below 0, got {dim[0]}")
            elif _is_int(dim):
                if dim == -1:
                    if i not in copy_targets:
                        self.problem(where, "placeholder dim -1 is never filled",
                                     f'fill it with "__copy__": [{{"shape": [{i}, [arg, dim]]}}] '
                                     "or give a size")
                elif dim < 0:
                    self.problem(where, f"dims must be >= 0, got {dim}")
            else:
                self.problem(where, f"a dim is an integer or [min, max(, step)], got "
                                    f"{_short(dim)}")

    def _check_integer(self, spec, path, section, varies) -> None:
        if varies and "value" in (spec.get(ATTR_RANGE) or []):
            message = _range_problem(spec.get("value"))
            if message:
                self.problem(path + ("value",), message)
            return

        def check(value, where):
            if _is_int(value):
                return
            if _is_number(value):
                # PARAM's own specs pass 2.5 as an "int" (test_native_basic_ops.json): accepted
                # as written, but never silently.
                self.warn(where, f"{spec['type']} value {value} is not an integer; passed as is")
            else:
                self.problem(where, f"expected an integer, got {_json_type(value)} "
                                    f"{_short(value)}")

        self._choices(spec, path, "value", varies, check)
        value_range = spec.get("value_range")
        if isinstance(value_range, list) and not all(map(_is_int, value_range)):
            self.problem(path + ("value_range",), f"an {spec['type']} value_range is two "
                                                  f"integers, got {_short(value_range)}")

    def _typed(self, predicate, expected: str):
        def check(value, where):
            if not predicate(value):
                self.problem(where, f"expected {expected}, got {_json_type(value)} "
                                    f"{_short(value)}")
        return check

    def _check_float(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies, self._typed(_is_number, "a number"))

    def _check_bool(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies,
                      self._typed(lambda v: isinstance(v, bool), "true or false"))

    def _check_str(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies,
                      self._typed(lambda v: isinstance(v, str), "a string"))

    def _check_device(self, spec, path, section, varies) -> None:
        def check(value, where):
            kind = value.split(":", 1)[0] if isinstance(value, str) else None
            index = value.split(":", 1)[1] if isinstance(value, str) and ":" in value else "0"
            if kind not in ("cpu", "cuda", "meta", "mps", "xpu") or not index.isdigit():
                self.problem(where, f"not a device: {_short(value)}",
                             'write "cpu", "cuda" or "cuda:N"')

        self._choices(spec, path, "value", varies, check)

    def _check_dtype_value(self, spec, path, section, varies) -> None:
        def check(value, where):
            if not isinstance(value, str) or value not in DTYPE_NAMES:
                self.problem(where, f"unknown dtype {_short(value)}", _dtype_hint(value))

        self._choices(spec, path, "value", varies, check)

    def _check_list(self, spec, path, section, varies) -> None:
        items = spec.get("value")
        if not isinstance(items, list):
            return
        if "value" in (spec.get(ATTR_LIST) or []):
            self.problem(path + (ATTR_LIST,), f"a {spec['type']} value is a list of data specs; "
                                              "vary its items with __range__ instead")
            return
        for i, item in enumerate(items):
            if isinstance(item, dict) and has_macros(item) and not varies:
                self.problem(path + ("value", i), f"item has {ATTR_RANGE}/{ATTR_LIST} but the "
                                                  f"{spec['type']} is not ranged",
                             f'add "__range__": ["value"] to the {spec["type"]}')
            self._check_data_spec(item, path + ("value", i), section, copy_allowed=False)

    def _check_copies(self, spec, path, section: _Section) -> None:
        args = section.args
        for i, entry in enumerate(spec.get(ATTR_COPY) or []):
            for attr, mapping in entry.items():
                where = path + (ATTR_COPY, i, attr)
                target, (src_arg, src_elem) = mapping
                own = spec.get(attr)
                if not isinstance(own, list):
                    self.problem(where, f"copies into {attr!r}, which this arg does not have as "
                                        "a list")
                    continue
                if target >= len(own):
                    self.problem(where + (0,), f"target index {target} is out of range: "
                                               f"{attr!r} has {len(own)} elements")
                if src_arg >= len(args):
                    self.problem(where + (1, 0), f"source arg index {src_arg} is out of range: "
                                                 f"there are {len(args)} args")
                    continue
                source = args[src_arg].get(attr) if isinstance(args[src_arg], dict) else None
                if not isinstance(source, list):
                    self.problem(where + (1, 0), f"source arg {src_arg} has no list {attr!r}")
                elif src_elem >= len(source):
                    self.problem(where + (1, 1), f"source element index {src_elem} is out of "
                                                 f"range: arg {src_arg}'s {attr!r} has "
                                                 f"{len(source)} elements")


def _variant_axes(asl: Dict[str, Any], path: tuple):
    """(path, number of values) of each axis ``expansion.compile_arg_spec_list`` would create for
    a checked arg-spec-list, computed without materializing any of them."""
    specs = [(spec, path + ("args", i)) for i, spec in enumerate(asl.get("args") or [])]
    specs += [(spec, path + ("kwargs", k)) for k, spec in (asl.get("kwargs") or {}).items()]
    while specs:
        spec, where = specs.pop()
        ranged, listed = spec.get(ATTR_RANGE) or [], spec.get(ATTR_LIST) or []
        for key, value in spec.items():
            if key in listed:
                yield where + (key,), len(value)
            elif key not in ranged:
                continue
            elif key == "shape":
                for i, dim in enumerate(value):
                    if isinstance(dim, list):
                        yield where + (key, i), len(full_range(dim))
            elif key == "value" and spec.get("type") in ("int", "long"):
                yield where + (key,), len(full_range(value))
            elif key == "value" and spec.get("type") in ("genericlist", "tuple"):
                specs.extend((item, where + (key, i)) for i, item in enumerate(value))
            else:
                yield where + (key,), len(value)


def _under(path: tuple, bad_paths) -> bool:
    """True if a schema error lies at or below ``path`` (its subtree is not checked further)."""
    n = len(path)
    return any(len(bad) >= n and tuple(bad[:n]) == path for bad in bad_paths)


def _dedupe(problems: List[Problem]) -> List[Problem]:
    seen, out = set(), []
    for p in problems:
        key = (p.path, p.message)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out

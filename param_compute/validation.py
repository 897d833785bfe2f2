"""Validation of a parsed spec: JSON Schema first, then the checks a schema can't express.

Every problem in the spec is collected (file, JSON path, what is wrong, what would be right) and
raised together as one ``SpecError``. The result is a typed ``BenchmarkSpec``.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .dtypes import (DTYPE_NAMES, LAYOUT_NAMES, MEMORY_FORMAT_NAMES, NON_FINITE_FLOATS,
                     is_differentiable)
from .errors import Problem, SpecError, did_you_mean, format_json_path
from .expansion import (ATTR_COPY, ATTR_LIST, ATTR_RANGE, DEFAULT_ITERATOR, DUMMY_ITERATOR,
                        MACRO_KEYS, RANGE_ITERATOR, count_runs, has_macros, plan_runs)
from .spec_loader import json_value_problems

log = logging.getLogger("param_compute")

DEFAULT_DATA_GENERATOR = "PyTorch:DefaultDataGenerator"
#: The spec format as JSON Schema (draft 2020-12), usable by editors too.
SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "spec.schema.json"
MAX_RUNS_PER_VARIANT = 10**12
#: Expansion holds each range's values in memory: one range (or list) may have at most this many.
MAX_VALUES_PER_AXIS = 10**6
#: Operators in one spec (PARAM's specs have a handful; torch and aten have a few thousand).
MAX_OPERATORS = 10_000
#: Validation stops after this many problems (a hostile spec may have millions), saying so.
MAX_PROBLEMS = 100
#: Distinct data specs whose schema problems are remembered between validations: sweeps and
#: captured workloads repeat the same few, and schema checks dominate validation time.
_DATA_SPEC_CACHE_SIZE = 8192
_DATA_SPEC_CACHE_KEY_LIMIT = 4096
#: Runs of each config entry a custom (plugin) iterator is asked to expand during validation.
CUSTOM_ITERATOR_PROBE = 1000


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


def _canonical(value: Any) -> Any:
    """A hashable form of a JSON value under JSON Schema equality (1 == 1.0, true != 1)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, list):
        return ("array", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, _canonical(v)) for k, v in value.items()))
    return ("other", id(value))


def _unique_items(validator, unique, instance, schema):
    """``uniqueItems`` in linear time: jsonschema's own falls back to comparing every pair when
    the items are objects, which a hostile spec can make take hours."""
    if not unique or not validator.is_type(instance, "array"):
        return
    import jsonschema

    seen = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield jsonschema.ValidationError(f"items must be unique: {_short(item)} appears more "
                                             "than once")
            return
        seen.add(key)


def _is_json_integer(_checker, value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _validator_class():
    """Draft 2020-12, with two changes: ``uniqueItems`` in linear time, and ``integer`` meaning
    an integer literal. JSON Schema counts 1.0 as an integer, but a spec's integers are indices
    and sizes that Python takes only as ints (``__copy__: [{"shape": [0, [0, 1.0]]}]`` passed
    the schema and failed in expansion)."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    return jsonschema.validators.extend(
        base, {"uniqueItems": _unique_items},
        type_checker=base.TYPE_CHECKER.redefine("integer", _is_json_integer))


@lru_cache(maxsize=1)
def _schema_validator():
    return _validator_class()(load_schema())


_DATA_SPEC_REF = {"$ref": "#/$defs/data_spec"}


@lru_cache(maxsize=1)
def _split_validators():
    """(validator of a spec without its data specs, validator of one data spec), or None if the
    schema does not have the expected shape (then the whole schema checks the whole spec).

    Data specs are checked one distinct spec at a time, remembered by their JSON text: the same
    problems at a different path. This is what keeps validating a large sweep fast.
    """
    schema = load_schema()
    try:
        properties = schema["$defs"]["arg_spec_list"]["properties"]
        if (properties["args"]["items"] != _DATA_SPEC_REF
                or properties["kwargs"]["additionalProperties"] != _DATA_SPEC_REF
                or "data_spec" not in schema["$defs"]):
            return None
    except (KeyError, TypeError):
        return None
    outer = copy.deepcopy(schema)
    outer_properties = outer["$defs"]["arg_spec_list"]["properties"]
    outer_properties["args"]["items"] = True
    outer_properties["kwargs"]["additionalProperties"] = True
    inner = {key: value for key, value in schema.items()
             if key in ("$schema", "$id", "$defs")}
    inner.update(_DATA_SPEC_REF)
    cls = _validator_class()
    return cls(outer), cls(inner)


def _data_spec_locations(raw: Any):
    """(data spec, path) of every place the schema checks against ``#/$defs/data_spec``:
    the items of ``args`` and the values of ``kwargs`` of every arg-spec-list reached through
    values of the expected types (where a type is wrong the schema does not descend either)."""
    if not isinstance(raw, dict):
        return
    for name, op in raw.items():
        configs = op.get("config") if isinstance(op, dict) else None
        if not isinstance(configs, list):
            continue
        for index, entry in enumerate(configs):
            if not isinstance(entry, dict):
                continue
            for section in ("build", "input"):
                lists = entry.get(section)
                if not isinstance(lists, list):
                    continue
                for list_index, asl in enumerate(lists):
                    if not isinstance(asl, dict):
                        continue
                    where = (name, "config", index, section, list_index)
                    args, kwargs = asl.get("args"), asl.get("kwargs")
                    if isinstance(args, list):
                        for i, spec in enumerate(args):
                            yield spec, where + ("args", i)
                    if isinstance(kwargs, dict):
                        for key, spec in kwargs.items():
                            yield spec, where + ("kwargs", key)


_data_spec_cache: Dict[str, Tuple[Problem, ...]] = {}


def _data_spec_problems(validator, spec: Any) -> Tuple[Problem, ...]:
    """Schema problems of one data spec, at paths relative to it (remembered by its text)."""
    key = json.dumps(spec)
    cached = _data_spec_cache.get(key)
    if cached is not None:
        return cached
    problems = tuple(problem for error in validator.iter_errors(spec)
                     for problem in _schema_problems(error))
    if len(key) <= _DATA_SPEC_CACHE_KEY_LIMIT:
        if len(_data_spec_cache) >= _DATA_SPEC_CACHE_SIZE:
            _data_spec_cache.clear()
        _data_spec_cache[key] = problems
    return problems


def schema_problems(raw: Any):
    """Every JSON Schema problem of a spec, said for a person (lazily, in a stable order)."""
    split = _split_validators()
    if split is None:
        for error in _schema_validator().iter_errors(raw):
            yield from _schema_problems(error)
        return
    outer, inner = split
    for error in outer.iter_errors(raw):
        yield from _schema_problems(error)
    for spec, path in _data_spec_locations(raw):
        for problem in _data_spec_problems(inner, spec):
            yield Problem(path + problem.path, problem.message, problem.hint)


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


def _printable(text: str, limit: int = 300) -> str:
    """Text from elsewhere (an exception message) made safe to print: short, escapes shown."""
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text if text.isprintable() else repr(text)[1:-1]


def _short(value: Any, limit: int = 60) -> str:
    """A value as a short snippet of JSON (a string as its repr), at a cost bounded by ``limit``
    whatever the size of the value."""
    if isinstance(value, str):
        text = repr(value[:limit])
    else:
        text = ""
        encoder = json.JSONEncoder(default=lambda o: f"<{type(o).__name__}>")
        try:
            for chunk in encoder.iterencode(value):  # lazy: stops as soon as there is enough
                text += chunk
                if len(text) > limit:
                    break
        except (ValueError, TypeError, RecursionError):
            text = text or f"<{type(value).__name__}>"
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
        got = _json_type(error.instance)
        if error.instance is not None:
            got += f" {_short(error.instance)}"
        return Problem(path, f"expected {expected}, got {got}")
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
    message = error.message  # jsonschema's own words may quote the whole instance
    return Problem(path, message if len(message) <= 200 else message[:197] + "...")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_device(value: Any) -> bool:
    kind = value.split(":", 1)[0] if isinstance(value, str) else None
    index = value.split(":", 1)[1] if isinstance(value, str) and ":" in value else "0"
    return kind in ("cpu", "cuda", "meta", "mps", "xpu") and index.isdigit()


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


class _TooManyProblems(Exception):
    """Raised when MAX_PROBLEMS problems are known: the rest of the spec is not checked."""


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
        # Values JSON can't hold or the engine can't use (and size and depth) come first: every
        # later check may then assume plain, bounded JSON.
        value_problems = json_value_problems(raw)
        if value_problems:
            raise SpecError(self.source, value_problems)
        if isinstance(raw, dict) and len(raw) > MAX_OPERATORS:
            raise SpecError(self.source, [Problem((), f"spec has {len(raw)} operators, over the "
                                                      f"{MAX_OPERATORS} limit",
                                                  "split it into several spec files")])
        operators = []
        try:
            schema_errors = list(itertools.islice(schema_problems(raw), MAX_PROBLEMS))
            self.problems.extend(schema_errors)
            if len(self.problems) >= MAX_PROBLEMS:
                raise _TooManyProblems
            bad_paths = [p.path for p in schema_errors]
            if isinstance(raw, dict):
                for name, op in raw.items():
                    operator = self._check_operator(name, op, bad_paths)
                    if operator is not None:
                        operators.append(operator)
        except _TooManyProblems:
            self.problems = _dedupe(self.problems)[:MAX_PROBLEMS] + [Problem(
                (), f"validation stopped after {MAX_PROBLEMS} problems", "fix these first")]
        if self.problems:
            raise SpecError(self.source, _dedupe(self.problems))
        for warning in self.warnings:
            log.warning("%s: %s", self.source, warning)
        return BenchmarkSpec(self.source, tuple(operators), tuple(self.warnings))

    def problem(self, path: Sequence[Any], message: str, hint: Optional[str] = None) -> None:
        self.problems.append(Problem(tuple(path), message, hint))
        if len(self.problems) >= MAX_PROBLEMS:
            raise _TooManyProblems

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
        known_problems = len(self.problems)
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
        operator = OperatorSpec(name, names["build_iterator"], names["input_iterator"],
                                names["build_data_generator"], names["input_data_generator"],
                                tuple(configs))
        if len(self.problems) == known_problems:
            self._probe_custom_iterators(operator, path)
        return operator

    def _probe_custom_iterators(self, operator: OperatorSpec, path) -> None:
        """A registered custom iterator gives configs its own meaning, so only running it can
        tell whether it accepts them: count and expand each config entry's first runs, and
        report what it raises as a problem of that entry (not as an engine error mid-run)."""
        builtin = (RANGE_ITERATOR, DEFAULT_ITERATOR, DUMMY_ITERATOR)
        custom = [key for key in ("build_iterator", "input_iterator")
                  if getattr(operator, key) not in builtin]
        if not custom:
            return
        iterators = self.registries.config_iterators
        for index, entry in enumerate(operator.configs):
            single = BenchmarkSpec(self.source, (replace(operator, configs=(entry,)),))
            try:
                count_runs(single, iterators)
                for _ in itertools.islice(plan_runs(single, iterators), CUSTOM_ITERATOR_PROBE):
                    pass
            except Exception as exc:  # plugin code: whatever it raises means "not this config"
                names = " / ".join(getattr(operator, key) for key in custom)
                self.problem(path + ("config", index),
                             f"{names} cannot expand this config: {type(exc).__name__}: "
                             f"{_printable(str(exc))}")

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
        if "run_device" in spec and arg_type != "device":
            self.problem(path + ("run_device",), f"run_device applies to device args, not to "
                                                 f"{_short(arg_type)}",
                         "drop it (a tensor without \"device\" is made on the run's device)")
        checkers = {"tensor": self._check_tensor, "int": self._check_integer,
                    "long": self._check_integer, "float": self._check_float,
                    "double": self._check_float, "bool": self._check_bool,
                    "str": self._check_str, "device": self._check_device,
                    "dtype": self._check_dtype_value, "genericlist": self._check_list,
                    "tuple": self._check_list, "layout": self._check_layout,
                    "memory_format": self._check_memory_format}
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
        self._check_tensor_layout(spec, path, shape if "shape" not in ranged else None)

    def _check_tensor_layout(self, spec, path, shape) -> None:
        """``stride`` (one per dim), ``storage_offset`` and a fixed ``device`` of a tensor."""
        stride = spec.get("stride")
        if isinstance(stride, list) and isinstance(shape, list) and len(stride) != len(shape):
            self.problem(path + ("stride",), f"stride has {len(stride)} entries but the shape "
                                             f"has {len(shape)} dims", "give one stride per dim")
        if isinstance(stride, list):
            for i, step in enumerate(stride):
                if _is_int(step) and step < 0:
                    self.problem(path + ("stride", i), f"strides must be >= 0, got {step}")
        if "device" in spec and not _is_device(spec["device"]):
            self.problem(path + ("device",), f"not a device: {_short(spec['device'])}",
                         'write "cpu", "cuda" or "cuda:N"')

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
        self._choices(spec, path, "value", varies,
                      self._typed(lambda v: _is_number(v) or v in NON_FINITE_FLOATS,
                                  'a number (or "inf", "-inf", "nan")'))

    def _check_bool(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies,
                      self._typed(lambda v: isinstance(v, bool), "true or false"))

    def _check_str(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies,
                      self._typed(lambda v: isinstance(v, str), "a string"))

    def _check_device(self, spec, path, section, varies) -> None:
        def check(value, where):
            if not _is_device(value):
                self.problem(where, f"not a device: {_short(value)}",
                             'write "cpu", "cuda" or "cuda:N"')

        self._choices(spec, path, "value", varies, check)

    def _check_dtype_value(self, spec, path, section, varies) -> None:
        def check(value, where):
            if not isinstance(value, str) or value not in DTYPE_NAMES:
                self.problem(where, f"unknown dtype {_short(value)}", _dtype_hint(value))

        self._choices(spec, path, "value", varies, check)

    def _named_value(self, names: Sequence[str], kind: str):
        def check(value, where):
            if value not in names:
                self.problem(where, f"unknown {kind} {_short(value)}",
                             (did_you_mean(value, names) if isinstance(value, str) else None)
                             or f"known: {', '.join(names)}")
        return check

    def _check_layout(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies, self._named_value(LAYOUT_NAMES, "layout"))

    def _check_memory_format(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies,
                      self._named_value(MEMORY_FORMAT_NAMES, "memory format"))

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
        """Each copy reads and writes list elements that exist in every combination: the target
        and the source attribute must be lists once expanded (a constant list, a shape with ranged
        dims, a ranged genericlist/tuple, or every alternative of a listed attribute), long
        enough for the indices."""
        args = section.args
        for i, entry in enumerate(spec.get(ATTR_COPY) or []):
            for attr, mapping in entry.items():
                where = path + (ATTR_COPY, i, attr)
                target, (src_arg, src_elem) = mapping
                own = _expanded_lists(spec, attr)
                if own is None:
                    self.problem(where, f"copies into {attr!r}, which this arg does not have as "
                                        "a list" + (" in every combination" if attr in spec
                                                    else ""))
                    continue
                shortest = min(map(len, own))
                if target >= shortest:
                    self.problem(where + (0,), f"target index {target} is out of range: "
                                               f"{attr!r} has {shortest} elements")
                if src_arg >= len(args):
                    self.problem(where + (1, 0), f"source arg index {src_arg} is out of range: "
                                                 f"there are {len(args)} args")
                    continue
                source = (_expanded_lists(args[src_arg], attr)
                          if isinstance(args[src_arg], dict) else None)
                if source is None:
                    self.problem(where + (1, 0), f"source arg {src_arg} has no list {attr!r}"
                                 + (" in every combination" if isinstance(args[src_arg], dict)
                                    and attr in args[src_arg] else ""))
                    continue
                shortest = min(map(len, source))
                if src_elem >= shortest:
                    self.problem(where + (1, 1), f"source element index {src_elem} is out of "
                                                 f"range: arg {src_arg}'s {attr!r} has "
                                                 f"{shortest} elements")


def _expanded_lists(spec: Dict[str, Any], attr: str) -> Optional[List[list]]:
    """The lists ``spec[attr]`` can be once expanded (one per alternative), or None if in some
    combination it is no list (a ranged int value or dtype is one value; so is a listed scalar)."""
    value = spec.get(attr)
    if attr in (spec.get(ATTR_LIST) or []):
        forms = value if isinstance(value, list) else []
        return forms if forms and all(isinstance(form, list) for form in forms) else None
    if attr in (spec.get(ATTR_RANGE) or []) and not (
            attr == "shape" or (attr == "value" and spec.get("type") in ("genericlist", "tuple"))):
        return None  # ranged dims keep a shape's length; a ranged list keeps its items
    return [value] if isinstance(value, list) else None


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
                        yield where + (key, i), _range_length(dim)
            elif key == "value" and spec.get("type") in ("int", "long"):
                yield where + (key,), _range_length(value)
            elif key == "value" and spec.get("type") in ("genericlist", "tuple"):
                specs.extend((item, where + (key, i)) for i, item in enumerate(value))
            else:
                yield where + (key,), len(value)


def _range_length(bounds: List[int]) -> int:
    """``len(expansion.full_range(bounds))`` by arithmetic: ``len(range)`` overflows past
    ``sys.maxsize``, which int64 bounds reach."""
    step = bounds[2] if len(bounds) > 2 else 1
    return max(0, (bounds[1] - bounds[0]) // step + 1)


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

"""The shipped JSON Schema of the spec format, and its errors said as ``Problem``s.

``schema_problems`` checks a spec in two parts: everything but the data specs with the schema
itself, and each data spec with a validator compiled for its ``type`` alone (the schema's
``if type == T then ...`` branches of other types never apply to it, so the problems are the
same, found without evaluating a dozen conditions per spec). A data spec ``quick_schema`` finds
valid needs no validator at all (nor jsonschema's import); another's problems are remembered by
its JSON text: a sweep repeats the same few.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from param_compute.errors import Problem, did_you_mean
from param_compute.spec import fastpath, quick_schema
from param_compute.spec.walker import data_specs
from param_compute.spec.wording import json_type, short

#: The spec format as JSON Schema (draft 2020-12), usable by editors too.
SCHEMA_PATH = Path(__file__).resolve().parent / "spec.schema.json"
#: Distinct data specs whose schema problems are remembered between validations.
_DATA_SPEC_CACHE_SIZE = 8192
_DATA_SPEC_CACHE_KEY_LIMIT = 4096
_DATA_SPEC_REF = {"$ref": "#/$defs/data_spec"}


@lru_cache(maxsize=1)
def load_schema() -> Dict[str, Any]:
    """The JSON Schema shipped at ``param_compute/spec/spec.schema.json``."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def _unique_items(validator, unique, instance, schema):
    """``uniqueItems`` in linear time: jsonschema's own falls back to comparing every pair when
    the items are objects, which a hostile spec can make take hours."""
    if not unique or not validator.is_type(instance, "array"):
        return
    import jsonschema

    seen = set()
    for item in instance:
        key = quick_schema.canonical(item)
        if key in seen:
            yield jsonschema.ValidationError(f"items must be unique: {short(item)} appears more "
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
def _whole_validator():
    return _validator_class()(load_schema())


def _branch_type(branch: Any) -> Optional[str]:
    """The data spec type an ``allOf`` branch ``{"if": {type: const T}, "then": ...}`` is for."""
    try:
        condition = branch["if"]
        if set(condition) - {"properties", "required"} or set(condition["properties"]) != {"type"}:
            return None
        return condition["properties"]["type"]["const"]
    except (KeyError, TypeError):
        return None


def _split_schema() -> Optional[Dict[str, Any]]:
    """The schema's data spec definition, if the schema has the expected shape: arg-spec-lists
    whose ``args`` items and ``kwargs`` values are ``#/$defs/data_spec`` (else None, and the
    whole schema checks the whole spec)."""
    schema = load_schema()
    try:
        properties = schema["$defs"]["arg_spec_list"]["properties"]
        data_spec = schema["$defs"]["data_spec"]
        if (properties["args"]["items"] != _DATA_SPEC_REF
                or properties["kwargs"]["additionalProperties"] != _DATA_SPEC_REF):
            return None
        data_spec["properties"]["type"]["enum"]
    except (KeyError, TypeError):
        return None
    return data_spec


@lru_cache(maxsize=1)
def _outer_validator():
    """The validator of a spec with its data specs left out (None: the schema is not split)."""
    if _split_schema() is None:
        return None
    outer = copy.deepcopy(load_schema())
    outer_properties = outer["$defs"]["arg_spec_list"]["properties"]
    outer_properties["args"]["items"] = True
    outer_properties["kwargs"]["additionalProperties"] = True
    return _validator_class()(outer)


@lru_cache(maxsize=None)
def _data_spec_validator(kind: Optional[str]):
    """The validator of one data spec whose ``type`` is ``kind`` (None: of any data spec),
    compiled when first needed (``_data_spec_schema``)."""
    return _validator_class()(_data_spec_schema(kind))


@lru_cache(maxsize=None)
def _data_spec_schema(kind: Optional[str]) -> Dict[str, Any]:
    """The schema of one data spec whose ``type`` is ``kind`` (None: of any data spec): only
    the schema's ``if type == kind`` branch is kept, and the items of a genericlist/tuple are
    left to ``_data_spec_problems`` (one at a time)."""
    schema = load_schema()
    data_spec = _split_schema()
    if kind is None or data_spec is None or kind not in data_spec["properties"]["type"]["enum"]:
        spec_schema: Dict[str, Any] = dict(_DATA_SPEC_REF)
    else:
        own = [_shallow(b) for b in data_spec.get("allOf", []) if _branch_type(b) in (kind, None)]
        spec_schema = {k: v for k, v in data_spec.items() if k != "allOf"}
        if own:
            spec_schema["allOf"] = own
    inner = {key: value for key, value in schema.items() if key in ("$schema", "$id")}
    inner.update(spec_schema)
    inner["$defs"] = schema["$defs"]
    return inner


def _shallow(branch: Dict[str, Any]) -> Dict[str, Any]:
    """``branch`` with ``then.properties.value.items`` (data specs) not checked."""
    try:
        value = branch["then"]["properties"]["value"]
    except (KeyError, TypeError):
        return branch
    if not isinstance(value, dict) or value.get("items") != _DATA_SPEC_REF:
        return branch
    shallow = copy.deepcopy(branch)
    shallow["then"]["properties"]["value"]["items"] = True
    return shallow


@lru_cache(maxsize=None)
def _items_checked_apart(kind: Any) -> bool:
    data_spec = _split_schema()
    return data_spec is not None and any(
        _branch_type(b) == kind and _shallow(b) is not b for b in data_spec.get("allOf", []))


_data_spec_cache: Dict[str, Tuple[Problem, ...]] = {}


def _data_spec_problems(spec: Any) -> Tuple[Problem, ...]:
    """Schema problems of one data spec, at paths relative to it (remembered by its text). A
    plain spec (``fastpath``) has none; the items of a genericlist/tuple are checked one by one,
    after the list itself, as the schema's own ``items`` would report them."""
    if fastpath.data_spec(spec):
        return ()
    kind = spec.get("type") if isinstance(spec, dict) else None
    kind = kind if isinstance(kind, str) else None
    if not _items_checked_apart(kind) and quick_schema.accepts(_data_spec_schema(kind), spec):
        return ()  # valid, said without compiling a validator (a ranged sweep's data specs)
    key = json.dumps(spec)
    cached = _data_spec_cache.get(key)
    if cached is not None:
        return cached
    problems = tuple(problem for error in _data_spec_validator(kind).iter_errors(spec)
                     for problem in _error_problems(error))
    items = spec.get("value") if kind is not None and _items_checked_apart(kind) else None
    if isinstance(items, list):
        problems += tuple(Problem(("value", index) + problem.path, problem.message, problem.hint)
                          for index, item in enumerate(items)
                          for problem in _data_spec_problems(item))
    if len(key) <= _DATA_SPEC_CACHE_KEY_LIMIT:
        if len(_data_spec_cache) >= _DATA_SPEC_CACHE_SIZE:
            _data_spec_cache.clear()
        _data_spec_cache[key] = problems
    return problems


def data_spec_schema_problems(located: Iterable[Tuple[Any, tuple]]) -> Iterator[Problem]:
    """Schema problems of the given (data spec, path) pairs, at their paths."""
    for spec, path in located:
        for problem in _data_spec_problems(spec):
            yield Problem(path + problem.path, problem.message, problem.hint)


def schema_problems(raw: Any) -> Iterator[Problem]:
    """Every JSON Schema problem of a spec, said for a person (lazily, in a stable order)."""
    outer = _outer_validator()
    if outer is None:
        for error in _whole_validator().iter_errors(raw):
            yield from _error_problems(error)
        return
    for error in outer.iter_errors(raw):
        yield from _error_problems(error)
    yield from data_spec_schema_problems(data_specs(raw))


def _error_problems(error) -> List[Problem]:
    """What a JSON Schema error means, said for a person (one problem per unknown key)."""
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = list(error.schema.get("properties", {}))
        extra = [k for k in error.instance if k not in allowed]
        if allowed and extra:
            path = tuple(error.absolute_path)
            return [Problem(path + (key,), f"unknown key {key!r}",
                            did_you_mean(key, allowed) or f"allowed keys: {', '.join(allowed)}")
                    for key in extra]
    return [_error_problem(error)]


_JSON_TYPES = {"array": list, "object": dict, "string": str, "null": type(None),
               "boolean": bool, "integer": int, "number": (int, float)}


def _fits(branch: Any, instance: Any) -> bool:
    """Whether a schema branch's ``type`` admits the instance's JSON type."""
    kind = branch.get("type") if isinstance(branch, dict) else None
    if not isinstance(kind, str) or kind not in _JSON_TYPES:
        return False
    if isinstance(instance, bool) and kind != "boolean":
        return False
    return isinstance(instance, _JSON_TYPES[kind])


def _error_problem(error) -> Problem:
    path = tuple(error.absolute_path)
    kind = error.validator
    if kind in ("anyOf", "oneOf") and error.context:
        # One branch of the instance's own JSON type: what is wrong inside it says the most.
        fitting = [i for i, branch in enumerate(error.validator_value)
                   if _fits(branch, error.instance)]
        inner = [e for e in error.context if len(fitting) == 1 and e.schema_path
                 and e.schema_path[0] == fitting[0]]
        if inner:
            return _error_problem(max(inner, key=lambda e: len(e.absolute_path)))
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
        return Problem(path, f"unknown {path[-1] if path else 'value'} {short(error.instance)}",
                       did_you_mean(error.instance, choices)
                       or f"expected one of: {', '.join(map(str, choices))}")
    if kind == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        got = json_type(error.instance)
        if error.instance is not None:
            got += f" {short(error.instance)}"
        return Problem(path, f"expected {expected}, got {got}")
    if kind == "minItems":
        return Problem(path, f"must have at least {error.validator_value} item(s)")
    if kind == "maxItems":
        return Problem(path, f"must have at most {error.validator_value} item(s)")
    if kind == "minimum":
        return Problem(path, f"must be >= {error.validator_value}, got {short(error.instance)}")
    if kind == "minProperties":
        return Problem(path, "must not be empty")
    if custom:
        return Problem(path, f"{custom}, got {short(error.instance)}")
    message = error.message  # jsonschema's own words may quote the whole instance
    return Problem(path, message if len(message) <= 200 else message[:197] + "...")

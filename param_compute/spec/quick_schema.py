"""A JSON Schema verdict without jsonschema, for the keywords the spec's own schema uses.

``accepts(schema, instance)`` says whether ``instance`` is valid under ``schema`` (draft 2020-12,
with the spec's reading of ``integer``: an integer literal, never a float nor a bool): True or
False when every keyword it meets is one it knows, None when it meets another (or a value that is
not JSON), and the caller asks jsonschema. It never says what is wrong: an instance it does not
accept is checked by the validator, whose errors are the messages. Importing jsonschema and
compiling a validator costs about a twentieth of a dry run; the ranged data specs of a sweep,
which the fast path leaves to the schema, are decided here instead. Torch-free, no imports.
"""

from __future__ import annotations

from typing import Any, Optional

#: Keywords that assert nothing (annotations, and definitions reached through ``$ref``).
_ANNOTATIONS = frozenset(("description", "x-error", "title", "$comment", "$schema", "$id",
                          "$defs", "default", "examples"))
_JSON_SCALARS = (str, int, float, bool, type(None))


def canonical(value: Any) -> Any:
    """A hashable form of a JSON value under JSON Schema equality (1 == 1.0, true != 1)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, list):
        return ("array", tuple(canonical(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, canonical(v)) for k, v in value.items()))
    return ("other", id(value))


def _is_type(kind: Any, value: Any) -> Optional[bool]:
    if not isinstance(value, (dict, list) + _JSON_SCALARS):
        return None  # not JSON: jsonschema's own type checks decide
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return None


def _all(verdicts) -> Optional[bool]:
    """False if any is False, else None if any is None, else True (in order, lazily)."""
    unknown = False
    for verdict in verdicts:
        if verdict is False:
            return False
        unknown = unknown or verdict is None
    return None if unknown else True


def accepts(schema: Any, instance: Any, root: Any = None) -> Optional[bool]:
    """Whether ``instance`` is valid under ``schema`` (``root``: where ``$ref`` looks, by
    default ``schema``); None when that takes a keyword this module does not know."""
    return _check(schema, instance, schema if root is None else root)


def _check(schema: Any, value: Any, root: Any) -> Optional[bool]:
    if schema is True or schema is False:
        return schema
    if not isinstance(schema, dict):
        return None
    return _all(_keyword(key, rule, schema, value, root) for key, rule in schema.items())


def _keyword(key: str, rule: Any, schema: dict, value: Any, root: Any) -> Optional[bool]:
    if key in _ANNOTATIONS or key in ("then", "else"):  # then/else: with ``if``
        return True
    if key == "type":
        kinds = rule if isinstance(rule, list) else [rule]
        verdicts = [_is_type(kind, value) for kind in kinds]
        return True if True in verdicts else (None if None in verdicts else False)
    if key == "enum":
        return isinstance(rule, list) and canonical(value) in {canonical(v) for v in rule}
    if key == "const":
        return canonical(value) == canonical(rule)
    if key == "$ref":
        if not isinstance(rule, str) or not rule.startswith("#/$defs/"):
            return None
        target = root.get("$defs", {}).get(rule[len("#/$defs/"):]) if isinstance(root, dict) \
            else None
        return None if target is None else _check(target, value, root)
    if key == "anyOf":
        verdicts = [_check(branch, value, root) for branch in rule]
        return True if True in verdicts else (None if None in verdicts else False)
    if key == "allOf":
        return _all(_check(branch, value, root) for branch in rule)
    if key == "if":
        matched = _check(rule, value, root)
        if matched is None:
            return None
        branch = schema.get("then" if matched else "else", True)
        return _check(branch, value, root)
    if isinstance(value, dict):
        return _object_keyword(key, rule, schema, value, root)
    if isinstance(value, list):
        return _array_keyword(key, rule, schema, value, root)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if key == "minimum":
            return value >= rule
        if key == "exclusiveMinimum":
            return value > rule
    if key in _OBJECT_KEYWORDS or key in _ARRAY_KEYWORDS or key in ("minimum",
                                                                     "exclusiveMinimum"):
        return True  # a keyword for another type of value asserts nothing about this one
    return None


_OBJECT_KEYWORDS = frozenset(("properties", "required", "additionalProperties",
                              "minProperties"))
_ARRAY_KEYWORDS = frozenset(("items", "prefixItems", "minItems", "maxItems", "uniqueItems"))


def _object_keyword(key: str, rule: Any, schema: dict, value: dict,
                    root: Any) -> Optional[bool]:
    if key == "properties":
        return _all(_check(rule[name], item, root) for name, item in value.items()
                    if name in rule)
    if key == "required":
        return all(name in value for name in rule)
    if key == "additionalProperties":
        known = schema.get("properties", {})
        return _all(_check(rule, item, root) for name, item in value.items()
                    if name not in known)
    if key == "minProperties":
        return len(value) >= rule
    return True if key in _ARRAY_KEYWORDS or key in ("minimum", "exclusiveMinimum") else None


def _array_keyword(key: str, rule: Any, schema: dict, value: list,
                   root: Any) -> Optional[bool]:
    if key == "items":
        start = len(schema.get("prefixItems", ()))
        return _all(_check(rule, item, root) for item in value[start:])
    if key == "prefixItems":
        return _all(_check(branch, item, root) for branch, item in zip(rule, value))
    if key == "minItems":
        return len(value) >= rule
    if key == "maxItems":
        return len(value) <= rule
    if key == "uniqueItems":
        return not rule or len({canonical(item) for item in value}) == len(value)
    return True if key in _OBJECT_KEYWORDS or key in ("minimum", "exclusiveMinimum") else None

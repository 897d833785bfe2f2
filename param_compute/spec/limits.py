"""The limits every spec value is held to, and the walk that finds values past them.

A spec is data that people pass around, so ``json_value_problems`` holds every value to what
JSON can say and the engine can use: integers fit in 64 bits, numbers are finite, strings are
valid Unicode (no lone surrogates) of bounded length, keys are printable strings, nesting depth
and the number of values are bounded. It runs on parsed files and on spec dicts alike (the spec
validator calls it first), walks iteratively, and puts no part of a hostile key or string into a
message unescaped. The limits of the later stages (operators, problems, range sizes) live here
too, so that one module says what a spec may be.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple

from param_compute.errors import Problem
from param_compute.formatting import printable

MAX_NESTING_DEPTH = 64
#: Values (objects, arrays, strings, numbers, ...) in one spec: a captured model's spec has
#: millions; a spec file (at most 64 MB) can hold no more than about 32 million anyway.
MAX_JSON_VALUES = 100_000_000
#: Characters in one string value (aten schema strings, the longest real ones, are a few hundred).
MAX_STRING_LENGTH = 10_000
#: Characters in one object key (operator names, kwarg names, ...).
MAX_KEY_LENGTH = 256
#: Integers are passed to torch as int64.
INT_MIN, INT_MAX = -(2 ** 63), 2 ** 63 - 1
#: Stop listing value problems after this many (a hostile file may have millions).
MAX_VALUE_PROBLEMS = 20


#: Operators in one spec (PARAM's specs have a handful; torch and aten have a few thousand).
MAX_OPERATORS = 10_000
#: Validation stops after this many problems (a hostile spec may have millions), saying so.
MAX_PROBLEMS = 100
#: Runs one arg-spec-list (a variant) may expand to.
MAX_RUNS_PER_VARIANT = 10**12
#: Expansion holds each range's values in memory: one range (or list) may have at most this many.
MAX_VALUES_PER_AXIS = 10**6
#: Runs of each config entry a custom (plugin) iterator is asked to expand during validation.
CUSTOM_ITERATOR_PROBE = 1000


class _DuplicateKeyDict(dict):
    """A parsed JSON object that had duplicate keys (found and reported after parsing)."""

    duplicates: List[str]


class _OutOfRangeNumber(str):
    """An integer literal of more digits than any int64 has, kept as its text and reported at its
    path by ``json_value_problems``. Python refuses to convert literals of over 4300 digits (a
    ValueError from the parser); only a file that has one is parsed again with this marker, so
    the common case pays nothing for it."""


def _duplicate_problem(path: tuple, key: str) -> Problem:
    return Problem(path, f"duplicate key {key!r}", "each key may appear once in an object; JSON "
                                                   "parsers silently keep only the last")


def nesting_depth_problem(value: Any, limit: int = MAX_NESTING_DEPTH):
    """The path of the first place nested deeper than ``limit``, or None (iterative: no recursion;
    a path is built only for the place reported)."""
    stack = [(value, 0, None)]
    pop, extend = stack.pop, stack.extend
    while stack:
        node, depth, trail = pop()
        if depth > limit:
            path = _trail_path(trail)
            return Problem(path[:3] + ("...",), f"nested more than {limit} levels deep",
                           "flatten the spec; deep genericlist nesting is not meaningful")
        if isinstance(node, dict):
            extend([(v, depth + 1, (trail, k)) for k, v in node.items()])
        elif isinstance(node, list):
            extend([(v, depth + 1, (trail, i)) for i, v in enumerate(node)])
    return None


def _path_part(key: Any) -> Any:
    """A key as it may appear in a problem's path: printable and short."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key  # an array index
    if isinstance(key, str) and len(key) <= MAX_KEY_LENGTH and key.isprintable():
        return key
    return printable(key, 60) if isinstance(key, str) else repr(key)[:60]


def _first_bad_character(text: str) -> Optional[str]:
    """The first character of ``text`` that is not printable (control, format, separator other
    than space) or is a lone surrogate, as ``U+XXXX``; None when all are fine."""
    for char in text:
        if not char.isprintable():
            return f"U+{ord(char):04X}"
    return None


def _has_lone_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def _number_text(value: Any) -> str:
    text = str(value)
    if len(text) > 40:
        return f"{text[:12]}...{text[-6:]} ({len(text.lstrip('-'))} digits)"
    return text


def _value_problem(node: Any, path: tuple) -> Optional[Problem]:
    """What makes one value (not its contents) unusable in a spec, or None."""
    if node is None or node is True or node is False:
        return None
    kind = type(node)
    if kind is _OutOfRangeNumber:
        return Problem(path, f"integer {_number_text(node)} is out of range",
                       f"integers must fit in 64 bits: {INT_MIN} to {INT_MAX}")
    if kind is int or (isinstance(node, int) and not isinstance(node, bool)):
        if INT_MIN <= node <= INT_MAX:
            return None
        return Problem(path, f"integer {_number_text(node)} is out of range",
                       f"integers must fit in 64 bits: {INT_MIN} to {INT_MAX}")
    if kind is float or isinstance(node, float):
        if math.isfinite(node):
            return None
        return Problem(path, f"number {node} is not finite", "JSON numbers are finite (a literal "
                                                             "such as 1e400 overflows to inf)")
    if kind is str or isinstance(node, str):
        if len(node) > MAX_STRING_LENGTH:
            return Problem(path, f"string of {len(node)} characters, over the "
                                 f"{MAX_STRING_LENGTH}-character limit")
        if _has_lone_surrogate(node):
            return Problem(path, f"string '{printable(node, 60)}' contains a lone surrogate (not "
                                 "valid Unicode)", "write the character itself, or a valid "
                                                   "surrogate pair")
        return None
    if kind is dict or kind is list or isinstance(node, (dict, list)):
        return None
    return Problem(path, f"{_a(kind.__name__)} is not a JSON value",
                   "spec values are JSON: objects, arrays, strings, numbers, true, false, null")


def _key_problem(key: Any, path: tuple) -> Optional[Problem]:
    if not isinstance(key, str):
        return Problem(path + (repr(key)[:60],), f"key {repr(key)[:60]} is "
                                                  f"{_a(type(key).__name__)}, not a string",
                       "JSON object keys are strings")
    if len(key) > MAX_KEY_LENGTH:
        return Problem(path + (_path_part(key),), f"key of {len(key)} characters, over the "
                                                  f"{MAX_KEY_LENGTH}-character limit")
    bad = _first_bad_character(key)
    if bad:
        what = ("a lone surrogate" if _has_lone_surrogate(key)
                else f"the non-printable character {bad}")
        return Problem(path + (_path_part(key),), f"key '{printable(key, 60)}' contains {what}",
                       "keys are names: printable characters only")
    return None


def _trail_path(trail: Any) -> tuple:
    """The JSON path of a ``(parent trail, key)`` chain (paths are built only for problems)."""
    parts = []
    while trail is not None:
        trail, key = trail
        parts.append(key)
    return tuple(reversed(parts))


def json_value_problems(value: Any, max_depth: int = MAX_NESTING_DEPTH,
                        max_values: int = MAX_JSON_VALUES) -> List[Problem]:
    """Problems that make ``value`` unusable as spec data, in document order (at most
    ``MAX_VALUE_PROBLEMS``; a depth or size overrun is reported alone, at once).

    Iterative, so any depth is safe, and it stops at the first value past ``max_values``, so any
    size is cheap. Also finds reference cycles of a dict built in Python (as depth).
    """
    return walk_values(value, max_depth, max_values)[0]


def walk_values(value: Any, max_depth: int = MAX_NESTING_DEPTH,
                max_values: int = MAX_JSON_VALUES) -> Tuple[List[Problem], int]:
    """``json_value_problems`` and the number of values walked."""
    problems: List[Problem] = []
    stack = [(value, 0, None)]
    pop, extend = stack.pop, stack.extend
    seen = 0
    while stack:
        node, depth, trail = pop()
        seen += 1
        if seen > max_values:
            return [Problem((), f"spec has more than {max_values} values",
                            "split it into several spec files")], seen
        if depth > max_depth:
            path = _trail_path(trail)
            return [Problem(tuple(_path_part(k) for k in path[:3]) + ("...",),
                            f"nested more than {max_depth} levels deep",
                            "flatten the spec; deep genericlist nesting is not meaningful")], seen
        kind = type(node)
        problem = None
        if kind is dict or (kind is not list and isinstance(node, dict)):
            for key in node:
                if (type(key) is not str or len(key) > MAX_KEY_LENGTH
                        or not key.isprintable()):
                    problem = _key_problem(key, _trail_path(trail))
                    if problem:
                        break
            if problem is None and kind is _DuplicateKeyDict:
                path = _trail_path(trail)
                problems.extend(_duplicate_problem(path + (key,), key)
                                for key in node.duplicates)
                if len(problems) >= MAX_VALUE_PROBLEMS:
                    break
            if problem is None:
                depth += 1
                extend(reversed([(child, depth, (trail, key)) for key, child in node.items()]))
        elif kind is list:
            depth += 1
            extend(reversed([(child, depth, (trail, i)) for i, child in enumerate(node)]))
        elif kind is str:
            if len(node) > MAX_STRING_LENGTH or (not node.isascii()
                                                 and _has_lone_surrogate(node)):
                problem = _value_problem(node, _trail_path(trail))
        elif kind is int:
            if not INT_MIN <= node <= INT_MAX:
                problem = _value_problem(node, _trail_path(trail))
        elif kind is float:
            if not math.isfinite(node):
                problem = _value_problem(node, _trail_path(trail))
        elif node is not None and kind is not bool:
            problem = _value_problem(node, _trail_path(trail))
            if problem is None and isinstance(node, list):
                depth += 1
                extend(reversed([(child, depth, (trail, i)) for i, child in enumerate(node)]))
        if problem:
            problems.append(problem)
            if len(problems) >= MAX_VALUE_PROBLEMS:
                break
    return problems, seen

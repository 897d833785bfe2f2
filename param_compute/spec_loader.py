"""Reading a spec file into plain JSON values, with clear errors for anything malformed.

Beyond ``json.load``: duplicate keys (which JSON parsers silently collapse) are errors, each
reported at its JSON path; ``NaN``/``Infinity`` (which are not JSON) are refused; a UTF-8 byte-order
mark is skipped; size and nesting depth are bounded so a hostile file gives a message, not a
RecursionError or an OOM.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Tuple

from .errors import Problem, SpecError

MAX_SPEC_BYTES = 64 * 1024 * 1024
MAX_NESTING_DEPTH = 64


class _DuplicateKeyDict(dict):
    """A parsed JSON object that had duplicate keys (found and reported after parsing)."""

    duplicates: List[str]


class _NonStandardConstant(Exception):
    pass


def _note_duplicates(pairs: List[Tuple[str, Any]]) -> dict:
    result, duplicates = {}, []
    for key, value in pairs:
        if key in result and key not in duplicates:
            duplicates.append(key)
        result[key] = value
    if duplicates:
        result = _DuplicateKeyDict(result)
        result.duplicates = duplicates
    return result


def _refuse_constant(name: str) -> Any:
    raise _NonStandardConstant(name)


def duplicate_key_problems(value: Any) -> List[Problem]:
    """One problem per duplicated key, at its JSON path, in document order (iterative walk)."""
    problems, stack = [], [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, _DuplicateKeyDict):
            problems.extend(Problem(path + (key,), f"duplicate key {key!r}",
                                    "each key may appear once in an object; JSON parsers "
                                    "silently keep only the last")
                            for key in node.duplicates)
        if isinstance(node, dict):
            stack.extend(reversed([(v, path + (k,)) for k, v in node.items()]))
        elif isinstance(node, list):
            stack.extend(reversed([(v, path + (i,)) for i, v in enumerate(node)]))
    return problems


def nesting_depth_problem(value: Any, limit: int = MAX_NESTING_DEPTH):
    """The path of the first place nested deeper than ``limit``, or None (iterative: no recursion)."""
    stack = [(value, ())]
    while stack:
        node, path = stack.pop()
        if len(path) > limit:
            return Problem(path[:3] + ("...",), f"nested more than {limit} levels deep",
                           "flatten the spec; deep genericlist nesting is not meaningful")
        if isinstance(node, dict):
            stack.extend((v, path + (k,)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, path + (i,)) for i, v in enumerate(node))
    return None


def parse_spec_text(text: str, source: str) -> Any:
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(source, [Problem((), f"spec is {len(text)} bytes, over the "
                                             f"{MAX_SPEC_BYTES}-byte limit")])
    if text.startswith("\ufeff"):
        text = text[1:]  # a UTF-8 byte-order mark, as some editors write
    try:
        value = json.loads(text, object_pairs_hook=_note_duplicates,
                           parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise SpecError(source, [Problem((), f"malformed JSON at line {exc.lineno} column "
                                             f"{exc.colno}: {exc.msg}")]) from None
    except _NonStandardConstant as exc:
        raise SpecError(source, [Problem((), f"{exc.args[0]} is not valid JSON",
                                         "JSON numbers are finite; write a number")]) from None
    except RecursionError:
        raise SpecError(source, [Problem((), f"nested more than {MAX_NESTING_DEPTH} levels "
                                             "deep")]) from None
    problem = nesting_depth_problem(value)
    if problem:
        raise SpecError(source, [problem])
    duplicates = duplicate_key_problems(value)
    if duplicates:
        raise SpecError(source, duplicates)
    return value


def read_spec_file(path: Path) -> Any:
    source = str(path)
    try:
        size = Path(path).stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError(source, [Problem((), f"spec is {size} bytes, over the "
                                                 f"{MAX_SPEC_BYTES}-byte limit")])
        text = Path(path).read_text(encoding="utf-8")
    except SpecError:
        raise
    except FileNotFoundError:
        raise SpecError(source, [Problem((), "no such file")]) from None
    except IsADirectoryError:
        raise SpecError(source, [Problem((), "is a directory, not a spec file")]) from None
    except UnicodeDecodeError as exc:
        raise SpecError(source, [Problem((), f"not UTF-8 text ({exc.reason} at byte "
                                             f"{exc.start})")]) from None
    except OSError as exc:
        raise SpecError(source, [Problem((), f"cannot read: {exc.strerror}")]) from None
    return parse_spec_text(text, source)

"""Reading a spec file into plain JSON values, with clear errors for anything malformed.

Beyond ``json.load``: duplicate keys (which JSON parsers silently collapse) are errors, each
reported at its JSON path; ``NaN``/``Infinity`` (which are not JSON) are refused; a UTF-8 byte-order
mark is skipped; the file size is bounded, and every value is held to ``limits`` so a hostile
file gives a message, not a RecursionError or an OOM.

Duplicate keys cost nothing to rule out in the common case: the file is parsed at C speed, and
only when its text has more key tokens than the parsed objects have keys (or the text is too
unusual to count them) is it parsed again, slowly, to say where.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any, List, Optional, Tuple

from param_compute.errors import Problem, SpecError
from param_compute.untrusted_json import key_tokens
from param_compute.files import DIRECTORY, TOO_LARGE, FileRefused, read_bounded
from param_compute.spec import fastpath
from param_compute.spec.limits import (MAX_NESTING_DEPTH, MAX_OPERATORS, _DuplicateKeyDict,
                                       _OutOfRangeNumber)

MAX_SPEC_BYTES = 64 * 1024 * 1024


class _NonStandardConstant(Exception):
    pass


#: Longer integer literals are out of the int64 range anyway (19 digits and a sign).
_MAX_INT_LITERAL = 21


def _parse_int(text: str) -> Any:
    return int(text) if len(text) <= _MAX_INT_LITERAL else _OutOfRangeNumber(text)


def _note_duplicates(pairs: List[Tuple[str, Any]]) -> dict:
    result = dict(pairs)
    if len(result) == len(pairs):  # the common case, at C speed
        return result
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


def _has_duplicate_keys(text: str, value: Any, keys: Optional[int]) -> bool:
    """Whether the JSON ``text`` that parsed into ``value`` (whose objects have ``keys`` keys
    in all, when known) has an object with a repeated key (the parser kept only the last).
    True also when the text is too unusual to tell cheaply (``untrusted_json.key_tokens``)."""
    tokens = key_tokens(text)
    if tokens is None or "\\u" in text:
        return True  # a quote inside a string, or an escape that may write one: count slowly
    # Every '"' now delimits a string, so '":' ends a key: as many as the objects have keys,
    # unless an object had a key twice. json.dumps writes each key once, as '"key": '.
    if keys is None:
        keys = json.dumps(value).count('": ')
    return tokens != keys


def _parse(text: str) -> Any:
    """The parsed text, with ``_DuplicateKeyDict`` objects where keys repeat, and its problems
    (values past the limits, repeated keys)."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise
        value = None  # Python's limit on the digits of an integer: parse slowly to say where
    if type(value) is dict and len(value) > MAX_OPERATORS:
        # Refused whole by the operator limit (said by validation): no reason to look further.
        return value, []
    if value is not None:
        scan = fastpath.scan(value)
        if not _has_duplicate_keys(text, value, scan.keys if scan is not None else None):
            return value, fastpath.scanned_value_problems(value, scan, keep=True)
    try:
        value = json.loads(text, object_pairs_hook=_note_duplicates,
                           parse_constant=_refuse_constant)
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise
        value = json.loads(text, object_pairs_hook=_note_duplicates,
                           parse_constant=_refuse_constant, parse_int=_parse_int)
    return value, fastpath.value_problems(value)


def parse_spec_text(text: str, source: str) -> Any:
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(source, [Problem((), f"spec is {len(text)} bytes, over the "
                                             f"{MAX_SPEC_BYTES}-byte limit")])
    if text.startswith("\ufeff"):
        text = text[1:]  # a UTF-8 byte-order mark, as some editors write
    collecting = gc.isenabled()
    gc.disable()  # parsed JSON has no reference cycles: collections while reading are waste
    try:
        value, problems = _parse(text)
    except json.JSONDecodeError as exc:
        raise SpecError(source, [Problem((), f"malformed JSON at line {exc.lineno} column "
                                             f"{exc.colno}: {exc.msg}")]) from None
    except _NonStandardConstant as exc:
        raise SpecError(source, [Problem((), f"{exc.args[0]} is not valid JSON",
                                         "JSON numbers are finite; write a number")]) from None
    except RecursionError:
        raise SpecError(source, [Problem((), f"nested more than {MAX_NESTING_DEPTH} levels "
                                             "deep")]) from None
    except ValueError as exc:  # anything else the parser refuses, said without a traceback
        raise SpecError(source, [Problem((), f"malformed JSON: {exc}")]) from None
    finally:
        if collecting:
            gc.enable()
    if problems:
        raise SpecError(source, problems)
    return value


def read_spec_file(path: Path) -> Any:
    return spec_from_bytes(read_spec_bytes(path), str(path))


def read_spec_bytes(path: Path) -> bytes:
    """A spec file's bytes, read once (a FIFO or ``<(cat spec)`` can only be read once: the
    caller hashes these same bytes), bounded by ``MAX_SPEC_BYTES``."""
    source = str(path)

    def refused(refusal: FileRefused) -> SpecError:
        reason = refusal.reason
        if refusal.code == DIRECTORY:
            reason = "is a directory, not a spec file"
        elif refusal.code == TOO_LARGE:
            reason = f"spec is {reason}"
        return SpecError(source, [Problem((), reason)])

    # Bounded, FIFOs and devices included (read within the same limit: /dev/zero has no size
    # to check beforehand; a FIFO's open waits for its writer, as a shell's <(...) needs).
    return bytes(read_bounded(path, MAX_SPEC_BYTES, regular_only=False, error=refused))


def spec_from_bytes(data: bytes, source: str) -> Any:
    """A spec's parsed JSON from the bytes ``read_spec_bytes`` read."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        utf16 = bytes(exc.object[:2]) in (b"\xff\xfe", b"\xfe\xff")
        raise SpecError(source, [Problem((), f"not UTF-8 text ({exc.reason} at byte "
                                             f"{exc.start})",
                                         "it looks like UTF-16: save it as UTF-8"
                                         if utf16 else None)]) from None
    return parse_spec_text(text, source)

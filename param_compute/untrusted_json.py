"""Untrusted JSON text parsed within bounds told before the parse: memory, nesting, keys.

A step file or a trace is data from elsewhere, and a JSON text of a few hundred MB can take
ten to thirty times its size once parsed (every ``{}`` a dict, every number an object): a
240 MB step file of small calls parses to 3.5 GB. Capping the bytes alone does not bound that,
so :func:`parse` tells the parse's memory before it starts and refuses a text that would take
more than :data:`MEMORY_FRACTION` of the memory available (:func:`memory_available`: the
kernel's ``MemAvailable``, the address-space limit ``ulimit -v`` less what the process maps,
the cgroup's ``memory.max`` less its use, whichever is least), with a message saying how much
it would take:

* a text of ``N`` characters parses to at most :data:`MAX_EXPANSION` × ``N`` bytes (the
  densest JSON, empty arrays nested in arrays, takes 44 bytes a character; ``[{},{},...]`` 24),
  so a text that small against the budget is parsed at once;
* otherwise its :class:`Shape` is counted (objects, arrays, keys, strings, commas and the bytes
  inside strings, outside strings only: a pass over the text at C speed, a block at a time, a
  fraction of the parse's time), and :meth:`Shape.parsed_bytes` is an upper bound on what
  CPython makes of it (``tests/test_untrusted_json.py`` holds it above the measured size for
  the densest shapes, and within 1.6× of it on real traces and step files).

The text is parsed as ``str`` (the caller drops the bytes first: the bytes, the text and the
parsed value are never all held at once) with the garbage collector paused (parsed JSON has no
cycles; a collection every few thousand objects made a large trace's parse five times slower).
Then every value is checked: nesting at most ``max_depth`` levels (a ``RecursionError`` from
the parser says the same), no object with a key twice (JSON parsers keep the last one
silently: counted, from the key tokens of the text against the keys parsed, and only where they
differ parsed again to say where), integers of at most 4300 digits, and ``NaN``/``Infinity``
only where the caller allows them. Every refusal is a :class:`JsonRefused`: the reason, and
where (a JSON path) when known; each caller words it as its own error, naming its file.
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from param_compute.errors import format_json_path
from param_compute.files import FileRefused, read_bounded
from param_compute.formatting import format_bytes, printable

#: The share of the memory available that one parse may take.
MEMORY_FRACTION = 0.5
#: Bytes a character of JSON text can become at most once parsed (``[[[[]]]]``: 44).
MAX_EXPANSION = 48
#: Bytes every parse may take besides its text's share (the parser's own, a deep nest's frames).
PARSE_OVERHEAD = 2**20
#: Characters scanned at a time for a text's shape (a block of quotes splits into as many
#: pieces: a few bytes each).
_SCAN_BLOCK = 1 << 20
#: Digits of the longest integer Python reads from text (``sys.int_info``, 3.11's default).
MAX_INT_DIGITS = 4300
#: A key token spaced from its colon (``"key" :``; json.dumps never writes one).
_SPACED_KEY = re.compile(r'"[ \t\r\n]+:')
_LONG_INT = re.compile(r"\d{%d}" % (MAX_INT_DIGITS + 1))
_KERNEL_FILE = 1 << 16
Path = Tuple[Any, ...]


class JsonRefused(ValueError):
    """A JSON text not parsed, or parsed and refused: ``reason`` (words without the file) and
    ``where`` (a JSON path, ``()`` for the whole text or where it is not known)."""

    def __init__(self, reason: str, where: Path = ()):
        super().__init__(reason)
        self.reason = reason
        self.where = tuple(where)


# -- memory ---------------------------------------------------------------------------------

def _kernel_number(path: str, key: Optional[str] = None) -> Optional[int]:
    """A number from a kernel file (``/proc``, ``/sys``): the whole file, or the line that
    starts with ``key`` (its value in kB); None where it cannot be read."""
    try:
        text = bytes(read_bounded(path, _KERNEL_FILE)).decode("ascii", "replace")
    except (FileRefused, OSError):
        return None
    if key is None:
        word = text.strip()
        return int(word) if word.isdigit() else None
    for line in text.splitlines():
        if line.startswith(key):
            parts = line.split()
            return int(parts[1]) * 1024 if len(parts) > 1 and parts[1].isdigit() else None
    return None


def _cgroup_room() -> Optional[int]:
    """What this process's cgroup (v2) may still take: ``memory.max`` less ``memory.current``."""
    try:
        text = bytes(read_bounded("/proc/self/cgroup", _KERNEL_FILE)).decode("ascii", "replace")
    except (FileRefused, OSError):
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            folder = "/sys/fs/cgroup" + line[3:].strip()
            limit = _kernel_number(folder.rstrip("/") + "/memory.max")
            used = _kernel_number(folder.rstrip("/") + "/memory.current")
            if limit is not None and used is not None:
                return max(0, limit - used)
    return None


def _address_space_room() -> Optional[int]:
    """What ``RLIMIT_AS`` (``ulimit -v``) leaves this process to map, where it is set."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    mapped = _kernel_number("/proc/self/status", "VmSize:")
    return max(0, soft - mapped) if mapped is not None else None


def memory_available() -> Optional[Tuple[int, str]]:
    """(bytes, what bounds them) this process may still allocate, the least of the host's
    available memory, the address-space limit and the cgroup's limit; None where none can be
    told (no ``/proc``)."""
    found: List[Tuple[int, str]] = []
    host = _kernel_number("/proc/meminfo", "MemAvailable:")
    if host is None:
        try:
            host = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            host = None
    if host is not None:
        found.append((host, "the host's available memory"))
    room = _address_space_room()
    if room is not None:
        found.append((room, "the address-space limit (ulimit -v) less what the process maps"))
    room = _cgroup_room()
    if room is not None:
        found.append((room, "the cgroup's memory limit less its use"))
    return min(found) if found else None


def parse_budget() -> Optional[Tuple[int, int, str]]:
    """(the bytes one parse may take, the bytes available, what bounds them), or None."""
    available = memory_available()
    if available is None:
        return None
    return int(available[0] * MEMORY_FRACTION), available[0], available[1]


# -- the shape of a text ---------------------------------------------------------------------

@dataclass
class Shape:
    """What a JSON text holds, counted outside its strings: enough to bound its parsed size."""

    chars: int = 0
    objects: int = 0
    arrays: int = 0
    keys: int = 0          # ':' outside strings: one per member
    commas: int = 0
    strings: int = 0       # keys included
    string_chars: int = 0  # inside strings, quotes included
    wide: bool = False     # a character (or an escape) that may widen a string's storage

    def parsed_bytes(self) -> int:
        """An upper bound on the bytes CPython's ``json`` makes of the text (64-bit): a dict
        per object (184 bytes with up to 4 members, 48 for each further one, 8 a key), a list
        per array (88 bytes and 16 a slot), 64 bytes and its characters per string value (four
        bytes a character where one may be astral), 32 bytes per other value (every number a
        new object), half a byte per character of a long integer."""
        elements = max(0, self.commas - self.keys + self.objects + self.arrays)
        members = max(0, self.keys - 4 * self.objects)
        values = max(0, self.strings - self.keys)
        scalars = max(0, self.commas + self.keys + 2 - self.strings)
        width = 4 if self.wide else 1
        return (184 * self.objects + 48 * members + 8 * self.keys
                + 88 * self.arrays + 16 * elements
                + 64 * values + width * self.string_chars
                + 32 * scalars + (self.chars - self.string_chars) // 2 + PARSE_OVERHEAD)

    def words(self) -> str:
        return (f"{self.objects:,} objects, {self.arrays:,} arrays, {self.strings:,} strings "
                f"in {format_bytes(self.chars)} of JSON")


def shape_of(text: str) -> Shape:
    """The :class:`Shape` of ``text``, a block at a time (each block's strings cut out with
    C-speed splits on the quote; escaped backslashes and quotes taken out first, so a quote
    inside a string never counts as one)."""
    shape = Shape(chars=len(text), wide=not text.isascii() or "\\u" in text)
    inside, position, size = False, 0, len(text)
    while position < size:
        end = min(position + _SCAN_BLOCK, size)
        while end < size and text[end - 1] == "\\":  # an escape is never cut in two
            end += 1
        block = text[position:end]
        if "\\" in block:
            block = block.replace("\\\\", "").replace('\\"', "")
        pieces = block.split('"')
        outside = "".join(pieces[1 if inside else 0::2])
        quotes = len(pieces) - 1
        shape.strings += (quotes + (0 if inside else 1)) // 2  # the quotes that open one
        shape.string_chars += (end - position) - len(outside)
        shape.objects += outside.count("{")
        shape.arrays += outside.count("[")
        shape.keys += outside.count(":")
        shape.commas += outside.count(",")
        inside = inside != (quotes % 2 == 1)
        position = end
    return shape


def check_memory(text: str, limit: Optional[int] = None) -> Optional[Shape]:
    """Refuse (``JsonRefused``) a text whose parse would take more than the budget
    (:func:`parse_budget`, or ``limit`` bytes where given): see the module's doc. The text's
    :class:`Shape` where it was counted, else None."""
    if limit is not None:
        budget: Optional[Tuple[int, int, str]] = (limit, limit, "the limit given")
    else:
        budget = parse_budget()
    if budget is None or len(text) * MAX_EXPANSION + PARSE_OVERHEAD <= budget[0]:
        return None
    shape = shape_of(text)
    needed = shape.parsed_bytes()
    if needed > budget[0]:
        raise JsonRefused(
            f"parsing it would take an estimated {format_bytes(needed)} of memory "
            f"({shape.words()}), over the {format_bytes(budget[0])} one parse may take here "
            f"({MEMORY_FRACTION:.0%} of {format_bytes(budget[1])}: {budget[2]}); nothing "
            "was parsed")
    return shape


# -- parsing -------------------------------------------------------------------------------

def decode(data) -> str:
    """UTF-8 bytes (a byte-order mark skipped) as text; ``JsonRefused`` naming the bad byte."""
    try:
        return data.decode("utf-8-sig") if not isinstance(data, str) else data
    except UnicodeDecodeError as exc:
        raise JsonRefused(f"not UTF-8 text (byte {exc.start})") from None
    except MemoryError:
        raise JsonRefused(f"ran out of memory decoding its {format_bytes(len(data))} of "
                          "text") from None


def _refuse_constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not valid JSON (numbers must be finite)")


def _deep_or_keys(value: Any, limit: int) -> Tuple[bool, int]:
    """(whether ``value`` nests more than ``limit`` levels, the keys of its objects): level by
    level, containers only (a fraction of the parse's time; iterative, so any depth is safe)."""
    level, depth, keys = [value], 0, 0
    while level:
        depth += 1
        if depth > limit:
            return True, keys
        below: list = []
        add = below.append
        for node in level:
            if type(node) is dict:
                keys += len(node)
                items = node.values()
            else:
                items = node
            for item in items:
                if type(item) is dict or type(item) is list:
                    add(item)
        level = below
    return False, keys


def deep_place(value: Any, limit: int) -> Path:
    """Where ``value`` nests deeper than ``limit``: the path of its first two levels."""
    tops = value.items() if isinstance(value, dict) else enumerate(value)
    for top, item in tops:
        seconds = (item.items() if isinstance(item, dict) else enumerate(item)
                   if isinstance(item, list) else ())
        for second, below in seconds:
            if (type(below) is dict or type(below) is list) and \
                    _deep_or_keys(below, limit - 2)[0]:
                return (top, second)
        if (type(item) is dict or type(item) is list) and _deep_or_keys(item, limit - 1)[0]:
            return (top,)
    return ()


def key_tokens(text: str) -> Optional[int]:
    """The key tokens of ``text`` counted cheaply, or None where that cannot tell: ``":``
    ends a key unless its quote is escaped (``\\":``, as JSON inside a string has it; an
    escaped backslash before a quote, ``\\\\":``: None), and no key may be spaced from its
    colon (None)."""
    if '\\\\":' in text or _SPACED_KEY.search(text):
        return None
    return text.count('":') - text.count('\\":')


class _Duplicate(dict):
    """An object parsed with a key twice (its first repeated key)."""

    repeated: str = ""


def _note_duplicates(pairs: List[Tuple[str, Any]]) -> dict:
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    seen: set = set()
    marked = _Duplicate(value)
    marked.repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
    return marked


def _first_duplicate(value: Any) -> Optional[Tuple[Path, str]]:
    """The path of the first object (breadth first) that had a key twice, and the key."""
    level: List[Tuple[Path, Any]] = [((), value)]
    while level:
        below: List[Tuple[Path, Any]] = []
        for path, node in level:
            if isinstance(node, _Duplicate):
                return path, node.repeated
            items = node.items() if isinstance(node, dict) else enumerate(node)
            below.extend((path + (key,), item) for key, item in items
                         if isinstance(item, (dict, list)))
        level = below
    return None


def _loads(text: str, constants: bool, invalid: str, max_depth: int, **hooks) -> Any:
    try:
        return json.loads(text, parse_constant=None if constants else _refuse_constant,
                          **hooks)
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"{invalid}: {exc.msg} at line {exc.lineno} column {exc.colno}"
                          ) from None
    except RecursionError:
        raise JsonRefused(f"nested more than {max_depth} levels deep") from None
    except MemoryError:
        raise JsonRefused(f"ran out of memory while parsing it ({format_bytes(len(text))} of "
                          "JSON; the memory available changed since it was checked)") from None
    except JsonRefused:
        raise
    except ValueError as exc:
        if "digits" in str(exc):  # Python's limit on the digits of an integer literal
            raise JsonRefused(f"an integer of more than {MAX_INT_DIGITS} digits (no value "
                              "here needs one)") from None
        raise JsonRefused(f"{invalid}: {printable(exc, 200)}") from None


def parse(text: str, max_depth: int, constants: bool = False, invalid: str = "not JSON",
          memory_limit: Optional[int] = None) -> Any:
    """The JSON value of ``text`` (``str``: see :func:`decode`), within the bounds the
    module's doc lists; ``constants``: ``NaN`` and ``Infinity`` allowed; ``invalid``: the
    words for text that is no JSON; ``memory_limit``: bytes instead of the budget (tests)."""
    check_memory(text, memory_limit)
    collecting = gc.isenabled()
    gc.disable()  # parsed JSON has no cycles: collections over it while it is made and walked
    try:          # are waste (they made a large trace's parse five times slower)
        return _parse(text, max_depth, constants, invalid)
    finally:
        if collecting:
            gc.enable()


def _parse(text: str, max_depth: int, constants: bool, invalid: str) -> Any:
    if not hasattr(sys, "get_int_max_str_digits") and _LONG_INT.search(text):
        # Python before 3.11 reads any integer, in time quadratic in its digits
        raise JsonRefused(f"an integer of more than {MAX_INT_DIGITS} digits (no value here "
                          "needs one)")
    tokens = key_tokens(text)
    value = _loads(text, constants, invalid, max_depth)
    too_deep, keys = ((False, 0) if type(value) is not dict and type(value) is not list
                      else _deep_or_keys(value, max_depth))
    if too_deep:
        where = deep_place(value, max_depth)
        raise JsonRefused(f"nested more than {max_depth} levels deep" + (
            f" (at {printable(format_json_path(where), 80)})" if where else ""))
    if tokens is None or tokens != keys:
        if tokens is None:
            tokens = shape_of(text).keys
        if tokens != keys:  # an object had a key twice: parsed again, slowly, to say where
            del value
            found = _first_duplicate(_loads(text, constants, invalid, max_depth,
                                            object_pairs_hook=_note_duplicates))
            where, key = found if found is not None else ((), "?")
            raise JsonRefused(f"duplicate key {printable(repr(key), 80)} (an object may name "
                              "each key once; a JSON reader would keep only the last)", where)
    return value

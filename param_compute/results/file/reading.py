"""Reading results files: bounded scans of their lines, the torn-line rule, the whole file.

See :mod:`param_compute.results.file` for the format and the rules.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from param_compute.plan.runkey import key_of

#: Lines longer than this (bytes, line break included) are skipped as damaged. A record holds
#: every measured time of its passes; 64 MiB is some millions of them.
MAX_LINE_BYTES = 64 * 2**20

#: Line kinds.
HEADER, RECORD, FINISH, RESUME, OTHER = "header", "record", "finish", "resume", "other"

_CHUNK = 1 << 16
PathLike = Union[str, "os.PathLike[str]"]


class ResultsFileError(Exception):
    """A file cannot be read (or written) as a results file; the message says why."""


@dataclass(frozen=True)
class LineProblem:
    """A line that can't be used: where it is and what is wrong with it."""

    line: int  # 1-based
    offset: int  # byte offset of its first byte
    size: int  # bytes, line break included
    reason: str
    torn: bool = False  # the last line, cut short by a kill (see the module docstring)

    def describe(self, path: PathLike) -> str:
        return f"{path}:{self.line}: {self.reason}"


@dataclass
class Line:
    """One scanned line: its JSON object, or the problem that makes it unusable."""

    number: int
    offset: int
    size: int
    value: Optional[Dict[str, Any]] = None
    problem: Optional[LineProblem] = None

    @property
    def kind(self) -> Optional[str]:
        return None if self.value is None else line_kind(self.value)


def line_kind(value: Dict[str, Any]) -> str:
    """Which kind of line a JSON object is (``HEADER``, ``RECORD``, ``FINISH``, ``RESUME`` or
    ``OTHER``: a profiler batch line...)."""
    if "run_options" in value and "sys_info" in value:
        return HEADER
    if "op_name" in value and "id" in value:
        return RECORD
    if "finish_time" in value:
        return FINISH
    if "resume_time" in value:
        return RESUME
    return OTHER


#: Fields of a run record the tools read, and the JSON type each must have when present.
_RECORD_TEXT = ("op_name", "id", "status")
_RECORD_OBJECTS = ("config", "metric", "stats", "throughput", "error", "target", "verify")
_NAMES = {dict: "an object", list: "an array", str: "a string"}


def schema_problem(value: Dict[str, Any]) -> Optional[str]:
    """What makes a parsed line unusable for the tools (wrong types where they read), or None:
    a header's ``run_options`` and ``sys_info`` are objects; a record's ``op_name``, ``id`` and
    ``status`` are strings, its ``config``, ``metric``, ``stats``... objects, and each pass of
    ``metric``/``stats``/``throughput`` an object too."""
    kind = line_kind(value)
    if kind == HEADER:
        for key in ("run_options", "sys_info"):
            if not isinstance(value[key], dict):
                return f"header's {key} is not an object"
        return None
    if kind != RECORD:
        return None
    for key in _RECORD_TEXT:
        if key in value and not isinstance(value[key], str):
            return f"run record's {key} is not a string"
    for key in _RECORD_OBJECTS:
        if value.get(key) is not None and not isinstance(value[key], dict):
            return f"run record's {key} is not an object"
    for key in ("metric", "stats", "throughput"):
        for name, entry in (value.get(key) or {}).items():
            if not isinstance(entry, dict):
                return f"run record's {key}.{name} is not an object"
    return None


# --- reading --------------------------------------------------------------------------------

def _open_regular(path: Path):
    """A binary stream of a regular file; ResultsFileError for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ResultsFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ResultsFileError(f"{path}: is a directory, not a results file") from None
    except OSError as exc:
        raise ResultsFileError(f"{path}: cannot open: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(mode) else (
            "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode)
            or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
        raise ResultsFileError(f"{path}: is {what}, not a regular file; a results file is a "
                               "regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _skip_rest(stream) -> Tuple[int, bool]:
    """Read past the rest of an over-long line: (bytes skipped, whether a line break ended it)."""
    skipped = 0
    while True:
        chunk = stream.readline(_CHUNK)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped, bool(chunk)


def _parse(raw: bytes) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(object, None) or (None, what is wrong)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start + 1})"
    try:
        value = json.loads(text)
    except ValueError as exc:
        message = getattr(exc, "msg", str(exc))
        column = getattr(exc, "colno", None)
        return None, f"not JSON: {message}" + (f" (column {column})" if column else "")
    except RecursionError:
        return None, "not usable: JSON nested too deeply"
    if not isinstance(value, dict):
        kind = {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
            type(value), "number")
        return None, f"a JSON {kind}, not an object"
    return value, None


def scan_lines(path: PathLike, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[Line]:
    """Every non-blank line of a file, in order, with its object or its problem (the torn-line
    rule applied). Holds one line at a time. Raises :class:`ResultsFileError` when the file
    can't be opened or is not a regular file."""
    path = Path(path)
    with _open_regular(path) as stream:
        number = offset = 0
        while True:
            raw = stream.readline(max_line_bytes)
            if not raw:
                return
            number += 1
            start, size = offset, len(raw)
            ended = raw.endswith(b"\n")
            if not ended and size >= max_line_bytes:  # over-long: skip the rest unread
                skipped, ended = _skip_rest(stream)
                size += skipped
                offset += size
                yield Line(number, start, size, problem=LineProblem(
                    number, start, size, f"longer than {max_line_bytes} bytes: skipped",
                    torn=not ended))
                continue
            offset += size
            if not raw.strip():
                continue
            value, why = _parse(raw)
            if why is None:
                why = schema_problem(value)
                if why is None:
                    yield Line(number, start, size, value)
                    continue
                ended = True  # whole JSON of the wrong shape: damaged, not torn
            if why is None:
                yield Line(number, start, size, value)
            elif not ended:  # the last line, without a line break, not whole: torn
                yield Line(number, start, size, problem=LineProblem(
                    number, start, size, f"torn last line (no line break, {why}): a run "
                                         "killed mid-write", torn=True))
            else:
                yield Line(number, start, size, problem=LineProblem(number, start, size, why))


def _not_results(path: Path, why: str) -> ResultsFileError:
    return ResultsFileError(f"{path}: not a results file ({why}); expected the JSON Lines "
                            "that python -m param_compute.run_benchmark writes")


def iter_results(path: PathLike, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[Line]:
    """:func:`scan_lines` of a results file: the first line must be a usable header, else
    :class:`ResultsFileError`; an empty file is an error too."""
    path = Path(path)
    first = True
    for line in scan_lines(path, max_line_bytes):
        if first:
            first = False
            if line.problem is not None:
                raise _not_results(path, f"line {line.number}: {line.problem.reason}"
                                   if line.problem.torn else
                                   f"line {line.number} is {line.problem.reason}")
            if line.kind != HEADER:
                raise _not_results(path, "its first line is not a header with run_options "
                                         "and sys_info")
        yield line
    if first:
        raise _not_results(path, "it is empty")


@dataclass
class ResultsFile:
    """Everything a results file holds, in file order, and what could not be used."""

    path: Path
    header: Dict[str, Any]
    records: List[Dict[str, Any]] = field(default_factory=list)
    finish: Optional[Dict[str, Any]] = None  # the last finish line
    headers: List[Dict[str, Any]] = field(default_factory=list)  # every header (appended files)
    finishes: List[Dict[str, Any]] = field(default_factory=list)
    record_lines: List[int] = field(default_factory=list)  # line number of each record
    markers: List[Dict[str, Any]] = field(default_factory=list)  # resume lines
    extras: List[Tuple[int, Dict[str, Any]]] = field(default_factory=list)  # other lines
    problems: List[LineProblem] = field(default_factory=list)  # torn last line included

    @property
    def torn(self) -> Optional[LineProblem]:
        return next((p for p in self.problems if p.torn), None)

    @property
    def torn_line(self) -> bool:
        return self.torn is not None

    @property
    def damaged(self) -> List[LineProblem]:
        """Problems other than a torn last line."""
        return [p for p in self.problems if not p.torn]

    @property
    def sys_info(self) -> Dict[str, Any]:
        return self.header.get("sys_info") or {}

    @property
    def run_options(self) -> Dict[str, Any]:
        return self.header.get("run_options") or {}

    def warnings(self) -> List[str]:
        """One line per problem: ``FILE:LINE: what`` and that the line was set aside."""
        return [f"{p.describe(self.path)} (line not used)" for p in self.problems]


def read_results(path: PathLike, max_line_bytes: int = MAX_LINE_BYTES) -> ResultsFile:
    """Read a results file; raise :class:`ResultsFileError` with a plain message if it is not
    one. Damaged lines are in ``problems``, not silently dropped."""
    path = Path(path)
    out: Optional[ResultsFile] = None
    seen: Dict[Tuple[str, str], int] = {}
    for line in iter_results(path, max_line_bytes):
        if out is None:
            out = ResultsFile(path, line.value)
        if line.problem is not None:
            out.problems.append(line.problem)
            continue
        kind = line.kind
        if kind == HEADER:
            out.headers.append(line.value)
            seen = {}  # one run (header to finish): each op|id once
        elif kind == RECORD:
            key = (line.value["op_name"], line.value["id"])
            if key in seen:
                out.problems.append(LineProblem(
                    line.number, line.offset, line.size, f"duplicate run {key_of(*key)} "
                    f"(also on line {seen[key]} of the same run)"))
                continue
            seen[key] = line.number
            out.records.append(line.value)
            out.record_lines.append(line.number)
        elif kind == FINISH:
            out.finishes.append(line.value)
        elif kind == RESUME:
            out.markers.append(line.value)
        else:
            out.extras.append((line.number, line.value))
    out.finish = out.finishes[-1] if out.finishes else None
    return out


#: The name the tools have used so far.
load_results = read_results


def read_results_warned(path: PathLike) -> ResultsFile:
    """:func:`read_results` for a command-line tool: each damaged line is printed as a
    ``warning: FILE:LINE: ...`` on stderr. Raises ``ResultsFileError``."""
    results = read_results(path)
    for warning in results.warnings():
        print(f"warning: {warning}", file=sys.stderr)
    return results

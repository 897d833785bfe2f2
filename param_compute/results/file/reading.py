"""Reading results files: bounded scans of their lines, the torn-line rule, the whole file.

See :mod:`param_compute.results.file` for the format and the rules.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from param_compute.files import FileRefused, open_regular
from param_compute.plan.runkey import key_of
from param_compute.results.file.schema import (BATCH, FINISH, HEADER, RECORDS, RESUME, STEP,
                                               line_kind, schema_problem, upgraded)
from param_compute.results.file.units import UnitProblem, declared, header_in_ms, record_in_ms

#: Lines longer than this (bytes, line break included) are skipped as damaged. A record holds
#: every measured time of its passes; 64 MiB is some millions of them.
MAX_LINE_BYTES = 64 * 2**20

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
    """One scanned line: its JSON object and its kind (``HEADER``, ``RUN``, ``STEP``...: the
    line's own ``kind``, or the kind its keys say in a file written before kinds), or the
    problem that makes it unusable (and no kind)."""

    number: int
    offset: int
    size: int
    value: Optional[Dict[str, Any]] = None
    problem: Optional[LineProblem] = None
    kind: Optional[str] = None
    #: Milliseconds per time unit of the run the line belongs to (``units``): a record's
    #: times were multiplied by it (1: written in milliseconds).
    ms_per_unit: float = 1.0


# --- reading --------------------------------------------------------------------------------

def _refused(refused: FileRefused) -> ResultsFileError:
    reason = refused.reason
    if refused.kind is not None:
        reason += "; a results file is a regular file"
    return ResultsFileError(f"{refused.path}: {reason}")


def open_results(path: PathLike, update: bool = False):
    """A binary stream of a results file (``update``: to cut its torn tail too): a regular
    file only, never waited on (``files.open_regular``); ResultsFileError for anything else."""
    return open_regular(path, update=update, error=_refused)


def _skip_rest(stream) -> Tuple[int, bool]:
    """Read past the rest of an over-long line: (bytes skipped, whether a line break ended it)."""
    skipped = 0
    while True:
        chunk = stream.readline(_CHUNK)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped, bool(chunk)


def _parse(raw: bytes) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(object, None) or (None, what is wrong); an old line in today's shape (``upgraded``)."""
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
    return upgraded(value), None


def scan_lines(path: PathLike, max_line_bytes: Optional[int] = None) -> Iterator[Line]:
    """Every non-blank line of a file, in order, with its object or its problem (the torn-line
    rule applied). Holds one line at a time. Raises :class:`ResultsFileError` when the file
    can't be opened or is not a regular file. ``max_line_bytes``: :data:`MAX_LINE_BYTES` (read
    when called) unless given."""
    path = Path(path)
    if max_line_bytes is None:
        max_line_bytes = MAX_LINE_BYTES
    with open_results(path) as stream:
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
                    yield Line(number, start, size, value, kind=line_kind(value))
                    continue
                ended = True  # whole JSON of the wrong shape: damaged, not torn
            if not ended:  # the last line, without a line break, not whole: torn
                yield Line(number, start, size, problem=LineProblem(
                    number, start, size, f"torn last line (no line break, {why}): a run "
                                         "killed mid-write", torn=True))
            else:
                yield Line(number, start, size, problem=LineProblem(number, start, size, why))


def _not_results(path: Path, why: str) -> ResultsFileError:
    return ResultsFileError(f"{path}: not a results file ({why}); expected the JSON Lines "
                            "that python -m param_compute.run_benchmark writes")


def iter_results(path: PathLike, max_line_bytes: Optional[int] = None) -> Iterator[Line]:
    """:func:`scan_lines` of a results file: the first line must be a usable header, else
    :class:`ResultsFileError`; an empty file is an error too. Records come in milliseconds
    whatever unit their run's header declares (``units``). A first header declaring a unit
    not known is a :class:`ResultsFileError` naming its line; a later one (an appended run) is
    an unusable line, and so is each record of its run (their times cannot be read)."""
    path = Path(path)
    first = True
    factor: Optional[float] = 1.0  # None: the run's header declares a unit not known
    unknown_at = 0
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
        if line.kind == HEADER:
            try:
                factor = declared(line.value)
            except UnitProblem as exc:
                if line.number == 1:
                    raise ResultsFileError(f"{path}:{line.number}: {exc}") from None
                factor, unknown_at = None, line.number
                line = Line(line.number, line.offset, line.size, problem=LineProblem(
                    line.number, line.offset, line.size, str(exc)))
            else:
                if factor != 1.0:
                    header_in_ms(line.value)
        elif line.kind in RECORDS and factor != 1.0:
            if factor is None:
                line = Line(line.number, line.offset, line.size, problem=LineProblem(
                    line.number, line.offset, line.size, f"a record of the run whose header "
                    f"(line {unknown_at}) declares a time unit not known: its times cannot "
                    "be read"))
            else:
                line.value = record_in_ms(line.value, factor)
                line.ms_per_unit = factor
        yield line
    if first:
        raise _not_results(path, "it is empty")


@dataclass
class ResultsFile:
    """Everything a results file holds, in file order, and what could not be used."""

    path: Path
    header: Dict[str, Any]
    records: List[Dict[str, Any]] = field(default_factory=list)  # run and step records
    finish: Optional[Dict[str, Any]] = None  # the last finish line
    headers: List[Dict[str, Any]] = field(default_factory=list)  # every header (appended files)
    finishes: List[Dict[str, Any]] = field(default_factory=list)
    record_lines: List[int] = field(default_factory=list)  # line number of each record
    markers: List[Dict[str, Any]] = field(default_factory=list)  # resume lines
    steps: List[Tuple[int, Dict[str, Any]]] = field(default_factory=list)  # step records
    batches: List[Tuple[int, Dict[str, Any]]] = field(default_factory=list)  # profiler lines
    extras: List[Tuple[int, Dict[str, Any]]] = field(default_factory=list)  # lines of no kind
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
    def step(self) -> Optional[Dict[str, Any]]:
        """The last step record (the step replay's), if any."""
        return self.steps[-1][1] if self.steps else None

    @property
    def sys_info(self) -> Dict[str, Any]:
        return self.header.get("sys_info") or {}

    @property
    def run_options(self) -> Dict[str, Any]:
        return self.header.get("run_options") or {}

    def warnings(self) -> List[str]:
        """One line per problem: ``FILE:LINE: what`` and that the line was set aside."""
        return [f"{p.describe(self.path)} (line not used)" for p in self.problems]


#: The most problems a :class:`ResultsStream` keeps (each is reported as it is met; beyond
#: this only counted, so a file of damaged lines cannot grow the reader's memory).
MAX_KEPT_PROBLEMS = 1000

ProblemHandler = Callable[[Path, LineProblem], None]


class ResultsStream:
    """The typed reader: one pass over a results file, a line at a time, memory bounded by the
    number of runs (the duplicate check keeps each run's key), not by records or bytes.

    Opening reads the header (:class:`ResultsFileError` if the file is not a results file).
    :meth:`lines` yields every usable line after it as a :class:`Line` with its number and
    kind (``HEADER``, ``RUN``, ``STEP``, ``FINISH``, ``RESUME``, ``BATCH`` or ``OTHER``), in
    file order; iterating the stream itself yields ``(line number, record)`` for the records:
    every run's, the step replay's included (a run like any other, whose ``step`` holds its
    details). Either way the other lines are collected as they pass (``headers``,
    ``finishes``, ``markers``, ``batches``, ``extras``), and the step records in ``steps`` too.
    Each unusable line (damaged, wrong types, a garbled step record, a duplicate run within one
    run) is passed to ``on_problem`` as it is met and counted in ``problem_count``; the first
    :data:`MAX_KEPT_PROBLEMS` are kept in ``problems``.
    """

    def __init__(self, path: PathLike, max_line_bytes: Optional[int] = None,
                 on_problem: Optional[ProblemHandler] = None):
        self.path = Path(path)
        self.on_problem = on_problem
        self.headers: List[Dict[str, Any]] = []
        self.finishes: List[Dict[str, Any]] = []
        self.markers: List[Dict[str, Any]] = []
        self.steps: List[Tuple[int, Dict[str, Any]]] = []
        self.batches: List[Tuple[int, Dict[str, Any]]] = []
        self.extras: List[Tuple[int, Dict[str, Any]]] = []
        self.problems: List[LineProblem] = []
        self.problem_count = 0
        self.records_read = 0
        self._lines = iter_results(self.path, max_line_bytes)
        first = next(self._lines)  # raises ResultsFileError unless a header
        self.header: Dict[str, Any] = first.value
        self.headers.append(first.value)
        self.line: Line = first  # the line of the record last yielded (its offset and size)
        self._started = False

    @property
    def finish(self) -> Optional[Dict[str, Any]]:
        """The last finish line read so far."""
        return self.finishes[-1] if self.finishes else None

    @property
    def step(self) -> Optional[Dict[str, Any]]:
        """The last step record read so far."""
        return self.steps[-1][1] if self.steps else None

    @property
    def run_options(self) -> Dict[str, Any]:
        return self.header.get("run_options") or {}

    @property
    def sys_info(self) -> Dict[str, Any]:
        return self.header.get("sys_info") or {}

    def _problem(self, problem: LineProblem) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_KEPT_PROBLEMS:
            self.problems.append(problem)
        if self.on_problem is not None:
            self.on_problem(self.path, problem)

    def lines(self) -> Iterator[Line]:
        """Every usable line after the first header, typed (see the class's doc)."""
        if self._started:
            raise RuntimeError(f"{self.path}: a results stream is read once")
        self._started = True
        seen: Dict[Tuple[str, str], int] = {}
        collected = {FINISH: self.finishes, RESUME: self.markers}
        for line in self._lines:
            if line.problem is not None:
                self._problem(line.problem)
                continue
            kind = line.kind
            if kind == HEADER:
                self.headers.append(line.value)
                seen = {}  # one run (header to finish): each op|id once
            elif kind in RECORDS:
                key = (line.value["op_name"], line.value["id"])
                if key in seen:
                    self._problem(LineProblem(
                        line.number, line.offset, line.size, f"duplicate run {key_of(*key)} "
                        f"(also on line {seen[key]} of the same run)"))
                    continue
                seen[key] = line.number
                self.records_read += 1
                self.line = line
                if kind == STEP:
                    self.steps.append((line.number, line.value))
            elif kind in collected:
                collected[kind].append(line.value)
            else:
                (self.batches if kind == BATCH else self.extras).append((line.number,
                                                                         line.value))
            yield line

    def __iter__(self) -> Iterator[Tuple[int, Dict[str, Any]]]:
        for line in self.lines():
            if line.kind in RECORDS:
                yield line.number, line.value


class LineReader:
    """Reads single lines back from results files at the offsets a :class:`ResultsStream` gave
    (a merge writes runs in another order than it read them): regular files only, a few kept
    open, each line parsed and checked again (a file changed meanwhile is an error)."""

    def __init__(self, max_open: int = 16):
        self.max_open = max_open
        self._open: Dict[Path, Any] = {}

    def read(self, path: PathLike, number: int, offset: int, size: int,
             ms_per_unit: float = 1.0) -> Dict[str, Any]:
        """The object on line ``number`` (``size`` bytes from byte ``offset``) of ``path``;
        a record in milliseconds as the stream gave it (its line's ``ms_per_unit``)."""
        path = Path(path)
        stream = self._open.pop(path, None)
        if stream is None:
            if len(self._open) >= self.max_open:
                oldest = next(iter(self._open))
                self._open.pop(oldest).close()
            stream = open_results(path)
        self._open[path] = stream  # the most recently used last
        stream.seek(offset)
        raw = stream.read(size)
        value, why = _parse(raw) if len(raw) == size else (None, "cut short")
        if why is None:
            why = schema_problem(value)
        if why is not None:
            raise ResultsFileError(f"{path}:{number}: changed while being read ({why})")
        return record_in_ms(value, ms_per_unit)

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()


def warn_problem(path: Path, problem: LineProblem) -> None:
    """``on_problem`` of the command-line tools: ``warning: FILE:LINE: what (line not used)``
    on stderr."""
    print(f"warning: {problem.describe(path)} (line not used)", file=sys.stderr)


def stream_results(path: PathLike, warn: bool = True,
                   max_line_bytes: Optional[int] = None) -> ResultsStream:
    """A :class:`ResultsStream` for a command-line tool (each unusable line warned on stderr
    as it is met unless ``warn`` is false). Raises ``ResultsFileError``."""
    return ResultsStream(path, max_line_bytes, warn_problem if warn else None)


def read_results(path: PathLike, max_line_bytes: Optional[int] = None) -> ResultsFile:
    """Read a whole results file into memory (for tools that need every record at once; the
    streaming tools use :class:`ResultsStream`); raise :class:`ResultsFileError` with a plain
    message if it is not one. Damaged lines are in ``problems``, not silently dropped."""
    stream = ResultsStream(path, max_line_bytes)
    out = ResultsFile(stream.path, stream.header)
    problems: List[LineProblem] = []
    stream.on_problem = lambda _, problem: problems.append(problem)
    for number, record in stream:
        out.records.append(record)
        out.record_lines.append(number)
    out.headers, out.finishes, out.markers = stream.headers, stream.finishes, stream.markers
    out.steps, out.batches, out.extras = stream.steps, stream.batches, stream.extras
    out.problems, out.finish = problems, stream.finish
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

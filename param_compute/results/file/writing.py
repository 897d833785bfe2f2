"""Writing results files: one encoded line per write, tails repaired before appending.

See :mod:`param_compute.results.file` for the format and the rules.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, ContextManager, Dict, List, Optional, Tuple

from param_compute.files import MISSING, FileRefused, LineFile, open_regular
from param_compute.results.file.reading import (_CHUNK, MAX_LINE_BYTES, LineProblem, PathLike,
                                                ResultsFileError, _parse)
from param_compute.results.file.schema import FINISH, FORMAT_VERSION, HEADER, RESUME, RUN

#: Sync policies of :class:`ResultsWriter`: flush lines only (the OS writes them out), also
#: fsync the header and the finish line (default), or fsync every flushed line.
SYNC_NONE, SYNC_ENDS, SYNC_EVERY = "none", "ends", "every"


def _plain(value: Any) -> Any:
    """Last-resort conversion so a header or config never holds a Python repr."""
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


#: One encoder for every line (``json.dumps`` with options builds a new one per call). Records
#: are trees built from JSON values, so the circular-reference bookkeeping is skipped; a cycle
#: would still fail, with a RecursionError.
_ENCODER = json.JSONEncoder(separators=(", ", ": "), default=_plain, check_circular=False)


def _value_encoder(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` from one C encoder made once (``encode`` makes a new one for every
    value, a third of a dry-run line's encoding); ``encode`` itself where the C accelerator is
    absent."""
    make = json.encoder.c_make_encoder
    if make is None or encoder.check_circular or encoder.indent is not None:
        return encoder.encode
    chunks = make(None, encoder.default, json.encoder.encode_basestring_ascii
                  if encoder.ensure_ascii else json.encoder.encode_basestring, None,
                  encoder.key_separator, encoder.item_separator, encoder.sort_keys,
                  encoder.skipkeys, encoder.allow_nan)
    join = "".join

    def encode_value(value: Any) -> str:
        """A value's JSON text, as the results lines write it."""
        return join(chunks(value, 0))

    return encode_value


encode_value = _value_encoder(_ENCODER)
#: A string's JSON text, as the results lines write it.
encode_text = (json.encoder.encode_basestring_ascii if _ENCODER.ensure_ascii
               else json.encoder.encode_basestring)


def encode_line(value: Dict[str, Any]) -> str:
    """One results line: the object's JSON and a line break."""
    return encode_value(value) + "\n"


def with_kind(value: Dict[str, Any], kind: Optional[str]) -> Dict[str, Any]:
    """``value`` saying its ``kind`` first (as it is where it says one already, or where no
    kind is given)."""
    if kind is None or "kind" in value:
        return value
    return {"kind": kind, **value}


def header_line(header: Dict[str, Any]) -> Dict[str, Any]:
    """A header as this version writes it: its kind and the format version first (whatever
    version a header read from another file said)."""
    return {"kind": HEADER, "format_version": FORMAT_VERSION,
            **{key: value for key, value in header.items()
               if key not in ("kind", "format_version")}}


def _last_line_start(stream, end: int) -> int:
    """Offset just after the last line break before ``end`` (0 when there is none)."""
    position = end
    while position > 0:
        size = min(_CHUNK, position)
        position -= size
        stream.seek(position)
        chunk = stream.read(size)
        index = chunk.rfind(b"\n")
        if index >= 0:
            return position + index + 1
    return 0


def repair_tail(path: PathLike, max_line_bytes: int = MAX_LINE_BYTES) -> Optional[LineProblem]:
    """Make a results file safe to append to: cut a torn last line off (returned: where it was,
    its size), or end a whole last line that lacks its line break. No-op on a missing file."""
    path = Path(path)
    try:  # never through a link, nor a FIFO or device
        stream = open_regular(path, follow_links=False, update=True)
    except FileRefused as refused:
        if refused.code == MISSING:
            return None
        raise ResultsFileError(f"{path}: cannot append to it: {refused.reason}") from None
    with stream:
        end = stream.seek(0, os.SEEK_END)
        if end == 0:
            return None
        stream.seek(end - 1)
        if stream.read(1) == b"\n":
            return None
        start = _last_line_start(stream, end)
        size = end - start
        if size < max_line_bytes:
            stream.seek(start)
            value, _ = _parse(stream.read(size))
            if value is not None:  # whole: only its line break is missing
                stream.seek(end)
                stream.write(b"\n")
                return None
        stream.seek(0)
        number = sum(chunk.count(b"\n") for chunk in iter(lambda: stream.read(_CHUNK), b"")) + 1
        stream.truncate(start)
        return LineProblem(number, start, size, "torn last line (no line break, not whole "
                                                "JSON): cut off", torn=True)


class ResultsWriter:
    """Writes one results file: a header (or a resume marker), lines, a finish line.

    Every line says its kind (the header its format version too): the header, resume marker
    and finish line get theirs here, a run's record has its own (``RunRecord.to_json``), and
    ``write(value, kind=...)`` gives one to a line without. Every line is encoded whole and
    written inside ``critical()`` (a signal guard: the line is complete before a signal is
    handled) through a :class:`files.LineFile` (never through a link; a full disk cuts the file
    back to its last whole line and is a ``ResultsFileError`` naming it).
    ``write(value, flush=False)`` leaves a line to be written with later ones (cheap lines by
    the hundred thousand, such as dry-run records): such lines are gathered and handed over
    together, ``BATCH_LINES`` at a time or before the next flushed line, under one guard (a
    guarded write per line was a tenth of a dry run); only whole lines are ever held.
    ``sync`` (``SYNC_*``) says which flushed lines are also fsynced.
    """

    #: Unflushed lines gathered before they are handed to the stream.
    BATCH_LINES = 64

    def __init__(self, path: PathLike, stream: LineFile, sync: str = SYNC_ENDS,
                 critical: Optional[Callable[[], ContextManager]] = None):
        if sync not in (SYNC_NONE, SYNC_ENDS, SYNC_EVERY):
            raise ValueError(f"sync must be one of none, ends, every; got {sync!r}")
        self.path = Path(path)
        self.stream = stream
        self.sync = sync
        self.critical = critical or nullcontext
        self.lines = 0
        self._gathered: List[str] = []  # unflushed lines not yet handed to the stream

    @classmethod
    def _open(cls, path: PathLike, append: bool, sync: str, critical) -> "ResultsWriter":
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            stream = LineFile(path, append=append, truncate=not append)
        except FileRefused as refused:
            raise ResultsFileError(f"{path}: cannot write: {refused.reason}") from None
        except OSError as exc:
            raise ResultsFileError(f"{path}: cannot write: {exc.strerror or exc}") from None
        return cls(path, stream, sync, critical)

    @classmethod
    def create(cls, path: PathLike, header: Dict[str, Any], append: bool = False,
               sync: str = SYNC_ENDS, critical=None) -> "ResultsWriter":
        """A new results file starting with ``header`` (``append``: after what the file holds,
        a torn last line cut off first)."""
        if append:
            repair_tail(path)
        writer = cls._open(path, append, sync, critical)
        writer.write(header_line(header), durable=True)
        return writer

    @classmethod
    def resume(cls, path: PathLike, marker: Dict[str, Any], sync: str = SYNC_ENDS,
               critical=None) -> Tuple["ResultsWriter", Optional[LineProblem]]:
        """Continue a results file: repair its tail, append the resume ``marker``. Returns the
        writer and the torn line cut off, if any."""
        cut = repair_tail(path)
        writer = cls._open(path, True, sync, critical)
        writer.write(marker, durable=True, kind=RESUME)
        return writer, cut

    def write(self, value: Dict[str, Any], flush: bool = True, durable: bool = False,
              kind: Optional[str] = None) -> None:
        """One whole line (``kind``: the kind of a line that does not say one); ``flush``: to
        the OS now (with every line gathered before it); ``durable``: to the disk now (with
        the policy ``ends``; ``every`` makes every flushed line durable, ``none`` none)."""
        self.write_line(encode_line(with_kind(value, kind)), flush, durable)

    def write_line(self, line: str, flush: bool = True, durable: bool = False) -> None:
        """``write`` of a line already encoded: one JSON object's text (its kind in it) and a
        line break, as ``encode_line`` makes it."""
        if not (flush or durable):
            gathered = self._gathered
            gathered.append(line)
            self.lines += 1
            if len(gathered) >= self.BATCH_LINES:
                self._hand_over(flush=False)
            return
        self._gathered.append(line)
        self.lines += 1
        self._hand_over(flush=True, durable=durable)

    def _hand_over(self, flush: bool, durable: bool = False) -> None:
        """The gathered lines, whole, to the stream in one piece (to the OS with ``flush``)."""
        with self.critical():
            data = "".join(self._gathered).encode("utf-8")
            self._gathered.clear()
            try:
                self.stream.write(data, flush=flush)
                if flush and (self.sync == SYNC_EVERY
                              or (durable and self.sync == SYNC_ENDS)):
                    self.stream.sync()
            except FileRefused as refused:
                raise ResultsFileError(str(refused)) from None

    def finish(self, value: Dict[str, Any]) -> None:
        """The finish line (made durable), then close."""
        self.write(value, durable=True, kind=FINISH)
        self.close()

    def close(self) -> None:
        """Close the stream, the lines gathered for it written first."""
        if self.stream is not None and not self.stream.closed:
            try:
                try:
                    if self._gathered:
                        self._hand_over(flush=True)
                finally:
                    self.stream.close()
            except FileRefused as refused:
                raise ResultsFileError(str(refused)) from None

    @property
    def closed(self) -> bool:
        return self.stream is None or self.stream.closed


def write_results(path: PathLike, header: Dict[str, Any], lines: List[Dict[str, Any]],
                  finish: Dict[str, Any], sync: str = SYNC_ENDS) -> None:
    """A whole results file at once (a merge): header, lines (a line that says no kind is a
    run's record), finish line."""
    writer = ResultsWriter.create(path, header, sync=sync)
    try:
        for value in lines:
            writer.write(value, flush=False, kind=RUN)
        writer.finish(finish)
    finally:
        writer.close()

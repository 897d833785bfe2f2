"""Reading trace files: plain or gzipped JSON, or a ``.tar.gz`` archive holding one, named in
every error.

Execution traces (a ``nodes`` list) and Kineto traces (Chrome trace JSON, a ``traceEvents``
list) are told apart here, so that passing one for the other says so.

A trace is untrusted input, read within bounds (``TraceError``, exit 2, past any of them):

- regular files only: a FIFO, socket or device (``/dev/zero``) is refused without waiting on it
  (opened non-blocking, checked with ``fstat`` before a byte is read);
- at most ``max_bytes`` (``MAX_TRACE_BYTES``, 2 GiB, by default; ``capture --max-trace-bytes``)
  of JSON text, counted after decompression: the read stops at the cap, so a gzip bomb costs
  no more than the cap; an archive's members may hold at most as much in all, and at most
  ``MAX_ARCHIVE_MEMBERS`` of them are looked at;
- parsed only where the parse's memory, told before it starts, fits in half the memory
  available (``untrusted_json``: the refusal says how much it would take); nested at most
  ``MAX_TRACE_DEPTH`` levels (real traces nest under ten); no object naming a key twice.
"""

from __future__ import annotations

import gzip
import tarfile
import zlib
from pathlib import Path
from typing import Any, Dict, Optional

from param_compute import untrusted_json
from param_compute.capture.accounting import TraceError
from param_compute.errors import format_json_path
from param_compute.files import FileRefused, open_regular, read_at_most
from param_compute.formatting import format_bytes, printable

#: Bytes of JSON text (decompressed) one trace or Kineto file may hold.
MAX_TRACE_BYTES = 2 * 2**30
#: Members of a trace archive looked at (a trace and its resources: a handful).
MAX_ARCHIVE_MEMBERS = 10_000
#: Nesting levels of a trace's JSON.
MAX_TRACE_DEPTH = 100
_TAR_MAGIC = slice(257, 262)


def _cap_problem(max_bytes: int, what: str = "JSON text") -> str:
    return (f"over the {format_bytes(max_bytes)} cap on a trace's {what} (decompressed); "
            "raise it with --max-trace-bytes SIZE if the file is trusted")


def _refused(refused: FileRefused) -> TraceError:
    reason = refused.reason
    if refused.kind is not None:
        reason += "; traces are read from regular files only"
    return TraceError(refused.path, [reason])


def read_capped(stream, max_bytes: int, source: Any, what: str = "JSON text"):
    """All of ``stream``, or ``TraceError`` as soon as it holds more than ``max_bytes``."""
    data = read_at_most(stream, max_bytes)
    if data is None:
        raise TraceError(source, [_cap_problem(max_bytes, what)])
    return data


def parse_json(data, source: Any) -> Any:
    """Parsed JSON of ``data`` (bytes or text; pass it without keeping a reference, so that
    its bytes are freed before the parse) within the bounds of ``untrusted_json``: the parse's
    memory told first, nesting, duplicate keys; ``TraceError`` naming ``source``."""
    try:
        text = untrusted_json.decode(data)
        del data  # the text alone from here: the bytes, the text and the parsed value never
        return untrusted_json.parse(text, MAX_TRACE_DEPTH, constants=True)  # together
    except untrusted_json.JsonRefused as refused:
        where = f"{printable(format_json_path(refused.where), 80)}: " if refused.where else ""
        raise TraceError(source, [where + refused.reason]) from None


def _archive_json(stream, path: Path, max_bytes: int) -> Any:
    with tarfile.open(fileobj=stream, mode="r:*") as archive:
        members, total = [], 0
        for count, member in enumerate(archive, 1):
            if count > MAX_ARCHIVE_MEMBERS:
                raise TraceError(path, [f"the archive holds over {MAX_ARCHIVE_MEMBERS} members; "
                                        "a trace archive holds one trace (and its resources)"])
            total += max(member.size, 0)
            if total > max_bytes:
                raise TraceError(path, [_cap_problem(max_bytes, "archive members")])
            if member.isfile() and member.name.endswith(".json"):
                members.append(member)
        if not members:
            raise TraceError(path, ["the archive holds no .json file"])
        if len(members) > 1:  # resources beside the trace (kernel sources) are not JSON
            names = ", ".join(printable(m.name, 80) for m in members[:5])
            raise TraceError(path, [f"the archive holds {len(members)} .json files ({names}); "
                                    "pass one trace"])
        source = f"{path} ({printable(members[0].name, 80)})"
        member = archive.extractfile(members[0])
        return parse_json(read_capped(member, max_bytes, source), source)


def read_json(path, max_bytes: Optional[int] = None) -> Any:
    """The JSON in ``path``: ``.json``, ``.json.gz`` or a ``.tar.gz``/``.tgz`` archive of one
    ``.json`` (read by content, whatever the suffix), within the bounds the module's doc
    lists. Errors (``TraceError``) name the file (and the member)."""
    path = Path(path)
    max_bytes = MAX_TRACE_BYTES if max_bytes is None else max_bytes
    with open_regular(path, error=_refused) as stream:  # a FIFO or device: refused unread
        try:
            magic = stream.read(262)
            stream.seek(0)
            if magic[:2] == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=stream, mode="rb") as unzipped:
                    head = unzipped.read(262)
                stream.seek(0)
                if len(head) >= 262 and head[_TAR_MAGIC] == b"ustar":
                    return _archive_json(stream, path, max_bytes)
                with gzip.GzipFile(fileobj=stream, mode="rb") as unzipped:
                    return parse_json(read_capped(unzipped, max_bytes, path), path)
            if len(magic) >= 262 and magic[_TAR_MAGIC] == b"ustar":
                return _archive_json(stream, path, max_bytes)
            return parse_json(read_capped(stream, max_bytes, path), path)
        except (EOFError, OSError, zlib.error, tarfile.TarError) as exc:
            raise TraceError(path, [f"unreadable: {type(exc).__name__}: {exc}"]) from None


def read_execution_trace(path, max_bytes: Optional[int] = None) -> Dict[str, Any]:
    path = Path(path)
    trace = read_json(path, max_bytes)
    if isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list):
        raise TraceError(path, ["a Kineto trace, not an execution trace: pass it as --kineto "
                                "beside the execution trace (--from-et)"])
    if not isinstance(trace, dict) or not isinstance(trace.get("nodes"), list):
        raise TraceError(path, ["not an execution trace (no \"nodes\" list)"])
    return trace


def read_kineto_trace(path, max_bytes: Optional[int] = None) -> Dict[str, Any]:
    path = Path(path)
    trace = read_json(path, max_bytes)
    if isinstance(trace, list):  # the bare event-array form of the Chrome trace format
        trace = {"traceEvents": trace}
    if isinstance(trace, dict) and isinstance(trace.get("nodes"), list):
        raise TraceError(path, ["an execution trace, not a Kineto trace: pass it as --from-et"])
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceError(path, ["not a Kineto trace (no \"traceEvents\" list)"])
    return trace

"""Reading trace files: plain or gzipped JSON, or a ``.tar.gz`` archive holding one, named in
every error.

Execution traces (a ``nodes`` list) and Kineto traces (Chrome trace JSON, a ``traceEvents``
list) are told apart here, so that passing one for the other says so.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zlib
from pathlib import Path
from typing import Any, Dict


def _archive_json(path: Path) -> Any:
    with tarfile.open(path, "r:*") as archive:
        members = [m for m in archive.getmembers() if m.isfile() and m.name.endswith(".json")]
        if not members:
            raise ValueError(f"{path}: the archive holds no .json file")
        if len(members) > 1:  # resources beside the trace (kernel sources) are not JSON
            names = ", ".join(m.name for m in members[:5])
            raise ValueError(f"{path}: the archive holds {len(members)} .json files ({names}); "
                             "pass one trace")
        stream = archive.extractfile(members[0])
        try:
            return json.load(io.TextIOWrapper(stream, encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} ({members[0].name}): not JSON: {exc.msg} at line "
                             f"{exc.lineno} column {exc.colno}") from None


def read_json(path) -> Any:
    """The JSON in ``path``: ``.json``, ``.json.gz`` or a ``.tar.gz``/``.tgz`` archive of one
    ``.json`` (read by content, whatever the suffix). Errors name the file (and the member)."""
    path = Path(path)
    with open(path, "rb") as probe:
        magic = probe.read(262)
    try:
        if magic[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as stream:
                head = stream.read(262)
            if len(head) >= 262 and head[257:262] == b"ustar":
                return _archive_json(path)
            with gzip.open(path, "rt", encoding="utf-8") as text:
                return json.load(text)
        if len(magic) >= 262 and magic[257:262] == b"ustar":
            return _archive_json(path)
        with open(path, "r", encoding="utf-8") as text:
            return json.load(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc.msg} at line {exc.lineno} column "
                         f"{exc.colno}") from None
    except (EOFError, zlib.error, tarfile.TarError, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: unreadable: {type(exc).__name__}: {exc}") from None


def read_execution_trace(path) -> Dict[str, Any]:
    path = Path(path)
    trace = read_json(path)
    if isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list):
        raise ValueError(f"{path}: a Kineto trace, not an execution trace: pass it as "
                         "--kineto beside the execution trace (--from-et)")
    if not isinstance(trace, dict) or not isinstance(trace.get("nodes"), list):
        raise ValueError(f"{path}: not an execution trace (no \"nodes\" list)")
    return trace


def read_kineto_trace(path) -> Dict[str, Any]:
    path = Path(path)
    trace = read_json(path)
    if isinstance(trace, list):  # the bare event-array form of the Chrome trace format
        trace = {"traceEvents": trace}
    if isinstance(trace, dict) and isinstance(trace.get("nodes"), list):
        raise ValueError(f"{path}: an execution trace, not a Kineto trace: pass it as --from-et")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Kineto trace (no \"traceEvents\" list)")
    return trace

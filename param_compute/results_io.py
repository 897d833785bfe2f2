"""Reading results files back: the JSON Lines that ``run_benchmark`` writes.

Used by the tools that consume results (``compare``, ``report``, ``merge``, ``exporters``);
torch-free. A results file is a header line ``{run_options, sys_info, start_time}``, one line per
run ``{op_name, id, status, ...}`` and a last line ``{finish_time, ...}``. Appended files
(``-a``) hold several header/last-line pairs and resumed files a ``resume_time`` line; a run
killed mid-write leaves a torn last line, which is dropped here with a note. Anything else is not
a results file and gets one clear :class:`ResultsFileError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

RunKey = Tuple[str, str]  # (op_name, id)


class ResultsFileError(Exception):
    """A file a tool was given cannot be read as a results file."""


@dataclass
class ResultsFile:
    path: Path
    header: Dict[str, Any]
    records: List[Dict[str, Any]]
    finish: Optional[Dict[str, Any]] = None
    headers: List[Dict[str, Any]] = field(default_factory=list)  # every header (appended files)
    finishes: List[Dict[str, Any]] = field(default_factory=list)
    torn_line: bool = False  # the last line was cut short (a killed run) and is ignored

    @property
    def sys_info(self) -> Dict[str, Any]:
        return self.header.get("sys_info") or {}

    @property
    def run_options(self) -> Dict[str, Any]:
        return self.header.get("run_options") or {}


def run_key(record: Dict[str, Any]) -> RunKey:
    return record["op_name"], str(record["id"])


def _not_results(path: Path, why: str) -> ResultsFileError:
    return ResultsFileError(f"{path}: not a results file ({why}); expected the JSON Lines "
                            "that python -m param_compute.run_benchmark writes")


def load_results(path) -> ResultsFile:
    """Read one results file; raise :class:`ResultsFileError` with a plain message if it can't."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ResultsFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ResultsFileError(f"{path}: is a directory, not a results file") from None
    except OSError as exc:
        raise ResultsFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not data.strip():
        raise _not_results(path, "it is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _not_results(path, "it is not UTF-8 text") from None

    lines = text.splitlines(keepends=True)
    out = ResultsFile(path, {}, [])
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except ValueError as exc:
            if number == len(lines) and not raw.endswith("\n") and out.headers:
                out.torn_line = True  # killed mid-write: everything before it stands
                break
            raise _not_results(path, f"line {number} is not JSON: {exc.msg}") from None
        if not isinstance(value, dict):
            raise _not_results(path, f"line {number} is a JSON {type(value).__name__}, "
                                     "not an object")
        if number == 1 and "run_options" not in value:
            raise _not_results(path, "its first line is not a header with run_options")
        if "run_options" in value and "sys_info" in value:
            out.headers.append(value)
        elif "op_name" in value and "id" in value:
            out.records.append(value)
        elif "finish_time" in value:
            out.finishes.append(value)
        # other lines (a resume marker...) carry nothing the tools need
    out.header = out.headers[0] if out.headers else {}
    out.finish = out.finishes[-1] if out.finishes else None
    return out


def measured_passes(record: Dict[str, Any]) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """(pass name, stats) for every pass of a record that has measured times."""
    for name, stats in (record.get("stats") or {}).items():
        if stats and stats.get("n"):
            yield name, stats


def pass_samples(record: Dict[str, Any], pass_name: str) -> List[float]:
    """The measured times (ms) of one pass of a record."""
    metric = (record.get("metric") or {}).get(pass_name) or {}
    values = metric.get("measure.time") or []
    return [float(v) for v in values if isinstance(v, (int, float))]


def pass_throughput(record: Dict[str, Any], pass_name: str) -> Dict[str, Any]:
    return ((record.get("throughput") or {}).get(pass_name)) or {}


def peak_memory_mb(record: Dict[str, Any], pass_name: str) -> Optional[float]:
    """Peak device memory (MB) of the measured phase of a pass, where the device reports it."""
    metric = (record.get("metric") or {}).get(pass_name) or {}
    values = metric.get("measure.gpu.memory")
    if isinstance(values, (int, float)):
        return float(values)
    numbers = [float(v) for v in values or () if isinstance(v, (int, float))]
    return max(numbers) if numbers else None

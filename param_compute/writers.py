"""Record sinks: the JSON Lines results file and an in-memory collector for library use."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, TextIO

from .engine import RunSummary
from .expansion import PlannedRun
from .records import RunRecord


def _json_line(value: Dict[str, Any]) -> str:
    return json.dumps(value, separators=(", ", ": "), default=_plain) + "\n"


def _plain(value: Any) -> Any:
    """Last-resort conversion so a header or config never holds a Python repr."""
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def now_iso() -> str:
    return datetime.now().isoformat(timespec="seconds")


class JsonlResultWriter:
    """Writes PARAM-layout JSON Lines; every line is written whole and flushed at once."""

    def __init__(self, path: Path, header: Dict[str, Any], append: bool = False):
        self.path = Path(path)
        self.header = header
        self.append = append
        self.stream: Optional[TextIO] = None

    def _write(self, value: Dict[str, Any]) -> None:
        self.stream.write(_json_line(value))
        self.stream.flush()

    def start(self, total: Optional[int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.stream = open(self.path, "a" if self.append else "w", encoding="utf-8")
        self._write(self.header)

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        if record is not None:
            self._write(record.to_json())

    def finish(self, summary: RunSummary) -> None:
        self._write({"finish_time": now_iso(), "runs_ok": summary.ok,
                     "runs_failed": len(summary.failed), "runs_dry": summary.dry_run})
        self.stream.close()


class RecordCollector:
    """Keeps the JSON form of every record in memory (library use and tests)."""

    def __init__(self) -> None:
        self.records: List[Dict[str, Any]] = []
        self.summary: Optional[RunSummary] = None

    def start(self, total: Optional[int]) -> None:
        self.records.clear()

    def run_done(self, run: PlannedRun, record: Optional[RunRecord]) -> None:
        if record is not None:
            self.records.append(record.to_json())

    def finish(self, summary: RunSummary) -> None:
        self.summary = summary

"""``--resume``: continue an interrupted run in its own results file.

The file is read once: every complete run line is a completed id (skipped now), a torn last line
(the process was killed mid-write) is cut off, and a line recording the resumption is appended.
After any sequence of kills and resumes every id appears exactly once and every line is JSON.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Set

from .errors import OptionsError
from .expansion import PlannedRun


def spec_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class ResumeState:
    path: Path
    header: Optional[Dict[str, Any]] = None
    completed: Set[str] = field(default_factory=set)
    valid_bytes: int = 0  # the file is cut here: everything after is a torn line
    torn_line: bool = False

    def wants(self, run: PlannedRun) -> bool:
        """Run filter: only the runs not already in the file."""
        return run.key not in self.completed

    def check_matches(self, digest: str, dry_run: bool) -> None:
        if self.header is None:
            return
        options = self.header.get("run_options", {})
        if options.get("spec_sha256") not in (None, digest):
            raise OptionsError(f"--resume: {self.path} was written for a different spec "
                               f"({options.get('config_file')}); resume with that spec or "
                               "write to a new --output")
        if bool(options.get("dry_run")) != dry_run:
            raise OptionsError(f"--resume: {self.path} holds a "
                               f"{'dry' if options.get('dry_run') else 'measured'} run; "
                               f"this one is {'dry' if dry_run else 'measured'}")

    def truncate_torn_tail(self) -> None:
        if self.torn_line:
            with open(self.path, "r+b") as stream:
                stream.truncate(self.valid_bytes)


def scan_results(path: Path) -> ResumeState:
    """Read a results file for resuming; a missing or empty file resumes nothing."""
    state = ResumeState(Path(path))
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return state
    except OSError as exc:
        raise OptionsError(f"--resume: cannot read {path}: {exc.strerror}") from None
    offset = 0
    for raw in data.splitlines(keepends=True):
        try:
            if not raw.endswith(b"\n"):
                raise ValueError("no line break: written partly")
            line = json.loads(raw)
        except ValueError:
            state.torn_line = True
            break  # a torn line can only be the last one; nothing after it is trusted
        offset += len(raw)
        if not isinstance(line, dict):
            raise OptionsError(f"--resume: {path} is not a results file (line is not an "
                               "object)")
        if state.header is None and "run_options" in line:
            state.header = line
        elif "op_name" in line and "id" in line:
            state.completed.add(f"{line['op_name']}|{line['id']}")
    state.valid_bytes = offset
    if data and state.header is None:
        raise OptionsError(f"--resume: {path} is not a results file (no header line)")
    return state

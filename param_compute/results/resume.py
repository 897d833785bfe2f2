"""``--resume``: which runs an interrupted results file already holds, and whether it fits.

The file is scanned once with ``results.file`` (one line in memory at a time): every whole run
line is a completed run (skipped now). A damaged line anywhere is reported with its line number
and left where it is; it never shortens the file, and its run, if any, runs again. Only a torn
last line (the one torn-line rule of ``results.file``) is cut off, by the writer, before the
resume marker is appended. After any sequence of kills and resumes every completed id appears
once and every line the tools use is JSON.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

from param_compute.errors import OptionsError
from param_compute.formatting import printable
from param_compute.plan.runplan import PlannedRun
from param_compute.plan.runkey import key_of
from param_compute.results.file import (HEADER, RECORDS, LineProblem, ResultsFileError,
                                        iter_results)
from param_compute.results.file.units import READ_FROM

log = logging.getLogger("param_compute")


#: Run options that change what a record measures: a resumed file must keep them all.
MEASURING_KEYS = ("device", "warmup", "iteration", "backward", "exec_mode", "num_threads",
                  "seed", "min_time", "max_iteration", "warmup_time", "verify", "cuda_l2_cache",
                  "throughput", "pt2_model", "cuda_graph", "profile", "execution_trace",
                  "timer", "max_noise", "discard_disturbed", "repetitions", "cold",
                  "discard_throttled", "max_time", "protocol")
#: Of those, keys that older files lack (compared only where the file has them), and keys
#: that matter only beside another (``--max-time`` bounds ``--max-noise`` only).
LATER_KEYS = ("repetitions", "cold", "discard_throttled", "max_time", "protocol")
ONLY_WITH = {"max_time": "max_noise"}
#: Keys whose "off" was written as 0 by older files and as null now.
OFF_AS_NULL = ("max_noise",)


def _differs(key: str, options: Dict[str, Any], run_options: Dict[str, Any]) -> bool:
    if key not in run_options or (key in LATER_KEYS and key not in options):
        return False
    partner = ONLY_WITH.get(key)
    if partner is not None and not (options.get(partner) or run_options.get(partner)):
        return False
    if key in OFF_AS_NULL:
        return (options.get(key) or None) != (run_options.get(key) or None)
    return options.get(key) != run_options.get(key)


#: Machine facts (``sys_info``) a resumed file must keep: its runs would not be comparable.
SYSTEM_KEYS = ("hostname", "cuda_device_name", "pytorch_version")


@dataclass
class ResumeState:
    path: Path
    header: Optional[Dict[str, Any]] = None
    completed: Set[str] = field(default_factory=set)  # run keys (op|config|build|input)
    damaged: List[LineProblem] = field(default_factory=list)  # left in place, reported
    torn: Optional[LineProblem] = None  # the last line, cut off when writing resumes
    #: the fewest processes (``repetition_medians``) of any measured pass per record that has
    #: them: a run interrupted in ``--repetitions`` holds fewer than were asked for
    processes: Dict[str, int] = field(default_factory=dict)

    @property
    def torn_line(self) -> bool:
        return self.torn is not None

    def wants(self, run: PlannedRun) -> bool:
        """Run filter: only the runs not already in the file."""
        return run.key not in self.completed

    def check_matches(self, digest: str, dry_run: bool,
                      run_options: Optional[Dict[str, Any]] = None,
                      allow_mixed: bool = False,
                      sys_info: Optional[Dict[str, Any]] = None) -> None:
        """Refuse (exit 2) to resume a file whose header says it was written for another spec
        (or says nothing about its spec), or with other measuring options (``MEASURING_KEYS``)
        than ``run_options``; ``allow_mixed`` (``--resume-mixed``) lets the user mix them."""
        if self.header is None:
            return
        options = self.header.get("run_options", {})
        if not isinstance(options, dict):
            options = {}
        if options.get("spec_sha256") != digest and not allow_mixed:
            which = ("names no spec (no spec_sha256 in its header)"
                     if options.get("spec_sha256") is None else "was written for a different "
                     f"spec ({options.get('config_file')})")
            raise OptionsError(f"--resume: {self.path} {which}; resume with that spec, write to "
                               "a new --output, or pass --resume-mixed to mix them")
        differ = [f"{key}: {options.get(key)!r} in the file, {run_options.get(key)!r} now"
                  for key in MEASURING_KEYS
                  if run_options is not None and _differs(key, options, run_options)]
        machine = self.header.get("sys_info")
        if isinstance(machine, dict) and sys_info is not None:  # another host, GPU or torch
            differ += [f"{key}: {machine[key]!r} in the file, {sys_info[key]!r} now"
                       for key in SYSTEM_KEYS if machine.get(key) is not None
                       and sys_info.get(key) is not None and machine[key] != sys_info[key]]
        if differ and not allow_mixed:
            raise OptionsError(f"--resume: {self.path} was measured with other settings ("
                               + "; ".join(differ) + "); rerun with the same options, write to "
                               "a new --output, or pass --resume-mixed to mix them")
        wanted = (run_options or {}).get("repetitions") or 1
        partial = sum(1 for n in self.processes.values() if n < wanted)
        if partial:
            log.warning("resuming %s: %d run(s) there were measured in fewer than the %d "
                        "repetitions asked for (an interrupted run); kept as they are, not "
                        "measured again (their repetition_medians say how many)", self.path,
                        partial, wanted)
        if bool(options.get("dry_run")) != dry_run:
            raise OptionsError(f"--resume: {self.path} holds a "
                               f"{'dry' if options.get('dry_run') else 'measured'} run; "
                               f"this one is {'dry' if dry_run else 'measured'}")

    def marker(self, now: str, run_options: Dict[str, Any]) -> Dict[str, Any]:
        """The line that records this resumption."""
        return {"resume_time": now, "completed_runs": len(self.completed),
                "dropped_torn_line": self.torn_line,
                "damaged_lines": [p.line for p in self.damaged],
                "resume_options": run_options}

    def report(self) -> None:
        """Log what the scan found: runs done, damaged lines kept, a torn line to cut."""
        if self.completed:
            log.info("resuming %s: %d runs already done%s", self.path, len(self.completed),
                     ", cutting off a torn last line" if self.torn_line else "")
        for problem in self.damaged:
            log.warning("%s (left in place; its run, if any, runs again)",
                        problem.describe(self.path))


def scan_results(path: Path) -> ResumeState:
    """Read a results file for resuming; a missing or empty file resumes nothing. Raises
    ``OptionsError`` (exit 2) for a file that is not a results file."""
    state = ResumeState(Path(path))
    declared = None
    try:
        if not state.path.exists() or (state.path.is_file() and state.path.stat().st_size == 0):
            return state
        for line in iter_results(path):
            if line.problem is not None:
                if line.problem.torn:
                    state.torn = line.problem
                else:
                    state.damaged.append(line.problem)
                continue
            kind = line.kind
            if kind in RECORDS:  # a config's run or the step replay's
                key = key_of(line.value["op_name"], line.value["id"])
                state.completed.add(key)
                counts = [len(p["repetition_medians"]) for p in
                          (line.value.get("stats") or {}).values()
                          if isinstance(p, dict) and "repetition_medians" in p]
                if counts:
                    state.processes[key] = min(counts)
            elif kind == HEADER:
                state.header = state.header or line.value
                declared = line.value.get(READ_FROM)  # its run's times were not in ms
        if declared is not None:  # a resumed run would append milliseconds to them
            raise OptionsError(f"--resume: {printable(path)}: its last run's times are in "
                               f"{printable(declared, 40)!r} (its header's time_unit); a "
                               "resumed run writes milliseconds: write to a new --output")
    except ResultsFileError as exc:
        raise OptionsError(f"--resume: {exc}") from None
    except OSError as exc:
        raise OptionsError(f"--resume: cannot read {path}: {exc.strerror or exc}") from None
    return state

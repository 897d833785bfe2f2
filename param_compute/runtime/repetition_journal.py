"""``--repetitions``: every measured record kept on disk as it comes, so a killed run loses none.

``RepeatedExecutor`` measures every selected run N times before it hands out the first
combined record, so until the last repetition ends the results file holds no record of the
run at all. A kill then (``kill -9``, the OOM killer, a CI job's time limit) would lose hours of
measurements. The journal, ``<results>.repetitions`` beside the results file, gets one JSON
line per run measured in a repetition (the record as it crosses process bounds,
``dataclasses.asdict``), flushed as it is written, and one line per finished repetition with
the canary's drift around it:

    {"repetition": 0, "run": "torch.add|0|0|0_3", "record": {...}}
    {"repetition": 0, "end": true, "drift": null}

``run_benchmark --resume`` reads it and measures only the (repetition, run) pairs it lacks.
The journal goes when every record measured has been handed to the writers (a finished run,
or one that Ctrl-C ended: those write what they measured); a run without ``--resume`` replaces
an earlier run's journal only once it measures (said at its start). It is untrusted input on resume:
bounded, a regular file; the first line that is not a whole, well-formed entry ends the
reading (a line cut by the kill, or worse), said once, and what follows is measured again;
the resumed attempt appends after the last whole entry (the rest is cut off first). A record
whose fields the run could not combine or write, or filed under another run's key, is such a
line. A journal that cannot be written (a full disk) is given up, said once; the run goes on.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from pathlib import Path
from typing import Any, Dict, Optional

from param_compute.files import MISSING, FileRefused, LineFile, read_bounded
from param_compute.plan.runkey import key_of
from param_compute.results.records import (STATUS_ERROR, STATUS_OK, PassResult, RunError,
                                            RunRecord)
from param_compute.results.stats import summarize
from param_compute.results.targets import TARGET_METRICS

log = logging.getLogger("param_compute")

SUFFIX = ".repetitions"
#: The most bytes read back (a journal of a million small runs is well below).
MAX_BYTES = 1 << 31
#: The statistics a pass's ``summary`` holds (``results.stats.summarize``).
_SUMMARY_KEYS = frozenset(summarize([1.0]))
#: Facts that are combined as numbers across repetitions (``results.stats.pooled_facts``).
_NUMERIC_FACTS = ("involuntary_switches", "discarded", "descheduled", "peak_bytes", "kept")


def journal_path(results: Path) -> Path:
    return Path(results).with_name(Path(results).name + SUFFIX)


def journal_for(results: Optional[Path]) -> Optional[Path]:
    """The journal a run writing ``results`` keeps; None for none or discarded results
    (``-o /dev/null``: nothing beside it, ``/dev`` is no place for a file)."""
    if results is None or os.path.realpath(results) == os.devnull:
        return None
    return journal_path(results)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numbers(value: Any) -> bool:
    return isinstance(value, list) and all(_number(v) for v in value)


def _facts(facts: Any) -> bool:
    """A pass's facts: numbers (those combined across repetitions), strings or None."""
    return isinstance(facts, dict) and all(
        isinstance(k, str) and (_number(v) or (k not in _NUMERIC_FACTS
                                               and (v is None or isinstance(v, str))))
        for k, v in facts.items())


def _summary(summary: Any) -> bool:
    """A thinned pass's statistics, as ``summarize`` made them (None: computed from samples)."""
    return summary is None or (isinstance(summary, dict) and _SUMMARY_KEYS <= set(summary)
                               and all(_number(v) for v in summary.values()))


def _target(target: Any) -> bool:
    """A config's target ``{metric, value[, pass]}`` (None: none)."""
    return target is None or (
        isinstance(target, dict) and set(target) <= {"metric", "value", "pass"}
        and isinstance(target.get("metric"), str) and target["metric"] in TARGET_METRICS
        and _number(target.get("value")) and target.get("pass", "forward") in ("forward",
                                                                                "backward"))


def _pass(fields: Any) -> Optional[PassResult]:
    if not isinstance(fields, dict) or not isinstance(fields.get("name"), str) \
            or not _numbers(fields.get("warmup_ms")) or not _numbers(fields.get("measure_ms")):
        return None
    extra = fields.get("extra") or {}
    if not isinstance(extra, dict) or not all(isinstance(k, str) and _numbers(v)
                                              for k, v in extra.items()):
        return None
    if fields.get("peaks") is not None and not isinstance(fields["peaks"], dict):
        return None
    if not _facts(fields.get("facts", {})) or not _summary(fields.get("summary")):
        return None
    for key in ("iterations", "flops", "bytes"):
        value = fields.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            return None
    try:
        return PassResult(**fields)
    except TypeError:
        return None


def parse_record(fields: Any) -> Optional[RunRecord]:
    """A ``RunRecord`` from a journal line's ``record``; None for anything not one."""
    if not isinstance(fields, dict) or not all(isinstance(fields.get(k), str)
                                               for k in ("op_name", "id", "status")) \
            or not isinstance(fields.get("config"), dict):
        return None
    passes = [_pass(p) for p in fields.get("passes") or []]
    if any(p is None for p in passes) or fields["status"] not in (STATUS_OK, STATUS_ERROR) \
            or (fields["status"] == STATUS_OK and not passes):  # measured: some pass
        return None
    error = fields.get("error")
    if error is not None:
        if not isinstance(error, dict) or not all(isinstance(error.get(k), str)
                                                  for k in ("type", "message", "phase")):
            return None
        error = RunError(error["type"], error["message"], error["phase"])
    drift = fields.get("canary_drift")
    if drift is not None and (not isinstance(drift, (int, float)) or isinstance(drift, bool)
                              or not math.isfinite(drift)):
        return None
    for key in ("verify", "repetition_medians"):
        if fields.get(key) is not None and not isinstance(fields[key], dict):
            return None
    if not _target(fields.get("target")):
        return None
    try:
        return RunRecord(**{**fields, "passes": passes, "error": error})
    except TypeError:
        return None


class RepetitionJournal:
    """The journal of one results file: what an earlier attempt measured (``done``,
    ``drifts``) and the stream this attempt appends to."""

    def __init__(self, results: Path, resume: bool):
        self.path = journal_path(results)
        #: repetition -> run key -> record measured by an earlier attempt
        self.done: Dict[int, Dict[str, RunRecord]] = {}
        #: repetition -> the canary's drift around it (finished repetitions only)
        self.drifts: Dict[int, Optional[float]] = {}
        self._file: Optional[LineFile] = None
        self._failed = False  # given up (cannot be written): said once
        #: bytes of whole entries read back: a resumed attempt appends after them, never
        #: after a cut or damaged line (what it appended would never be read back)
        self._kept = 0
        self._own = resume  # a file this attempt read or wrote is its own to remove
        if resume:
            self._load()
        elif os.path.isfile(self.path) and not os.path.islink(self.path) \
                and os.path.getsize(self.path) > 0:
            log.warning("%s: an earlier run's measurements, replaced once this run measures "
                        "(--resume continues that run)", self.path)

    # -- reading ----------------------------------------------------------------------------
    def _load(self) -> None:
        try:  # a regular file, no link, bounded (a larger one is not read at all)
            data = read_bounded(self.path, MAX_BYTES, follow_links=False)
        except FileRefused as refused:
            if refused.code != MISSING:
                log.warning("%s: its runs are measured again", refused)
            return
        lines = data.split(b"\n")
        for number, line in enumerate(lines[:-1], 1):  # the last piece has no newline: cut
            if not self._take(line):
                log.warning("%s line %d: not a journal entry; it and what follows are measured "
                            "again", self.path, number)
                return
            self._kept += len(line) + 1
        if lines[-1].strip():
            log.warning("%s: its last line was cut off (the run was killed while writing it): "
                        "that measurement is taken again", self.path)
        restored = sum(len(runs) for runs in self.done.values())
        if restored:
            log.info("%s: %d measurements of earlier repetitions restored", self.path, restored)

    def _take(self, line: bytes) -> bool:
        try:
            entry = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            return False
        if not isinstance(entry, dict):
            return False
        repetition = entry.get("repetition")
        if not isinstance(repetition, int) or isinstance(repetition, bool) or repetition < 0:
            return False
        if entry.get("end") is True:
            drift = entry.get("drift")
            if drift is not None and (not isinstance(drift, (int, float))
                                      or isinstance(drift, bool) or not math.isfinite(drift)):
                return False
            self.drifts[repetition] = drift
            return True
        record = parse_record(entry.get("record"))
        key = entry.get("run")
        if record is None or key != key_of(record.op_name, record.id):  # another run's record
            return False
        self.done.setdefault(repetition, {})[key] = record
        return True

    # -- writing ----------------------------------------------------------------------------
    def _given_up(self, refused: OSError) -> None:
        log.warning("cannot keep %s (%s): a killed run would measure its repetitions again",
                    self.path, getattr(refused, "reason", None) or refused.strerror or refused)
        self._file = None
        self._failed = True

    def _write(self, entry: Dict[str, Any]) -> None:
        if self._file is None and not self._failed:
            fresh = not self.done and not self.drifts  # nothing restored: a fresh journal
            try:  # never through a link; a FIFO planted since the check: refused, no hang
                self._file = LineFile(self.path, append=True, truncate=fresh)
            except OSError as exc:
                self._given_up(exc)
                return
            self._own = True
            if self._file.size > self._kept:  # a cut or damaged tail: dropped
                self._file.truncate(self._kept)
        if self._file is None:
            return
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        try:  # one write: a kill cuts at most this line, a full disk none (files.LineFile)
            self._file.write(line.encode("utf-8"))
        except OSError as exc:  # a full disk: the run goes on, its records still reach the writers
            self._file.close()
            self._given_up(exc)

    def measured(self, repetition: int, key: str, record: RunRecord) -> None:
        self._write({"repetition": repetition, "run": key,
                     "record": dataclasses.asdict(record)})

    def ended(self, repetition: int, drift: Optional[float]) -> None:
        self._write({"repetition": repetition, "end": True, "drift": drift})

    def close(self, remove: bool) -> None:
        """Stop writing; ``remove``: every record measured reached the writers."""
        if self._file is not None:
            self._file.close()
        if remove and self._own:  # never another run's journal, nor one it could not open
            try:
                if self.path.is_file() and not self.path.is_symlink():
                    self.path.unlink()
            except OSError:
                pass
        self._file = None

"""``history add``: one results file into the store, in one transaction, once.

The file is streamed (``results.file.ResultsStream``, times in ms): each measured pass (a median
above 0 and at most ``results.fields.MAX_NUMBER`` ms) of each ``ok`` record is a point (median
and its 95% interval) of the series (machine, op, config, pass), written in batches. Damaged
lines are skipped and listed, never a reason to drop the rest. A captured workload's step totals
are series too (``workload step``): Σ median × count (the isolated replay) and, when the file
holds a step replay, the in-step total (``analysis.ledger``). A job's rank files
(``analysis.job``) give each rank's series (``WORKLOAD rank R``); added together, every rank of
one job, they also give the job's in-step time, the median over its ranks (``add_job_totals``),
a point of rank 0's run.

The file's identity is the hash of its bytes (``results.file.file_digest``): the same file
added twice adds nothing the second time. All of one add is one transaction: a killed add
leaves the store as it was before.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from param_compute.history.backends import HistoryError
from param_compute.history.identity import default_label, machine_of
from param_compute.history.store import HistoryStore, SeriesKey
from param_compute.plan.runkey import key_of
from param_compute.plan.summary import config_label
from param_compute.results.fields import measured, measured_passes
from param_compute.results.file import (STEP_PASS, LineProblem, ResultsFileError,
                                        ResultsStream, file_digest)
from param_compute.analysis.ledger import build_ledger, ledger_fields

#: Points written per ``executemany``.
BATCH = 2000
#: The op name of a captured workload's step-total series.
STEP_OP = "workload step"
#: Longest label accepted.
MAX_LABEL = 200
_CONFIG_WIDTH = 100


@dataclass
class AddReport:
    """What one ``add`` did."""

    path: str
    label: str
    machine: str
    run_id: Optional[int] = None  # None: nothing added
    duplicate_of: Optional[Tuple[str, str]] = None  # (label, path) of the run already there
    records: int = 0
    points: int = 0
    not_measured: int = 0  # records without a measured ok pass
    step_series: int = 0
    problems: List[LineProblem] = field(default_factory=list)
    problem_count: int = 0
    #: A job's rank file: {rank, world_size, workload, in_step_ms}; and the machine's key.
    job: Optional[Dict[str, Any]] = None
    machine_key: Any = None


class _Duplicate(Exception):
    def __init__(self, label: str, path: str):
        super().__init__(label)
        self.label, self.path = label, path


def _number(value: Any) -> Optional[float]:
    """A time from a file as the history keeps it (ms): a number from 0 to
    ``results.fields.MAX_NUMBER``, else None (no measurement: a 1e300 ms median is none)."""
    return measured(value) if type(value) in (float, int) else None  # noqa: E721


def _count(value: Any) -> Optional[int]:
    """A sample size as the store keeps it (a 32-bit column on PostgreSQL), else None."""
    return value if type(value) is int and 0 <= value < 2**31 else None  # noqa: E721


#: Keys of the configs seen lately, by their repr (the same configs come in every file).
_KEYS: Dict[str, str] = {}
_MAX_KEYS = 100_000


def config_key(config: Any) -> str:
    """A config's identity in the history: the hash of its JSON (keys sorted)."""
    seen = repr(config)
    key = _KEYS.get(seen)
    if key is None:
        text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
        key = hashlib.sha256(text.encode()).hexdigest()[:24]
        if len(_KEYS) >= _MAX_KEYS:
            _KEYS.clear()
        _KEYS[seen] = key
    return key


def check_label(label: str) -> str:
    label = label.strip()
    if not label:
        raise HistoryError("--label: a label must not be empty")
    if len(label) > MAX_LABEL or not label.isprintable():
        raise HistoryError(f"--label {label[:40]!r}: at most {MAX_LABEL} printable characters")
    return label


def _shown(config: Any) -> str:
    """A series' config as the tools print it (a step total's is its text already)."""
    if isinstance(config, str):
        return config
    return config_label(config, _CONFIG_WIDTH) if isinstance(config, dict) else ""


def _points(record: Dict[str, Any]):
    """(series key, (kind, run key, config), median, low, high, n) per measured pass (the
    config's label is made only for a series that is new)."""
    config = record.get("config")
    key, run_key = config_key(config), key_of(record["op_name"], record["id"])
    for name, stats in measured_passes(record):
        median = _number(stats.get("median"))
        if median is None or median <= 0:  # no time: a step to or from it could not be judged
            continue
        n = _count(stats.get("n"))
        yield ((record["op_name"], key, str(name)[:64]), ("op", run_key, config), median,
               _number(stats.get("ci_low")), _number(stats.get("ci_high")), n)


class _Batch:
    """Points waiting for one ``executemany``, with their series resolved per batch."""

    def __init__(self, store: HistoryStore, machine_id: int, label_id: int, run_id: int):
        self.store, self.machine_id, self.label_id, self.run_id = \
            store, machine_id, label_id, run_id
        self.pending: List[Tuple] = []
        self.written = 0

    def add(self, point: Tuple) -> None:
        self.pending.append(point)
        if len(self.pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        wanted: Dict[SeriesKey, Tuple[str, str, Any]] = {p[0]: p[1] for p in self.pending}
        ids = self.store.series_ids(self.machine_id, wanted, _shown)
        self.store.put_points((ids[p[0]], self.label_id, self.run_id, *p[2:])
                              for p in self.pending)
        self.written += len(self.pending)
        self.pending = []


class _StepTotals:
    """A captured workload's totals, summed as the file streams: the ledger's fields per run
    and Σ interval bound × count beside Σ median × count."""

    def __init__(self, rank: Optional[int] = None):
        self.kept: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.low = self.high = 0.0
        self.bounded = True
        self.rank = rank  # a job's rank: its series are the rank's
        self.in_step: Optional[float] = None

    def add(self, record: Dict[str, Any]) -> None:
        count = record.get("count")
        if not isinstance(count, int) or isinstance(count, bool):
            return
        self.kept[(record["op_name"], record["id"])] = ledger_fields(record)
        forward = ((record.get("stats") or {}).get("forward") or {})
        low, high = _number(forward.get("ci_low")), _number(forward.get("ci_high"))
        if record.get("status") == "ok" and low is not None and high is not None:
            self.low += low * count
            self.high += high * count
        else:
            self.bounded = False

    def points(self, stream: ResultsStream):
        if not self.kept:
            return
        ledger = build_ledger(self.kept.values(), stream.step, stream.run_options)
        workload = workload_name(stream.run_options)
        if self.rank is not None:
            workload = f"{workload} rank {self.rank}"
        isolated = _number(ledger.get("isolated_ms"))
        if isolated is not None:
            yield ((STEP_OP, config_key(["step", workload, "isolated"]), "isolated"),
                   ("step", f"step|{workload}", f"{workload}: Σ median × count"), isolated,
                   self.low if self.bounded else None, self.high if self.bounded else None,
                   len(self.kept))
        in_step = _number(ledger.get("in_step_ms"))
        self.in_step = in_step
        if in_step is not None:
            stats = ((stream.step or {}).get("stats") or {}).get(STEP_PASS) or {}
            yield ((STEP_OP, config_key(["step", workload, "in-step"]), "in-step"),
                   ("step", f"step|{workload}", f"{workload}: in-step replay"), in_step,
                   _number(stats.get("ci_low")), _number(stats.get("ci_high")),
                   _count(stats.get("n")))


def workload_name(run_options: Dict[str, Any]) -> str:
    return Path(str(run_options.get("config_file") or "workload")).name[:100]


def add_job_totals(store: HistoryStore, reports: List[AddReport]) -> List[str]:
    """For every job whose ranks' files were all just added: the job's in-step time (the
    median over its ranks) as a point of rank 0's run; what was added, said per job."""
    from param_compute.results.stats import median

    jobs: Dict[Tuple[str, int], Dict[int, AddReport]] = {}
    for report in reports:
        if report.job is not None and report.run_id is not None:
            key = (report.job["workload"], report.job["world_size"])
            jobs.setdefault(key, {})[report.job["rank"]] = report
    said = []
    for (workload, world), ranks in jobs.items():
        steps = [ranks[r].job["in_step_ms"] for r in sorted(ranks)]
        if sorted(ranks) != list(range(world)) or any(s is None for s in steps):
            continue
        first = ranks[0]
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        with store.write():
            batch = _Batch(store, store.machine_id(first.machine_key),
                           store.label_id(first.label, now), first.run_id)
            batch.add(((STEP_OP, config_key(["step", workload, "in-step job"]), "in-step"),
                       ("step", f"step|{workload}|job",
                        f"{workload}: in-step replay, median over {world} ranks"),
                       median(steps), min(steps), max(steps), world))
            batch.flush()
        said.append(f"{workload}: the job's in-step replay, {median(steps):.3f} ms (median "
                    f"over its {world} ranks)")
    return said


def add_results(store: HistoryStore, path: Path, label: Optional[str] = None,
                on_problem: Optional[Callable[[Path, LineProblem], None]] = None) -> AddReport:
    """Ingest one results file (see the module docstring). Raises :class:`HistoryError` for a
    file that is no results file or a label that cannot be known."""
    try:
        content = file_digest(path)
        stream = ResultsStream(path, on_problem=on_problem)
    except ResultsFileError as exc:
        raise HistoryError(str(exc)) from None
    header = stream.header
    if label is None:
        label = default_label(header)
        if label is None:
            raise HistoryError(f"{path}: its header names no git commit or torch version; "
                               "give the run a label (--label L)")
        if not label.isprintable():
            raise HistoryError(f"{path}: the label its header gives ({label[:40]!r}) is not "
                               "printable; give the run a label (--label L)")
    label = check_label(label)
    machine = machine_of(header)
    report = AddReport(str(path), label, machine.name, machine_key=machine)
    job = header.get("job") if isinstance(header.get("job"), dict) else None
    rank = job.get("rank") if job and isinstance(job.get("rank"), int) \
        and isinstance(job.get("world_size"), int) and job["world_size"] > 1 else None
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    start = header.get("start_time") if isinstance(header.get("start_time"), str) else None
    try:
        with store.write():
            existing = store.run_with_hash(content)
            if existing is not None:
                raise _Duplicate(existing[1], existing[2])
            machine_id = store.machine_id(machine)
            label_id = store.label_id(label, now)
            run_id = store.add_run(content, label_id, machine_id, str(path)[:1000], start, now)
            batch, totals = _Batch(store, machine_id, label_id, run_id), _StepTotals(rank)
            for _, record in stream:
                report.records += 1
                totals.add(record)
                if record.get("status") != "ok":
                    report.not_measured += 1
                    continue
                before = len(batch.pending) + batch.written
                for point in _points(record):
                    batch.add(point)
                if len(batch.pending) + batch.written == before:
                    report.not_measured += 1
            for point in totals.points(stream):
                batch.add(point)
                report.step_series += 1
            batch.flush()
            store.finish_run(run_id, report.records, stream.problem_count)
    except _Duplicate as duplicate:
        report.duplicate_of = (duplicate.label, duplicate.path)
    except ResultsFileError as exc:
        raise HistoryError(str(exc)) from None
    else:
        report.run_id, report.points = run_id, batch.written
        if rank is not None:
            report.job = {"rank": rank, "world_size": job["world_size"],
                          "workload": workload_name(stream.run_options),
                          "in_step_ms": totals.in_step}
    report.problems, report.problem_count = stream.problems, stream.problem_count
    return report

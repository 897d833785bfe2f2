"""Two results files compared run by run in one pass each: rows, and what fails the gate.

BASE is read first and each run kept as a :class:`_BaseRun` (its config's fingerprint, status,
each pass's sorted times, at most :data:`MAX_KEPT_SAMPLES`); NEW is then read a record at a
time, each BASE pass judged against it at once (a :class:`Row`, or a reason word from
:data:`GATE_REASONS`) and NEW's times dropped: memory grows with the number of runs, not with
records or bytes. ``python -m param_compute.compare`` (:mod:`param_compute.analysis.compare`)
renders the :class:`CompareReport`. Torch-free.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from param_compute.plan.summary import config_label
from param_compute.results.fields import run_of
from param_compute.results.file import ResultsStream, stream_results
from param_compute.analysis.significance import Comparison, compare_samples
from param_compute.results.stats import quantile

PassKey = Tuple[str, str, str]  # (op, id, pass); pass "-" for a record without any

#: Why a pass measured in BASE was not judged in NEW (each fails the gate).
MISSING, FAILED, STATUS, UNMEASURED, NON_FINITE, CONFIG = (
    "missing", "failed", "status", "unmeasured", "non-finite", "config")
GATE_REASONS = (MISSING, FAILED, STATUS, UNMEASURED, NON_FINITE, CONFIG)

#: The most measured times kept per BASE pass; a pass with more keeps this many evenly spaced
#: order statistics (its median and spread stay; the test then sees this many values).
MAX_KEPT_SAMPLES = 4096


@dataclass(slots=True)
class Row:
    op: str
    id: str
    pass_name: str
    base_n: int
    new_n: int
    result: Comparison
    #: The run's config in a few characters (``plan.summary.config_label``).
    config: str = ""


@dataclass(slots=True)
class GateMiss:
    """A pass measured in BASE and not judged in NEW, and why (one of :data:`GATE_REASONS`)."""

    key: PassKey
    reason: str
    base_median: Optional[float]
    base_n: int
    detail: str = ""


@dataclass
class CompareReport:
    rows: List[Row]
    only_base: List[PassKey]  # in BASE only, and not measured there either
    only_new: List[PassKey]
    failed_new: List[PassKey]  # measured in BASE, an error record in NEW (also in ``gate``)
    unmeasured: List[PassKey]  # in both files, not measured in BASE
    #: Pairs not compared because they measured different things: (key, why).
    mismatched: List[Tuple[PassKey, str]] = field(default_factory=list)
    #: How the two files' settings differ ("device: cpu in BASE, cuda:0 in NEW"...).
    settings_diff: List[str] = field(default_factory=list)
    #: Passes measured in BASE and not judged in NEW, with the reason.
    gate: List[GateMiss] = field(default_factory=list)
    base_records: int = 0
    new_records: int = 0

    def geomean(self, op: Optional[str] = None) -> Optional[float]:
        speedups = [r.result.speedup for r in self.rows if op is None or r.op == op]
        speedups = [s for s in speedups if 0 < s < math.inf]
        if not speedups:
            return None
        return math.exp(sum(math.log(s) for s in speedups) / len(speedups))

    def regressions(self, threshold_pct: float) -> List[Row]:
        return [r for r in self.rows if r.result.verdict == "slower"
                and r.result.change_pct > threshold_pct]

    def gate_counts(self) -> Dict[str, int]:
        """How many passes failed the gate for each reason (in :data:`GATE_REASONS` order)."""
        counts = {reason: 0 for reason in GATE_REASONS}
        for miss in self.gate:
            counts[miss.reason] += 1
        return {reason: n for reason, n in counts.items() if n}

    def gate_failures(self, across_settings: bool = False) -> List[str]:
        """Why ``--fail-on-regression`` fails closed, regressions aside (empty: it holds)."""
        out = []
        if self.gate:
            counts = ", ".join(f"{reason} {n}" for reason, n in self.gate_counts().items())
            out.append(f"{len(self.gate)} run(s) measured in BASE not judged in NEW ({counts})")
        if self.settings_diff and not across_settings:
            out.append("settings differ (" + "; ".join(self.settings_diff)
                       + "; --across-settings to compare anyway)")
        if self.new_records == 0:
            out.append("NEW has no run records")
        if not self.rows and not out:
            out.append("no run measured in both files: nothing was judged")
        return out


# --- reading: one pass per file, per-pass summaries kept ------------------------------------

def _times(entry: Any) -> Tuple[Optional[List[float]], Optional[str]]:
    """(finite times, None), or (None, why not): UNMEASURED or NON_FINITE."""
    values = entry.get("measure.time") if isinstance(entry, dict) else None
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        values = [values]
    if not isinstance(values, list) or not values:
        return None, UNMEASURED
    times = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(times) != len(values) or not all(map(math.isfinite, times)):
        return None, NON_FINITE
    return times, None


def _record_passes(record: Dict[str, Any]) -> List[Tuple[str, Optional[List[float]],
                                                         Optional[str]]]:
    """(pass, times or None, why not measured) of each pass of a record; one ``-`` entry for
    a record without any (a planned run)."""
    metric = record.get("metric")
    names = [name for name, entry in metric.items() if entry is None or isinstance(entry, dict)] \
        if isinstance(metric, dict) else []
    if not names:
        return [("-", None, UNMEASURED)]
    return [(sys.intern(name), *_times(metric[name])) for name in names]


class _Shared:
    """One copy of the small values many runs repeat (pass-name tuples, config key tuples)."""

    def __init__(self) -> None:
        self._values: Dict[Any, Any] = {}

    def __call__(self, value: Any) -> Any:
        return self._values.setdefault(value, value)


def _status(record: Dict[str, Any]) -> str:
    """A record's status as text; ``ok`` where it has none (PARAM writes none: its records are
    runs that measured)."""
    return str(record.get("status", "ok"))[:40]


def _fingerprint(config: Any, shared: _Shared) -> Tuple[Tuple[str, ...], bytes]:
    """A config's identity in little memory: its top-level keys and an 8-byte digest of each
    part's canonical JSON (enough to say whether two configs are equal, and which part
    differs)."""
    parts = sorted(config.items()) if isinstance(config, dict) else [("", config)]
    digests = b"".join(hashlib.blake2b(json.dumps(value, sort_keys=True, default=str).encode(
        "utf-8", "surrogatepass"), digest_size=8).digest() for _, value in parts)
    return shared(tuple(str(key) for key, _ in parts)), digests


def _fingerprint_diff(a: Tuple[Tuple[str, ...], bytes],
                      b: Tuple[Tuple[str, ...], bytes]) -> Optional[str]:
    """Which part of two records' configs differs, or None when they are equal."""
    if a == b:
        return None
    parts_a = {key: a[1][8 * i:8 * i + 8] for i, key in enumerate(a[0])}
    parts_b = {key: b[1][8 * i:8 * i + 8] for i, key in enumerate(b[0])}
    if "" in parts_a or "" in parts_b:
        return "config differs"
    parts = sorted(k for k in set(parts_a) | set(parts_b) if parts_a.get(k) != parts_b.get(k))
    return "config differs (" + ", ".join(parts[:4]) + ")"


def _kept(times: List[float]) -> Sequence[float]:
    """Sorted times, thinned to :data:`MAX_KEPT_SAMPLES` evenly spaced order statistics."""
    times.sort()
    n = len(times)
    if n > MAX_KEPT_SAMPLES:
        last = MAX_KEPT_SAMPLES - 1
        times = [times[round(i * (n - 1) / last)] for i in range(MAX_KEPT_SAMPLES)]
    return array("d", times)


#: What became of a BASE pass in NEW: a Row, or (kind, detail): kind a gate reason or
#: "mismatch" (settings differ) or "unmeasured" (not measured in BASE).
_Outcome = Any


@dataclass(slots=True)
class _BaseRun:
    """What compare keeps of one BASE run: its config's fingerprint, status, each pass's
    sorted times (None: not measured) and, once NEW is read, each pass's outcome."""

    config: Tuple[Tuple[str, ...], bytes]
    status: str
    names: Tuple[str, ...]
    times: Tuple[Optional[Sequence[float]], ...]
    processes: Tuple[Optional[Tuple[float, ...]], ...] = ()  # each pass's repetition medians
    outcomes: Optional[List[_Outcome]] = None  # None: the run is not in NEW

    def median(self, index: int) -> Optional[float]:
        times = self.times[index]
        return quantile(times, 0.5) if times else None


def _read_base(stream: ResultsStream, shared: _Shared) -> Dict[Tuple[str, str], _BaseRun]:
    """BASE's runs (a later record of the same run replaces an earlier one)."""
    runs: Dict[Tuple[str, str], _BaseRun] = {}
    for _, record in stream:
        op, run_id = run_of(record)
        passes = _record_passes(record)
        runs[(sys.intern(op), run_id)] = _BaseRun(
            _fingerprint(record.get("config"), shared),
            sys.intern(_status(record)),
            shared(tuple(name for name, _, _ in passes)),
            tuple(_kept(times) if times else None for _, times, _ in passes),
            tuple(process_medians(record, name) for name, _, _ in passes))
    return runs


def process_medians(record: Dict[str, Any], name: str) -> Optional[Tuple[float, ...]]:
    """The pass's median in each process that measured it (``stats.<pass>.repetition_medians``
    of ``--repetitions`` and ``ab``), when there are two or more; else None."""
    stats = (record.get("stats") or {}).get(name) if isinstance(record.get("stats"), dict) \
        else None
    values = stats.get("repetition_medians") if isinstance(stats, dict) else None
    if not isinstance(values, list) or len(values) < 2:
        return None
    medians = tuple(float(v) for v in values if isinstance(v, (int, float))
                    and not isinstance(v, bool) and math.isfinite(v))
    return medians if len(medians) == len(values) else None


def _between_processes(pooled: Comparison, base: Sequence[float], new: Sequence[float],
                       alpha: float, resamples: int) -> Comparison:
    """Samples from several processes a side: times within a process share its layout, core
    and clock, so the pooled samples alone overstate the evidence; the change must also be
    significant between the processes' medians (the process is the unit: fewer than 4 a
    side is never significant)."""
    per_process = compare_samples(base, new, alpha, resamples)
    return dataclasses.replace(pooled, p_value=max(pooled.p_value, per_process.p_value),
                               significant=pooled.significant and per_process.significant)


def _judge(base: _BaseRun, index: int, status: str, passes: Dict[str, Tuple[Any, Any]],
           config: Tuple[Tuple[str, ...], bytes], settings_block: bool, alpha: float,
           resamples: int, key: PassKey, processes: Optional[Tuple[float, ...]]) -> _Outcome:
    """The outcome of BASE pass ``index`` against NEW's record of the run (``passes``: name ->
    (times, why not measured); ``processes``: NEW's per-process medians of the pass)."""
    base_times = base.times[index]
    if base_times is None:
        return ("unmeasured", "")
    if status != "ok" and status != base.status:  # a run that failed in BASE too is judged
        return (FAILED, "") if status == "error" else (STATUS, f"status {status!r}")
    if key[2] not in passes:
        return (UNMEASURED, "no such pass in NEW")
    times, why = passes[key[2]]
    if times is None:
        return (why, "")
    mismatch = _fingerprint_diff(base.config, config)
    if mismatch is not None:
        return (CONFIG, mismatch)
    if settings_block:
        return ("mismatch", "settings differ")
    result = compare_samples(base_times, times, alpha, resamples)
    base_processes = base.processes[index] if base.processes else None
    if base_processes and processes:
        result = _between_processes(result, base_processes, processes, alpha, resamples)
    return Row(key[0], key[1], key[2], len(base_times), len(times), result)


def settings_diff(base: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
    """How the measuring settings of two results files (their ``run_options``) differ (empty:
    they agree). A key one file does not record (PARAM's files lack some) is not a difference;
    the ``cuda_*`` keys only count on a CUDA device."""
    out = []
    devices = (str(base.get("device")), str(new.get("device")))
    on_cuda = any(d.startswith("cuda") for d in devices)
    for key in SETTINGS_KEYS:
        a, b = base.get(key), new.get(key)
        if a is None or b is None or (key.startswith("cuda_") and not on_cuda):
            continue
        if a != b:
            out.append(f"{key}: {a!r} in BASE, {b!r} in NEW")
    return out


#: Run options that make times incomparable when they differ between two files.
SETTINGS_KEYS = ("device", "num_threads", "exec_mode", "cuda_graph", "pt2_model",
                 "cuda_l2_cache")


def compare_streams(base: ResultsStream, new: ResultsStream, alpha: float = 0.05,
                    resamples: int = 2000, across_settings: bool = False) -> CompareReport:
    """Compare two results files, each read once: BASE first (its runs kept as
    :class:`_BaseRun`), then NEW record by record, each judged as it is read and its times
    dropped. A later record of a run in NEW replaces an earlier one (appended files)."""
    report = CompareReport([], [], [], [], [])
    report.settings_diff = settings_diff(base.run_options, new.run_options)
    settings_block = bool(report.settings_diff) and not across_settings
    shared = _Shared()
    base_runs = _read_base(base, shared)
    report.base_records = base.records_read
    only_new: Dict[PassKey, None] = {}
    for _, record in new:
        op, run_id = run_of(record)
        status = _status(record)
        passes = {name: (times, why) for name, times, why in _record_passes(record)}
        run = base_runs.get((op, run_id))
        for name in passes:
            if run is None or name not in run.names:
                only_new[(op, run_id, name)] = None
        if run is None:
            continue
        config = _fingerprint(record.get("config"), shared)
        run.outcomes = [_judge(run, index, status, passes, config, settings_block, alpha,
                               resamples, (op, run_id, name), process_medians(record, name))
                        for index, name in enumerate(run.names)]
        label = None
        for outcome in run.outcomes:
            if isinstance(outcome, Row):
                label = label if label is not None else config_label(record.get("config"))
                outcome.config = label
    report.new_records = new.records_read

    for (op, run_id), run in base_runs.items():
        for index, name in enumerate(run.names):
            key = (op, run_id, name)
            if run.times[index] is None:  # not measured in BASE: nothing to judge
                (report.only_base if run.outcomes is None else report.unmeasured).append(key)
                continue
            outcome = (MISSING, "") if run.outcomes is None else run.outcomes[index]
            if isinstance(outcome, Row):
                report.rows.append(outcome)
                continue
            kind, detail = outcome
            if kind == "mismatch" or kind == CONFIG:
                report.mismatched.append((key, detail))
            if kind == "mismatch":
                continue
            report.gate.append(GateMiss(key, kind, run.median(index), len(run.times[index]),
                                        detail))
            if kind == FAILED:
                report.failed_new.append(key)
    report.only_new = list(only_new)
    return report


def compare_files(base_path: Path, new_path: Path, alpha: float = 0.05, resamples: int = 2000,
                  across_settings: bool = False, warn: bool = True) -> CompareReport:
    """:func:`compare_streams` of two results files (``ResultsFileError`` if either is not
    one; unusable lines warned on stderr as they are met)."""
    base = stream_results(base_path, warn)
    new = stream_results(new_path, warn)
    return compare_streams(base, new, alpha, resamples, across_settings)

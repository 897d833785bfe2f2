"""One run measured in several processes, as one record: the one rule for combining them.

``--repetitions N`` (``runtime.repetitions``) measures the plan in N fresh processes, and ``ab``
(``analysis.rounds``) runs each side once per round; both hand this module one run's records,
in order, and get one record back:

* per pass, the samples of every process end to end (``measure.time`` holds them all, so
  PARAM readers and ``compare`` see every sample; thinned to ``keep`` evenly spread values
  where they are more), the other lists end to end, the call counts summed, ``n`` counting
  every sample measured;
* the median of each process (``repetition_medians``), from which ``stats.<pass>`` reports
  the median of those medians and its interval across processes
  (``results.stats.across_repetitions``); throughput rates, utilization and the config's
  target then follow that median (``RunRecord.to_json``);
* the facts pooled (counts summed, the descheduled fraction and peak bytes at their worst:
  ``results.stats.pooled_facts``), the canary's farthest drift, the first failed ``--verify``
  verdict (else the first);
* a run that failed in any process is that failure's record, its message saying which one
  (``repetition 2 of 3: ...``, ``round 2 of 3: ...``). Torch-free.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence

from param_compute.results.records import (PER_SAMPLE, STATUS_OK, PassResult, RunError,
                                           RunRecord)
from param_compute.results.stats import pooled_facts, summarize, thin


def combined_pass(passes: Sequence[PassResult], keep: Optional[int] = None) -> PassResult:
    """One pass from the same pass of every process (see the module's doc)."""
    first = passes[0]
    extra: Dict[str, List[float]] = {}
    for one in passes:
        for key, values in one.extra.items():
            extra.setdefault(key, []).extend(values)
    counts = [p.iterations for p in passes if p.iterations is not None]
    times = [t for p in passes for t in p.measure_ms]
    facts = pooled_facts([p.facts for p in passes])
    summary = summarize(times)
    thinned = keep is not None and len(times) > keep
    if summary is not None and (thinned or any(p.summary is not None for p in passes)):
        summary["n"] = sum((p.stats() or {}).get("n", 0) for p in passes)
        facts["kept"] = len(times)
    if thinned:
        times, facts["kept"] = thin(times, keep), keep
        extra.update({key: thin(extra[key], keep) for key in PER_SAMPLE if key in extra})
    return dataclasses.replace(
        first, warmup_ms=[t for p in passes for t in p.warmup_ms], measure_ms=times,
        extra=extra, iterations=sum(counts) if counts else None, facts=facts, summary=summary)


def combine(records: Sequence[RunRecord], keep: Optional[int] = None,
            unit: str = "repetition") -> RunRecord:
    """One run's record from its records of every process, in order (at most ``keep``
    samples a pass); ``unit`` names a process in a failure's message."""
    for index, record in enumerate(records):
        if record.status != STATUS_OK:
            error = record.error or RunError("Failed", record.status, "run")
            return dataclasses.replace(record, error=dataclasses.replace(
                error, message=f"{unit} {index + 1} of {len(records)}: {error.message}"))
    names = [p.name for p in records[0].passes]
    passes, medians = [], {}
    for name in names:
        each = [next(p for p in r.passes if p.name == name) for r in records
                if any(p.name == name for p in r.passes)]
        passes.append(combined_pass(each, keep))
        medians[name] = [p.stats()["median"] for p in each if p.measure_ms]  # of all samples
    verdicts = [r.verify for r in records if r.verify is not None]
    failed = [v for v in verdicts if v.get("status") not in (None, "PASS")]
    drifts = [r.canary_drift for r in records if r.canary_drift is not None]
    return dataclasses.replace(records[0], passes=passes, repetition_medians=medians,
                               verify=(failed or verdicts or [None])[0],
                               canary_drift=max(drifts, key=abs) if drifts else None)

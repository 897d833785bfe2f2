"""Results files of several rounds (processes) of the same setup joined into one results file,
one record per run, its samples from every round.

``python -m param_compute.ab`` runs each side once per round; :func:`join_rounds` writes the
side's ordinary results file from its round files (read with ``results.file``, written with
``write_results``). Per run and pass, ``metric`` lists are the rounds' lists end to end
(``measure.iterations`` summed), so ``compare`` sees every sample; ``stats.<pass>`` is computed
from them with the median and its interval taken across rounds
(``results.stats.across_repetitions``: ``repetition_medians`` holds each round's median), and
throughput rates follow that median. A run that failed in any round is that round's record, its
message saying which round. Torch-free.
"""

from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from param_compute.results.fields import pass_samples, run_of
from param_compute.results.file import read_results, write_results
from param_compute.results.stats import (across_repetitions, is_noisy, pooled_facts,
                                         summarize)
from param_compute.results.targets import evaluate_target

#: Throughput fields proportional to the rate (they scale with 1 / median).
_RATES = ("tflops_per_s", "gb_per_s", "flops_util", "bw_util", "util")


class RoundsError(ValueError):
    """Round files that cannot be joined (one is missing or not a results file)."""


def _failed(records: Sequence[Dict[str, Any]]):
    for index, record in enumerate(records):
        if record.get("status", "ok") != "ok":
            return index, record
    return None


def _joined_metric(records: Sequence[Dict[str, Any]], name: str) -> Dict[str, Any]:
    metrics = [(r.get("metric") or {}).get(name) or {} for r in records]
    out: Dict[str, Any] = {}
    for key, value in metrics[0].items():
        lists = [m.get(key) for m in metrics]
        if not all(isinstance(v, list) for v in lists):
            out[key] = value
        elif key == "measure.iterations":
            out[key] = [sum(v for values in lists for v in values if isinstance(v, (int, float)))]
        else:
            out[key] = [v for values in lists for v in values]
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _round_stats(record: Dict[str, Any], name: str) -> Dict[str, Any]:
    """A round's stats of a pass (its median from all its samples, however many it kept);
    computed from its samples where the record has none."""
    stats = (record.get("stats") or {}).get(name) if isinstance(record.get("stats"), dict) \
        else None
    if isinstance(stats, dict) and _number(stats.get("median")):
        return stats
    return summarize(pass_samples(record, name)) or {}


def _scaled(throughput: Dict[str, Any], old: Any, new: float) -> Dict[str, Any]:
    out = dict(throughput)
    if isinstance(old, (int, float)) and old > 0 and new > 0:
        for key in _RATES:
            if isinstance(out.get(key), (int, float)):
                out[key] = out[key] * old / new
    return out


def join_records(records: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """One run's record from its records of every round (in round order)."""
    failed = _failed(records)
    if failed is not None:
        index, record = failed
        record = copy.deepcopy(record)
        error = record.setdefault("error", {"type": "Failed", "phase": "run", "message": ""})
        error["message"] = f"round {index + 1} of {len(records)}: {error.get('message', '')}"
        return record
    out = copy.deepcopy(records[0])
    names = [n for n, m in (out.get("metric") or {}).items() if isinstance(m, dict)]
    stats: Dict[str, Any] = {}
    throughput = out.get("throughput") or {}
    for name in names:
        out["metric"][name] = _joined_metric(records, name)
        each = [_round_stats(r, name) for r in records]
        each = [s for s in each if s]
        pooled = summarize(pass_samples(out, name))
        if pooled and each:
            if any("kept" in s for s in each):  # a round thinned its samples: n counts all
                pooled["n"], pooled["kept"] = sum(s.get("n", 0) for s in each), pooled["n"]
            pooled.update(pooled_facts(each))
            pooled = across_repetitions(pooled, [s["median"] for s in each])
        stats[name] = pooled
        if isinstance(throughput.get(name), dict) and stats[name]:
            old = ((records[0].get("stats") or {}).get(name) or {}).get("median")
            throughput[name] = _scaled(throughput[name], old, stats[name]["median"])
    out["stats"] = stats
    noisy = [name for name, s in stats.items() if is_noisy(s)]
    out.pop("noisy", None)
    if noisy:
        out["noisy"] = noisy
    if any(r.get("disturbed") for r in records):
        out["disturbed"] = True
    drifts = [r["canary_drift"] for r in records if _number(r.get("canary_drift"))]
    if drifts:
        out["canary_drift"] = max(drifts, key=abs)
    target = out.get("target")
    if isinstance(target, dict) and "metric" in target and "value" in target:
        out["target"] = evaluate_target(target, stats, throughput)
    return out


def _read(path: Path):
    from param_compute.results.file import ResultsFileError

    try:
        return read_results(path)
    except ResultsFileError as exc:
        raise RoundsError(str(exc)) from None


def join_rounds(paths: Sequence[Path], out: Path, extra_header: Dict[str, Any]) -> int:
    """Write ``out`` from the round files ``paths``: the first round's header (plus
    ``extra_header``), one joined record per run in the first round's order (runs a later
    round adds after them), a finish line with the counts. Returns the number of runs."""
    rounds = [_read(Path(path)) for path in paths]
    by_run: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for results in rounds:
        for record in results.records:
            by_run.setdefault(run_of(record), []).append(record)
    lines = [join_records(records) for records in by_run.values()]
    header = dict(rounds[0].header, **extra_header)
    ok = sum(1 for line in lines if line.get("status", "ok") == "ok")
    finish = {"finish_time": datetime.now().isoformat(timespec="seconds"), "runs_ok": ok,
              "runs_failed": len(lines) - ok, "rounds": len(rounds)}
    write_results(out, header, lines, finish)
    return len(lines)

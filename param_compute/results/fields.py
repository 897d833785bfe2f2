"""Fields of one run record in JSON form, as the tools read them (passes, times, rates, memory).

Records come from results files (see :mod:`param_compute.results.file`) and may be hand-edited
or damaged, so every accessor tolerates a missing or mistyped field. Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterator, List, Optional, Tuple


#: The largest time (us, ms) or page count per call or step taken from a file: what is more
#: (or negative, or not finite) is no measurement, and its sums would overflow to infinity.
MAX_NUMBER = 1e15


def measured(value: Any) -> Optional[float]:
    """A time or count from a file, as a float; None where it is no measurement."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and 0 <= value <= MAX_NUMBER else None


def run_of(record: Dict[str, Any]) -> Tuple[str, str]:
    """(op name, run id) of a record, as text (the parts of its run key)."""
    return str(record.get("op_name")), str(record.get("id"))


def measured_passes(record: Dict[str, Any]) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """(pass name, stats) for every pass of a record that has measured times."""
    stats_by_pass = record_stats(record)
    if not isinstance(stats_by_pass, dict):
        return
    for name, stats in stats_by_pass.items():
        if isinstance(stats, dict) and stats.get("n"):
            yield name, stats


def record_stats(record: Dict[str, Any]) -> Any:
    """A record's ``stats``; where it has none (PARAM writes none), computed from each pass's
    ``measure.time``, once, and kept on the record."""
    if "stats" not in record and isinstance(record.get("metric"), dict):
        from param_compute.results.stats import summarize

        record["stats"] = {name: summarize(pass_samples(record, name))
                           for name, metric in record["metric"].items() if isinstance(metric, dict)}
    return record.get("stats")


def pass_samples(record: Dict[str, Any], pass_name: str) -> List[float]:
    """The measured times (ms) of one pass of a record."""
    metric = (record.get("metric") or {}).get(pass_name) or {}
    values = metric.get("measure.time") if isinstance(metric, dict) else None
    if not isinstance(values, list):
        return []
    # NaN and infinities (a results file is untrusted input) are no time at all.
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)]


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

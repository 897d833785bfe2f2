"""Time units: the unit a results header declares, and each record's times in milliseconds.

The tools compute in milliseconds, the unit this package writes (``run_options.time_unit``:
``"millisecond"``, as PARAM's headers say too). A header may declare another unit, in its
``run_options`` or at its top level: ``"second"``, ``"microsecond"`` or ``"nanosecond"`` (the
plural, ``s``, ``ms``, ``us``, ``µs``, ``ns``... too, whatever their case). The typed reader
(``reading.iter_results``, so every tool) then gives each record of that run in milliseconds:
the pass times of ``metric`` (``measure.time``, ``warmup.time``, the CPU, host, wall and kernel
times, block medians, launch overheads), the ``stats`` that are times (median, mean, interval,
quantiles, spread, ``repetition_medians``), and the rates of ``throughput`` derived again from
the converted median (TFLOP/s, GB/s and their fractions of peak). Fields that name their unit
(``original_us``, a step record's ``*_us``, a target's ``latency_ms``) are left as they are;
counts and ratios have no unit. The header read says ``"millisecond"`` after (its declared unit
in ``time_unit_read_from``), so a file written from what was read is read the same again. A
unit this version does not know is refused (:class:`UnitProblem`), never guessed. Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

#: Milliseconds per unit, by every name a header may give it.
MS_PER_UNIT: Dict[str, float] = {}
for _names, _ms in ((("second", "seconds", "s", "sec", "secs"), 1e3),
                    (("millisecond", "milliseconds", "ms", "msec", "msecs"), 1.0),
                    (("microsecond", "microseconds", "us", "µs", "μs", "usec", "usecs"), 1e-3),
                    (("nanosecond", "nanoseconds", "ns", "nsec", "nsecs"), 1e-6)):
    for _name in _names:
        MS_PER_UNIT[_name] = _ms
#: The unit every tool reads in, and the name a header read back gives it.
MILLISECOND = "millisecond"
#: Where a header read in another unit keeps the unit it declared.
READ_FROM = "time_unit_read_from"
#: ``metric`` entries that are times besides the ``*time`` ones.
_TIME_METRICS = frozenset({"warmup.block_median", "measure.launch_overhead"})
#: ``stats`` entries that are times.
_TIME_STATS = frozenset({"mean", "median", "min", "max", "stdev", "p10", "p90", "iqr",
                         "ci_low", "ci_high", "repetition_medians"})


class UnitProblem(ValueError):
    """A header's time unit that cannot be read: the message says where and what."""


def _unit(value: Any, where: str) -> Optional[float]:
    if value is None:
        return None
    if not isinstance(value, str):
        raise UnitProblem(f"header's {where} is not text ({type(value).__name__})")
    factor = MS_PER_UNIT.get(value.strip().lower())
    if factor is None:
        from param_compute.formatting import printable

        raise UnitProblem(f"header's {where} '{printable(value, 40)}' is no time unit this "
                          "version reads (second, millisecond, microsecond, nanosecond, or s, "
                          "ms, us, ns): its times cannot be read")
    return factor


def declared(header: Dict[str, Any]) -> float:
    """Milliseconds per time unit of the run a header starts (1.0: milliseconds, also where
    it declares none). :class:`UnitProblem` for a unit not known, or two that disagree."""
    options = header.get("run_options")
    inner = _unit(options.get("time_unit") if isinstance(options, dict) else None,
                  "run_options.time_unit")
    outer = _unit(header.get("time_unit"), "time_unit")
    if inner is not None and outer is not None and inner != outer:
        raise UnitProblem("header's time_unit and run_options.time_unit disagree: its times "
                          "cannot be read")
    return inner if inner is not None else outer if outer is not None else 1.0


def header_in_ms(header: Dict[str, Any]) -> Dict[str, Any]:
    """A header whose run's records are read in milliseconds: it says so, and keeps the unit
    it declared (in ``time_unit_read_from``)."""
    options = header.get("run_options")
    given = options.get("time_unit") if isinstance(options, dict) else None
    header.setdefault(READ_FROM, given if given is not None else header.get("time_unit"))
    if isinstance(options, dict) and "time_unit" in options:
        options["time_unit"] = MILLISECOND
    if "time_unit" in header:
        header["time_unit"] = MILLISECOND
    return header


def _scaled(value: Any, factor: float) -> Any:
    """A number, or each number of a list, times ``factor`` (anything else as it was: the
    record's checks have said what they read)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value * factor
    if isinstance(value, list):
        return [_scaled(item, factor) for item in value]
    return value


def _is_time_metric(name: str) -> bool:
    return name.endswith("time") or name in _TIME_METRICS


def _rates_again(rates: Dict[str, Any], median_ms: Any) -> None:
    """A pass's rates derived again from its median in milliseconds (and their fractions of
    peak in proportion), where the work per call and the median are known."""
    if not (isinstance(median_ms, (int, float)) and not isinstance(median_ms, bool)
            and math.isfinite(median_ms) and median_ms > 0):
        return
    seconds = median_ms / 1e3
    for work, rate, scale, fraction in (("flops", "tflops_per_s", 1e12, "flops_util"),
                                        ("bytes", "gb_per_s", 1e9, "bw_util")):
        amount, old = rates.get(work), rates.get(rate)
        if not (isinstance(amount, (int, float)) and not isinstance(amount, bool)
                and math.isfinite(amount)):
            continue
        new = amount / seconds / scale
        share = rates.get(fraction)
        if isinstance(share, (int, float)) and not isinstance(share, bool) and \
                isinstance(old, (int, float)) and not isinstance(old, bool) and old > 0:
            rates[fraction] = share * new / old
        rates[rate] = new


def record_in_ms(record: Dict[str, Any], factor: float) -> Dict[str, Any]:
    """A record's times (see the module's doc) times ``factor``, its rates derived again: the
    record as it would read had it been written in milliseconds. ``factor`` 1: as it is."""
    if factor == 1.0:
        return record
    metric = record.get("metric")
    if isinstance(metric, dict):
        for entry in metric.values():
            if isinstance(entry, dict):
                for name in [n for n in entry if _is_time_metric(n)]:
                    entry[name] = _scaled(entry[name], factor)
    stats = record.get("stats")
    if isinstance(stats, dict):
        for entry in stats.values():
            if isinstance(entry, dict):
                for name in [n for n in entry if n in _TIME_STATS]:
                    entry[name] = _scaled(entry[name], factor)
    throughput = record.get("throughput")
    if isinstance(throughput, dict):
        for name, rates in throughput.items():
            entry = stats.get(name) if isinstance(stats, dict) else None
            if isinstance(rates, dict) and isinstance(entry, dict):
                _rates_again(rates, entry.get("median"))
    return record

"""Sweeps of a results file: which measured runs form a line and what they are plotted against.

For each operator whose runs sweep a numeric dimension (a ``__range__``/``__list__`` shape dim or
scalar value), runs are taken by spec variant (ids ``config|build|variant_*``); in each, the x
axis is the varying feature with the most distinct values (dims tied to it by ``__copy__`` named
with it) and the other varying features split the runs into lines (one per pass). Variants
sweeping the same feature share a plot, one line each; another feature gets its own plot. A grid
that would take more than eight lines becomes points against the estimated FLOPs per call. The
rate plotted is GFLOP/s when FLOPs were counted, else GB/s, else calls/s. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from param_compute.plan.runkey import RunKey, RunKeyError, join_fields
from param_compute.plan.summary import estimate_flops, features, numeric_column, varying_features
from param_compute.results.fields import measured_passes, pass_throughput

MAX_LINES = 8


@dataclass
class Point:
    x: float
    median: float
    p10: float
    p90: float
    rate: Optional[float]
    run_id: str


@dataclass
class Line:
    label: str
    pass_name: str
    points: List[Point] = field(default_factory=list)


@dataclass
class Sweep:
    op: str
    x_label: str
    rate_label: str
    lines: List[Line]
    log_x: bool = False
    scatter: bool = False  # points of a grid against their estimated work: no joining lines


def _rate(record: Dict[str, Any], pass_name: str, median_ms: float, kind: str
          ) -> Optional[float]:
    rates = pass_throughput(record, pass_name)
    if kind == "GFLOP/s":
        value = rates.get("tflops_per_s")
        return value * 1e3 if value is not None else None
    if kind == "GB/s":
        return rates.get("gb_per_s")
    return 1e3 / median_ms if median_ms > 0 else None  # calls/s


def _rate_kind(records: List[Dict[str, Any]]) -> str:
    def known(key: str) -> bool:
        return any(pass_throughput(r, name).get(key) not in (None, 0)
                   for r in records for name, _ in measured_passes(r))

    if known("tflops_per_s"):
        return "GFLOP/s"
    if known("gb_per_s"):
        return "GB/s"
    return "calls/s"


def _format_value(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _series_key(run_id: str) -> Tuple[str, ...]:
    """Runs of one sweep as the spec declares it: same config, build variant and input variant
    (``0|0|1_7`` -> ``("0", "0", "1")``; a plain index, as DefaultConfigIterator's, -> ``*``)."""
    try:
        key = RunKey.from_id("-", run_id)
    except RunKeyError:  # an id of a custom iterator: a series of its own
        return (str(run_id),)
    parts = (str(key.config), key.build, key.input)
    return tuple(p.split("_")[0] if "_" in p else ("*" if i > 0 else p)
                 for i, p in enumerate(parts))


def _pattern(key: Tuple[str, ...]) -> str:
    return join_fields(*(k if i == 0 else (f"{k}_*" if k != "*" else "*")
                         for i, k in enumerate(key)))


@dataclass
class _Series:
    key: Tuple[str, ...]
    records: List[Dict[str, Any]]
    x_name: str = ""
    x_label: str = ""
    x_values: List[float] = field(default_factory=list)
    split: List[str] = field(default_factory=list)  # a line label part per record
    constants: Dict[str, Any] = field(default_factory=dict)
    scatter: bool = False


def _analyse(op: str, series: _Series) -> bool:
    """Choose the x axis of one series; False when it sweeps nothing numeric."""
    configs = [r.get("config") for r in series.records]
    columns, aliases = varying_features(configs)
    numeric = {name: numeric_column(values) for name, values in columns.items()}
    numeric = {name: values for name, values in numeric.items() if values is not None}
    if not numeric:
        return False
    first = features(configs[0])
    series.constants = {k: v for k, v in first.items()
                        if k not in columns and not any(k in a for a in aliases.values())}
    series.x_name = max(numeric, key=lambda name: len(set(numeric[name])))  # first wins ties
    others = [name for name in columns if name != series.x_name]
    series.split = [", ".join(f"{name}={_format_value(columns[name][i])}" for name in others)
                    for i in range(len(configs))]
    series.x_values = numeric[series.x_name]
    series.x_label = " = ".join([series.x_name, *aliases.get(series.x_name, [])])
    if len(set(series.split)) > MAX_LINES:  # a grid: against the estimated work instead
        series.x_values = [float(estimate_flops(op, c)) for c in configs]
        series.x_name = series.x_label = "estimated FLOPs per call"
        series.split = [""] * len(configs)
        series.scatter = True
    return True


def find_sweeps(op: str, records: List[Dict[str, Any]]) -> List[Sweep]:
    """The plots of one operator's measured runs: one per x axis (a spec variant sweeping
    another dimension gets its own plot); none when nothing numeric is swept."""
    records = [r for r in records if any(True for _ in measured_passes(r))]
    grouped: Dict[Tuple[str, ...], List[Dict[str, Any]]] = {}
    for record in records:
        grouped.setdefault(_series_key(str(record.get("id"))), []).append(record)
    by_axis: Dict[Tuple[str, bool], List[_Series]] = {}
    for key, members in grouped.items():
        series = _Series(key, members)
        if len(members) > 1 and _analyse(op, series):
            by_axis.setdefault((series.x_name, series.scatter), []).append(series)

    sweeps = []
    for (_, scatter), members in by_axis.items():
        rate_kind = _rate_kind([r for s in members for r in s.records])
        # what tells these series apart: constants that differ between them
        names = [n for n in dict.fromkeys(k for s in members for k in s.constants)
                 if len({repr(s.constants.get(n)) for s in members}) > 1][:3]
        lines: Dict[Tuple[str, str], Line] = {}
        for series in members:
            tag = ", ".join(f"{n}={_format_value(series.constants.get(n))}" for n in names)
            base = " ".join(p for p in (_pattern(series.key) if len(members) > 1 else "", tag)
                            if p)
            for index, record in enumerate(series.records):
                label = "; ".join(p for p in (base, series.split[index]) if p) or op
                for pass_name, stats in measured_passes(record):
                    if (label, pass_name) not in lines:
                        lines[(label, pass_name)] = Line(
                            label if pass_name == "forward" else f"{label} ({pass_name})",
                            pass_name)
                    median = stats["median"]
                    lines[(label, pass_name)].points.append(Point(
                        series.x_values[index], median, stats.get("p10", median),
                        stats.get("p90", median), _rate(record, pass_name, median, rate_kind),
                        str(record.get("id"))))
        for line in lines.values():
            line.points.sort(key=lambda p: p.x)
        xs = [p.x for line in lines.values() for p in line.points]
        log_x = min(xs) > 0 and max(xs) / min(xs) > 50
        sweeps.append(Sweep(op, members[0].x_label, rate_kind, list(lines.values()), log_x,
                            scatter))
    return sweeps

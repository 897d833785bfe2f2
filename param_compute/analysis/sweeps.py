"""Sweeps of a results file: which measured runs form a line and what they are plotted against.

For each operator whose runs sweep a dimension (a ``__range__``/``__list__`` shape dim or scalar
value), runs are taken by spec variant (ids ``config|build|variant_*``); in each, the x axis is
the numeric feature with the most distinct values (a shape dim, or a scalar with at least three
values; dims tied to it by ``__copy__`` named with it) and the other varying features split the
runs into lines (one per pass), labelled by their values. A line needs two points: shapes that
vary all together (a list of unrelated shapes) are no sweep. Variants sweeping the same feature
share a plot, one line each, labelled by what tells them apart; another feature gets its own
plot. A grid that would take more than eight lines becomes points against the estimated FLOPs
per call. Categorical dims (a dtype, a bool, a string, a scalar with two values) with no numeric
axis become grouped bars: a group per value of the first, a bar per value of the others. The
rate plotted is GFLOP/s when FLOPs were counted, else GB/s, else calls/s. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from param_compute.plan.runkey import RunKey, RunKeyError
from param_compute.plan.summary import (config_label, estimate_flops, features, numeric_column,
                                        varying_features)
from param_compute.results.fields import measured_passes, pass_throughput

MAX_LINES = 8
#: Bars in one grouped-bar plot at most (more: the table says it better).
MAX_BARS = 24


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
    #: Grouped bars: the group labels (a point's x is its group's index); empty for lines.
    categories: List[str] = field(default_factory=list)


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
    categories: List[str] = field(default_factory=list)


def _axis_candidates(columns: Dict[str, List[Any]]) -> Dict[str, List[float]]:
    """The numeric features that can be an x axis: a shape dim (a size) with two values or
    more, a scalar with three or more (two values of a scalar are categories: ``dim=0/1``)."""
    out = {}
    for name, values in columns.items():
        numeric = numeric_column(values)
        if numeric is not None and len(set(numeric)) >= (2 if ".shape[" in name else 3):
            out[name] = numeric
    return out


def _analyse(op: str, series: _Series) -> bool:
    """Choose the x axis of one series; False when it sweeps nothing."""
    configs = [r.get("config") for r in series.records]
    columns, aliases = varying_features(configs)
    if not columns:
        return False
    first = features(configs[0])
    series.constants = {k: v for k, v in first.items()
                        if k not in columns and not any(k in a for a in aliases.values())}
    numeric = _axis_candidates(columns)
    if not numeric:  # categories only: grouped bars
        if len(configs) > MAX_BARS:
            return False
        names = list(columns)
        series.x_name = series.x_label = names[0]
        series.categories = list(dict.fromkeys(_format_value(v) for v in columns[names[0]]))
        series.x_values = [float(series.categories.index(_format_value(v)))
                           for v in columns[names[0]]]
        series.split = [", ".join(f"{name}={_format_value(columns[name][i])}"
                                  for name in names[1:]) for i in range(len(configs))]
        return True
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
    elif max(series.split.count(label) for label in set(series.split)) < 2:
        return False  # every line a lone point: shapes listed, not swept
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
            axis = (series.x_name, series.scatter, tuple(series.categories))
            by_axis.setdefault(axis, []).append(series)

    sweeps = []
    for (_, scatter, categories), members in by_axis.items():
        rate_kind = _rate_kind([r for s in members for r in s.records])
        # what tells these series apart: constants that differ between them
        names = [n for n in dict.fromkeys(k for s in members for k in s.constants)
                 if len({repr(s.constants.get(n)) for s in members}) > 1][:3]
        lines: Dict[Tuple[str, str], Line] = {}
        xs_of: Dict[Tuple[str, str], set] = {}
        for series in members:
            base = ", ".join(f"{n}={_format_value(series.constants.get(n))}" for n in names)
            if len(members) > 1 and not base:  # told apart by nothing that varies: its config
                base = config_label(series.records[0].get("config"), 40)
            for index, record in enumerate(series.records):
                label = "; ".join(p for p in (base, series.split[index]) if p) or op
                for pass_name, stats in measured_passes(record):
                    if (label, pass_name) not in lines:
                        lines[(label, pass_name)] = Line(
                            label if pass_name == "forward" else f"{label} ({pass_name})",
                            pass_name)
                    median = stats["median"]
                    seen = xs_of.setdefault((label, pass_name), set())
                    if series.x_values[index] in seen and not scatter:
                        continue  # a repeated x on one line (configs alike in all but id)
                    seen.add(series.x_values[index])
                    lines[(label, pass_name)].points.append(Point(
                        series.x_values[index], median, stats.get("p10", median),
                        stats.get("p90", median), _rate(record, pass_name, median, rate_kind),
                        str(record.get("id"))))
        for line in lines.values():
            line.points.sort(key=lambda p: p.x)
        kept = [line for line in lines.values() if len(line.points) >= 2 or scatter
                or categories]  # a lone point joins nothing
        if not kept:
            continue
        xs = [p.x for line in kept for p in line.points]
        log_x = not categories and min(xs) > 0 and max(xs) / min(xs) > 50
        sweeps.append(Sweep(op, members[0].x_label, rate_kind, kept, log_x, scatter,
                            list(categories)))
    return sweeps

"""Series: the medians (with their intervals) of one (machine, op, config, pass) over labels.

:func:`iter_series` streams them from the store one series at a time, in the store's order,
the labels in the order they were first added; ``--only``/``-k``/``--machine`` choose which.
Series of different machines are never one series unless ``mix_machines`` is asked: then a
series is (op, config, pass) and a label measured on several machines keeps the first
machine's point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional

from param_compute.history.select import Selector
from param_compute.history.store import HistoryStore, SeriesInfo


@dataclass
class Point:
    label: str
    median: float
    low: Optional[float] = None  # the median's 95% interval, when the file gave one
    high: Optional[float] = None
    n: Optional[int] = None

    @property
    def lower(self) -> float:
        return self.low if self.low is not None else self.median

    @property
    def upper(self) -> float:
        return self.high if self.high is not None else self.median


@dataclass
class Series:
    machine: str
    op: str
    run_key: str
    config: str
    pass_name: str
    kind: str = "op"
    points: List[Point] = field(default_factory=list)

    @property
    def name(self) -> str:
        """What the tools print: run key, config, pass, machine."""
        what = self.run_key if self.kind == "op" else self.op
        config = f" ({self.config})" if self.config else ""
        return f"{what}{config} [{self.pass_name}] on {self.machine}"

    @property
    def labels(self) -> List[str]:
        return [p.label for p in self.points]


def _series(info: SeriesInfo, machine: str) -> Series:
    return Series(machine, info.op, info.run_key, info.config, info.pass_name, info.kind)


def iter_series(store: HistoryStore, selector: Optional[Selector] = None,
                mix_machines: bool = False) -> Iterator[Series]:
    """Every chosen series with its points, streamed (memory: one series)."""
    selector = selector or Selector()
    labels: Dict[int, str] = dict(store.labels())
    machines = {m.id: m.name for m in store.machines()}
    if mix_machines:
        yield from _mixed(store, selector, labels, machines)
        return
    current: Optional[Series] = None
    current_id, wanted = None, False
    for info, label_id, median, low, high, n in store.series_points():
        if info.id != current_id:
            if current is not None and wanted:
                yield current
            current_id, current = info.id, _series(info, machines.get(info.machine_id, "?"))
            wanted = selector.wants_machine(current.machine) and \
                selector.wants(current.op, current.run_key, current.name,
                                current.config)
        if wanted:
            current.points.append(Point(labels.get(label_id, "?"), median, low, high, n))
    if current is not None and wanted:
        yield current


def _mixed(store: HistoryStore, selector: Selector, labels: Dict[int, str],
           machines: Dict[int, str]) -> Iterator[Series]:
    """Series across machines: grouped by (op, config key, pass)."""
    current: Optional[Series] = None
    key, seen = None, set()
    for info, label_id, median, low, high, n in store.series_points(mixed=True):
        if not selector.wants_machine(machines.get(info.machine_id, "?")):
            continue
        if (info.op, info.config_key, info.pass_name) != key:
            if current is not None and current.points:
                yield current
            key, seen = (info.op, info.config_key, info.pass_name), set()
            current = _series(info, "all machines")
            if not selector.wants(current.op, current.run_key, current.name,
                                current.config):
                current.points = []
                current.kind = "skip"
        if current.kind == "skip" or label_id in seen:
            continue
        seen.add(label_id)
        current.points.append(Point(labels.get(label_id, "?"), median, low, high, n))
    if current is not None and current.points:
        yield current

"""A captured workload's totals as records arrive: each config's median times its ``count``.

A captured spec (``capture``) carries, per input config, how often the config occurred in the
captured step; replaying it measures each config once, and the workload's time is the sum over
configs of median x count. ``WorkloadTotals`` keeps those sums (constant memory: per-operator
totals and the few largest configs), torch-free, for the live console and the offline tools
(``analysis.workload_totals``, the report). Where the capture joined a Kineto trace, each
record's ``original_us`` is summed beside the replayed time.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from param_compute.plan.summary import config_label
from param_compute.results.fields import measured, record_stats
from param_compute.results.records import STATUS_OK, RunRecord
#: The pass whose median a captured config's count multiplies (captured ops replay forward).
WORKLOAD_PASS = "forward"


@dataclass
class OpTotal:
    op_name: str
    total_ms: float = 0.0
    configs: int = 0
    calls: int = 0
    original_cpu_ms: float = 0.0  # Σ original_us.cpu x count, over configs that carry it
    original_device_ms: float = 0.0
    original_calls: int = 0  # calls whose config carries an original time


class TopConfig(NamedTuple):
    """One of the largest configs: its run, median, count, median x count and config label."""

    op: str
    id: str
    median_ms: float
    count: int
    total_ms: float
    config: str


@dataclass
class WorkloadTotals:
    """Running sums of median x count over the records that carry a count."""

    top: int = 10
    total_ms: float = 0.0
    calls: int = 0
    configs: int = 0
    failed_configs: int = 0
    failed_calls: int = 0
    by_op: Dict[str, OpTotal] = field(default_factory=dict)
    _largest: List[Tuple[float, int, str, str, float, int, str]] = field(default_factory=list)

    def add(self, record: RunRecord) -> None:
        count = record.count
        if count is None:
            return
        median = _workload_median(record) if record.status == STATUS_OK else None
        self._add(record.op_name, record.id, median, count, record.original_us, record.config)

    def add_json(self, record: dict) -> None:
        """The same from a results-file record (its JSON form)."""
        count = record.get("count")
        if count is None:
            return
        stats = record_stats(record)  # computed where the file has none (PARAM's)
        median = ((stats if isinstance(stats, dict) else {}).get(WORKLOAD_PASS) or {}).get(
            "median")
        if record.get("status") != STATUS_OK or measured(median) is None:
            median = None  # failed, or no usable time (negative, or past any step's)
        self._add(record["op_name"], record["id"], median, count, record.get("original_us"),
                  record.get("config"))

    def _add(self, op_name: str, run_id: str, median: Optional[float], count: int,
             original_us: Optional[Dict[str, Any]] = None, config: Any = None) -> None:
        if isinstance(original_us, dict):
            op = self.by_op.setdefault(op_name, OpTotal(op_name))
            op.original_cpu_ms += (measured(original_us.get("cpu")) or 0.0) * count / 1e3
            op.original_device_ms += (measured(original_us.get("device")) or 0.0) * count / 1e3
            op.original_calls += count
        if median is None:
            self.failed_configs += 1
            self.failed_calls += count
            return
        total = median * count
        self.total_ms += total
        self.calls += count
        self.configs += 1
        op = self.by_op.setdefault(op_name, OpTotal(op_name))
        op.total_ms += total
        op.configs += 1
        op.calls += count
        if len(self._largest) >= self.top and total <= self._largest[0][0]:
            return  # not among the largest: its label is never made
        label = config if isinstance(config, str) else config_label(config)  # a label kept
        entry = (total, self.configs, op_name, run_id, median, count, label)
        if len(self._largest) < self.top:
            heapq.heappush(self._largest, entry)
        else:
            heapq.heappushpop(self._largest, entry)

    def share(self, total_ms: float) -> float:
        return total_ms / self.total_ms if self.total_ms else 0.0

    def top_ops(self, n: Optional[int] = None) -> List[OpTotal]:
        ops = sorted(self.by_op.values(), key=lambda op: op.total_ms, reverse=True)
        return ops[:n] if n else ops

    def top_configs(self) -> List[TopConfig]:
        """The largest configs by median x count, largest first."""
        return [TopConfig(op, run_id, median, count, total, label)
                for total, _, op, run_id, median, count, label
                in sorted(self._largest, reverse=True)]


def _workload_median(record: RunRecord) -> Optional[float]:
    """The record's median of the workload pass (from its stats)."""
    for one in record.passes:
        if one.name == WORKLOAD_PASS:
            stats = one.stats()  # of every sample, however many the record keeps
            return stats["median"] if stats else None
    return None

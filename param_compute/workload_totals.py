"""Where a captured workload's time goes: each config's median times its ``count``, by operator.

A captured spec (``python -m param_compute.capture``) carries, per input config, how often the
config occurred in the captured step. Replaying it measures each config once; the workload's time
is then the sum over configs of median x count. This module keeps those sums as records arrive
(constant memory: per-operator totals and the few largest configs), torch-free.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .records import STATUS_OK, RunRecord
from .stats import summarize

#: The pass whose median a captured config's count multiplies (captured ops replay forward).
WORKLOAD_PASS = "forward"


@dataclass
class OpTotal:
    op_name: str
    total_ms: float = 0.0
    configs: int = 0
    calls: int = 0


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
    _largest: List[Tuple[float, int, str, str, float, int]] = field(default_factory=list)

    def add(self, record: RunRecord) -> None:
        count = record.count
        if count is None:
            return
        median = _median(record) if record.status == STATUS_OK else None
        self._add(record.op_name, record.id, median, count)

    def add_json(self, record: dict) -> None:
        """The same from a results-file record (its JSON form)."""
        count = record.get("count")
        if count is None:
            return
        median = ((record.get("stats") or {}).get(WORKLOAD_PASS) or {}).get("median")
        if record.get("status") != STATUS_OK:
            median = None
        self._add(record["op_name"], record["id"], median, count)

    def _add(self, op_name: str, run_id: str, median: Optional[float], count: int) -> None:
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
        entry = (total, self.configs, op_name, run_id, median, count)
        if len(self._largest) < self.top:
            heapq.heappush(self._largest, entry)
        else:
            heapq.heappushpop(self._largest, entry)

    def share(self, total_ms: float) -> float:
        return total_ms / self.total_ms if self.total_ms else 0.0

    def top_ops(self, n: Optional[int] = None) -> List[OpTotal]:
        ops = sorted(self.by_op.values(), key=lambda op: op.total_ms, reverse=True)
        return ops[:n] if n else ops

    def top_configs(self) -> List[Tuple[str, str, float, int, float]]:
        """(op, id, median ms, count, total ms) of the largest configs, largest first."""
        return [(op, run_id, median, count, total)
                for total, _, op, run_id, median, count in sorted(self._largest, reverse=True)]


def _median(record: RunRecord) -> Optional[float]:
    for measured in record.passes:
        if measured.name == WORKLOAD_PASS:
            stats = summarize(measured.measure_ms)
            return stats["median"] if stats else None
    return None

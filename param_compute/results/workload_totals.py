"""Where a captured workload's time goes: each config's median times its ``count``, by operator.

A captured spec (``python -m param_compute.capture``) carries, per input config, how often the
config occurred in the captured step. Replaying it measures each config once; the workload's time
is then the sum over configs of median x count. This module keeps those sums as records arrive
(constant memory: per-operator totals and the few largest configs), torch-free.

Where the capture joined a Kineto trace (``capture --kineto``), each record also carries its
config's ``original_us`` (mean CPU and device time per call in the captured run): the original
time of each op (x count) is summed beside the replayed one, so that where a replay differs from
production shows at a glance (``comparison_rows``; ``python -m param_compute.workload_totals
RESULTS.json`` prints the table).
"""

from __future__ import annotations

import argparse
import heapq
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

from param_compute.plan.summary import config_label, cut
from param_compute.results.ledger import measured
from param_compute.results.fields import record_stats
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
        median = _median(record) if record.status == STATUS_OK else None
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


def comparison_rows(totals: WorkloadTotals) -> List[Dict[str, Any]]:
    """Per op with an original time: replayed Σ median x count beside the original Σ time x
    count (CPU and device, ms) and replayed / original (device time where recorded, else CPU),
    largest original first."""
    rows = []
    for op in totals.by_op.values():
        if not op.original_calls:
            continue
        original = op.original_device_ms or op.original_cpu_ms
        rows.append({"op": op.op_name, "configs": op.configs, "calls": op.calls,
                     "replayed_ms": op.total_ms, "original_cpu_ms": op.original_cpu_ms,
                     "original_device_ms": op.original_device_ms,
                     "ratio": op.total_ms / original if original and op.calls else None})
    return sorted(rows, key=lambda r: -(r["original_device_ms"] or r["original_cpu_ms"]))


def format_comparison(rows: List[Dict[str, Any]]) -> str:
    """The comparison as a plain-text table."""
    header = (f"{'op':<40} {'calls':>7} {'replayed ms':>12} {'orig cpu ms':>12} "
              f"{'orig dev ms':>12} {'replay/orig':>11}")
    lines = [header, "-" * len(header)]
    for row in rows:
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] is not None else "-"
        lines.append(f"{row['op'][:40]:<40} {row['calls']:>7} {row['replayed_ms']:>12.3f} "
                     f"{row['original_cpu_ms']:>12.3f} {row['original_device_ms']:>12.3f} "
                     f"{ratio:>11}")
    return "\n".join(lines)


def format_top_configs(totals: WorkloadTotals) -> str:
    """The largest configs (median x count) as a plain-text table, with their config labels."""
    header = f"{'op':<28} {'id':<12} {'config':<36} {'median ms':>10} {'count':>6} {'share':>6}"
    lines = [header, "-" * len(header)]
    for top in totals.top_configs():
        lines.append(f"{cut(top.op, 28):<28} {cut(top.id, 12):<12} {cut(top.config, 36):<36} "
                     f"{top.median_ms:>10.4f} {top.count:>6} "
                     f"{totals.share(top.total_ms):>6.1%}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m param_compute.workload_totals RESULTS.json``: a captured workload's replayed
    time per op beside the original time (from ``original_us``), the file read once. Exit 2:
    unreadable file; lines of wrong types are warned (file, line, field) and left out."""
    from param_compute.results.file import ResultsFileError, stream_results

    parser = argparse.ArgumentParser(
        prog="python -m param_compute.workload_totals",
        description="Replayed median x count per op of a captured workload, beside the "
                    "original time recorded in production (capture --kineto).")
    parser.add_argument("results", help="a run_benchmark results file")
    parser.add_argument("--json", action="store_true",
                        help="print the fidelity ledger as one JSON object (results.ledger)")
    args = parser.parse_args(argv)
    from param_compute.results.ledger import build_ledger, format_ledger, ledger_fields

    totals = WorkloadTotals()
    kept = {}  # what the ledger reads of each run (its latest record): a few numbers
    try:  # one pass; unusable lines (a count that is no number...) warned with file and line
        results = stream_results(args.results)
        for _, record in results:
            totals.add_json(record)
            kept[(record.get("op_name"), record.get("id"))] = ledger_fields(record)
    except (OSError, ResultsFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if results.problem_count:
        print(f"warning: {results.problem_count} line(s) of {args.results} not used (listed "
              "above)", file=sys.stderr)
    ledger = build_ledger(kept.values(), results.extras, results.run_options)
    del kept
    if args.json:
        import json

        print(json.dumps(ledger, indent=1))
        return 0
    print(f"replayed: {totals.total_ms:.3f} ms (Σ median × count) over {totals.calls} calls in "
          f"{totals.configs} configs" + (f"; {totals.failed_configs} configs "
                                         f"({totals.failed_calls} calls) not measured"
                                         if totals.failed_configs else ""))
    if totals.configs:
        print("largest configs (median × count):")
        print(format_top_configs(totals))
        print()
    rows = comparison_rows(totals)
    if rows:
        print(format_comparison(rows))
    else:
        print("no original times: capture with --kineto to compare with production")
    if ledger["ops"] and (ledger["in_step_ms"] is not None or ledger["original_ms"]):
        print()
        print(format_ledger(ledger))
    return 0


def _median(record: RunRecord) -> Optional[float]:
    for one in record.passes:
        if one.name == WORKLOAD_PASS:
            stats = one.stats()  # of every sample, however many the record keeps
            return stats["median"] if stats else None
    return None

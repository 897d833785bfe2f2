"""The step replay's lines under the results table: its time per step and what it replayed.

The step replay is a run like any other (``runtime.step_run``): its record is in the table and
the results file. This sink adds what a reader of the table needs to trust it, from the record
alone: the median step time and how many steps it rests on, how many calls ran and were fed,
the real step beside it, the host gaps kept (or why not, where asked for), mismatched inputs
and failed calls, and how compiled regions' graphs were replayed (compiled, or eagerly).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from param_compute.results.records import RunRecord
from param_compute.results.sinks.base import RecordSink


class StepSummary(RecordSink):
    """Remembers the step replay's record; says it in a few lines after the table."""

    def __init__(self, calls: int, host_gaps: str = "auto", dry_run: bool = False):
        """``calls``: the step file's calls; ``host_gaps``: the ``--host-gaps`` asked for."""
        self.calls = calls
        self.host_gaps = host_gaps
        self.dry_run = dry_run
        self.record: Optional[RunRecord] = None
        self.skipped = False

    def run_done(self, run, record: Optional[RunRecord]) -> None:
        if getattr(run, "step", None) is None:
            return
        if record is None:
            self.skipped = True
        else:
            self.record = record

    def summary_lines(self, summary) -> List[str]:
        if self.dry_run:
            return [f"step replay: {self.calls} calls planned (dry run)"]
        record = self.record
        if record is None:
            if summary.interrupted:
                return ["step replay: interrupted (not recorded)"]
            return ["step replay: skipped (already in the results file, or past --stop-id)"] \
                if self.skipped else []
        details: Dict[str, Any] = record.step or {}
        stats = (record.stats().get("step") or {}) if record.passes else {}
        if record.error is not None or not stats:
            why = record.error.message if record.error is not None else "nothing measured"
            return [f"step replay failed: {why}"]
        line = (f"step replay: {stats['median']:.3f} ms per step (median of {stats['n']}"
                + (f", {stats['stop_reason']}" if stats.get("stop_reason") else "") + "), "
                f"{details['replayed_calls']} of {details['calls']} calls, "
                f"{details['fed_inputs']} inputs fed by earlier calls")
        if details.get("real_step_us"):
            line += f"; real step {details['real_step_us'] / 1e3:.3f} ms"
        gaps = details.get("host_gaps") or {}
        if gaps.get("kept"):
            line += (f"; {gaps['added_us'] / 1e3:.3f} ms of the original's host time between "
                     "calls kept (--host-gaps)")
        extra = []
        if not gaps.get("kept") and self.host_gaps == "on":  # asked for, not kept
            extra.append(f"host gaps not kept (--host-gaps on): {gaps.get('why', 'unknown')}")
        if details.get("dataflow_mismatches"):
            extra.append(f"{details['dataflow_mismatches']} fed inputs replaced by generated "
                         "data (shape or dtype differed)")
        if details.get("failed_calls"):
            extra.append(f"{details['failed_calls']} calls failed and were left out")
        graphs = details.get("graphs") or {}
        if graphs.get("count"):
            extra.append(graph_line(graphs))
        return [line] + [f"  {e}" for e in extra]


def graph_line(graphs: Dict[str, Any]) -> str:
    """How a step's compiled regions were replayed (the step record's ``graphs``)."""
    if graphs.get("mode") == "eager":
        eager_as = graphs.get("eager_as") if isinstance(graphs.get("eager_as"), dict) else {}
        own = sum(1 for how in eager_as.values() if how == "graph")
        return (f"{graphs['count']} compiled regions' graphs ({graphs.get('calls', 0)} calls) "
                "replayed eagerly (--eager-regions: as PyTorch runs them uncompiled"
                + (f"; {own} as their own aten ops one by one" if own else "") + ")")
    compile_ms = sum((graphs.get("compile_ms") or {}).values())
    return (f"{graphs['count']} compiled regions' graphs ({graphs.get('calls', 0)} calls) "
            f"replayed compiled with Inductor (compiled in {compile_ms / 1e3:.1f} s before the "
            "step was timed)")

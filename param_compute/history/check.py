"""``history check``: the regressions of the history, the gate's verdict (exit 1 when any).

A regression is a step up (slower) of at least ``--fail-on-regression PCT`` percent that
step detection (``history.steps``) finds in a series; ``--since LABEL`` judges only steps at
that label or a later one. Each is named by its series and the first label of the new level.
Improvements are counted, never a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional

from param_compute.history.series import Series
from param_compute.history.steps import Step, detect


@dataclass
class Finding:
    series: Series
    step: Step


@dataclass
class Verdict:
    regressions: List[Finding]
    improvements: List[Finding]
    series: int = 0


def judge(all_series: Iterable[Series], threshold: float, min_change: float,
          since: Optional[str] = None, order: Optional[Dict[str, int]] = None) -> Verdict:
    """Steps of every series: regressions of at least ``threshold`` (relative) and
    improvements of as much, at or after ``since`` (a label; ``order`` gives label ranks).
    Only the findings are kept, not the series' points."""
    verdict = Verdict([], [])
    floor = order[since] if since is not None and order is not None else None
    for series in all_series:
        verdict.series += 1
        for step in detect(series.points, min(min_change, threshold)):
            if floor is not None and order.get(step.label, -1) < floor:
                continue
            if abs(step.change) < threshold:
                continue
            kept = Series(series.machine, series.op, series.run_key, series.config,
                          series.pass_name, series.kind)
            (verdict.regressions if step.regression else verdict.improvements).append(
                Finding(kept, step))
    return verdict

"""Performance targets a config may carry, judged against its record; and the run's verdicts.

A config's ``"target": {"metric": M, "value": X}`` (optionally ``"pass"``, default forward) is
met when the pass's median latency is at most X ms (``latency_ms``), or when its TFLOP/s
(``tflops``), GB/s (``gbps``) or fraction of peak (``flops_util``, ``bw_util``) is at least X.
A metric that could not be measured (no peaks calibrated, say) counts as missed.
``results.sinks.verdicts`` collects the missed targets and failed ``--verify`` checks of a run
for its exit status. Torch-free.
"""

from __future__ import annotations

import logging
from typing import Any, Dict

log = logging.getLogger("param_compute")

#: metric -> (where its value is, whether lower is better)
TARGET_METRICS = {
    "latency_ms": ("stats", "median", True),
    "tflops": ("throughput", "tflops_per_s", False),
    "gbps": ("throughput", "gb_per_s", False),
    "flops_util": ("throughput", "flops_util", False),
    "bw_util": ("throughput", "bw_util", False),
}


def evaluate_target(target: Dict[str, Any], stats: Dict[str, Any],
                    throughput: Dict[str, Any]) -> Dict[str, Any]:
    """``{metric, value, actual, met}`` (and ``pass`` when not forward) of one target."""
    metric, value = target["metric"], target["value"]
    pass_name = target.get("pass", "forward")
    section, key, lower_is_better = TARGET_METRICS[metric]
    source = (stats if section == "stats" else throughput) or {}
    actual = (source.get(pass_name) or {}).get(key)
    met = actual is not None and (actual <= value if lower_is_better else actual >= value)
    out: Dict[str, Any] = {"metric": metric, "value": value, "actual": actual, "met": met}
    if pass_name != "forward":
        out["pass"] = pass_name
    return out


def format_number(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4g}"

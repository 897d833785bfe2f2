"""Performance targets a config may carry, judged against its record; and the run's verdicts.

A config's ``"target": {"metric": M, "value": X}`` (optionally ``"pass"``, default forward) is
met when the pass's median latency is at most X ms (``latency_ms``), or when its TFLOP/s
(``tflops``), GB/s (``gbps``) or fraction of peak (``flops_util``, ``bw_util``) is at least X.
A metric that could not be measured (no peaks calibrated, say) counts as missed.
``Verdicts`` is a record sink that collects missed targets and failed ``--verify`` checks for
the exit status. Torch-free.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

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


class Verdicts:
    """A record sink: which runs missed their target and which failed ``--verify``."""

    def __init__(self) -> None:
        self.missed: List[str] = []
        self.verify_failed: List[str] = []

    def start(self, total: Optional[int]) -> None:
        return None

    def run_done(self, run, record) -> None:
        if record is None or (record.target is None and record.verify is None):
            return
        out = record.to_json()
        key = f"{out['op_name']}|{out['id']}"
        target = out.get("target")
        if target is not None and not target["met"]:
            self.missed.append(key)
            log.warning("%s missed its target: %s %s (wanted %s %s)", key, target["metric"],
                        _number(target["actual"]), "<=" if target["metric"] == "latency_ms"
                        else ">=", _number(target["value"]))
        verify = out.get("verify")
        if verify is not None and verify.get("status") == "FAIL":
            self.verify_failed.append(key)
            log.warning("%s failed --verify: mean relative error %s, max abs error %s", key,
                        _number(verify.get("mean_rel_error")),
                        _number(verify.get("max_abs_error")))

    def finish(self, summary) -> None:
        if self.missed:
            log.warning("%d run(s) missed their target", len(self.missed))
        if self.verify_failed:
            log.warning("%d run(s) failed --verify", len(self.verify_failed))

    def exit_status(self, status: int, fail_on_target_miss: bool) -> int:
        """The run's exit status with these verdicts: 1 on a failed check (or a missed target
        when asked), unless the run already ended worse."""
        failed = self.verify_failed or (fail_on_target_miss and self.missed)
        return 1 if failed and status == 0 else status


def _number(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4g}"

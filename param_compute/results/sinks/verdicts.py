"""The run's verdicts: which runs missed their target and which failed ``--verify``.

A record sink; its ``final_status`` hook turns a failed check (and, when asked, a missed target)
into exit status 1. Torch-free.
"""

from __future__ import annotations

import logging
from typing import List

from param_compute.plan.runkey import key_of
from param_compute.results.sinks.base import RecordSink
from param_compute.results.targets import format_number

log = logging.getLogger("param_compute")


class Verdicts(RecordSink):
    """A record sink: which runs missed their target and which failed ``--verify``; they decide
    the exit status too (a missed target only with ``fail_on_target_miss``)."""

    def __init__(self, fail_on_target_miss: bool = False) -> None:
        self.fail_on_target_miss = fail_on_target_miss
        self.missed: List[str] = []
        self.verify_failed: List[str] = []

    def start(self, total: Optional[int]) -> None:
        return None

    def run_done(self, run, record) -> None:
        if record is None or (record.target is None and record.verify is None):
            return
        out = record.to_json()
        key = key_of(out["op_name"], out["id"])
        target = out.get("target")
        if target is not None and not target["met"]:
            self.missed.append(key)
            log.warning("%s missed its target: %s %s (wanted %s %s)", key, target["metric"],
                        format_number(target["actual"]), "<=" if target["metric"] == "latency_ms"
                        else ">=", format_number(target["value"]))
        verify = out.get("verify")
        if verify is not None and verify.get("status") == "FAIL":
            self.verify_failed.append(key)
            if verify.get("why"):  # a check with no numbers to compare (a step replay)
                log.warning("%s failed --verify: %s", key, verify["why"])
            else:
                log.warning("%s failed --verify: mean relative error %s, max abs error %s",
                            key, format_number(verify.get("mean_rel_error")),
                            format_number(verify.get("max_abs_error")))

    def finish(self, summary) -> None:
        if self.missed:
            log.warning("%d run(s) missed their target", len(self.missed))
        if self.verify_failed:
            log.warning("%d run(s) failed --verify", len(self.verify_failed))

    def final_status(self, status: int) -> int:
        """The run's exit status with these verdicts: 1 on a failed check (or a missed target
        when asked), unless the run already ended worse."""
        failed = self.verify_failed or (self.fail_on_target_miss and self.missed)
        return 1 if failed and status == 0 else status

"""The collectives' table under the results table: time, algorithm and bus bandwidth per config.

A job's collective configs are measured across its ranks (``runtime.job_runs``); their records
carry ``comms``. This sink keeps those records' rows and prints them as the table a comms
benchmark prints (``results.comms``), after the run.
"""

from __future__ import annotations

from typing import Any, Dict, List

from param_compute.results.comms import comms_row, format_comms
from param_compute.results.records import RunRecord
from param_compute.results.sinks.base import RecordSink
from param_compute.terminal import width


class CommsSummary(RecordSink):
    """Rows of the collectives measured; printed after the table."""

    def __init__(self) -> None:
        self.rows: List[Dict[str, Any]] = []

    def run_done(self, run, record: RunRecord) -> None:
        if record is not None and record.comms is not None:
            row = comms_row(record.to_json())
            if row is not None:
                self.rows.append(row)

    def summary_lines(self, summary) -> List[str]:
        if not self.rows:
            return []
        return format_comms(self.rows, width()).splitlines()

"""The collectives' table: each collective config's time beside its algorithm and bus bandwidth.

A collective measured across a job's ranks (``runtime.job_runs``) writes ``comms`` in its record
(``results.records.comms_json``: the kind, its group and size, the message's bytes, and at the
median the algorithm and bus bandwidths as nccl-tests defines them). This module makes the rows
of the table a comms benchmark prints, from records' JSON forms, and the table as text: the
run's console (``results.sinks.comms``) and ``param-compute totals`` print it. Torch-free.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

from param_compute.plan.summary import config_label, cut


def comms_row(record: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """One row of the table from a record's JSON form, or None (no ``comms``)."""
    comms = record.get("comms")
    if not isinstance(comms, dict):
        return None
    stats = ((record.get("stats") or {}).get("forward") or {})
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    return {"op": str(record.get("op_name")), "id": str(record.get("id")),
            "config": config_label(config), "group": comms.get("group"),
            "ranks": comms.get("ranks"), "bytes": comms.get("bytes"),
            "median_ms": stats.get("median"), "algbw_gbps": comms.get("algbw_gbps"),
            "busbw_gbps": comms.get("busbw_gbps"), "status": record.get("status")}


def comms_rows(records: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [row for row in map(comms_row, records) if row is not None]


def _size(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value:.0f} B"


def _number(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def format_comms(rows: List[Dict[str, Any]], width: Optional[int] = None) -> str:
    """The table as text: time (the slowest rank's median), algbw and busbw (GB/s)."""
    op = 30 if width is None else max(8, min(30, width - 78))
    header = (f"{'collective':<{op}} {'config':<18} {'group':<8} {'ranks':>5} {'bytes':>10} "
              f"{'time ms':>9} {'algbw GB/s':>10} {'busbw GB/s':>10}")
    lines = ["collectives (each sample the slowest rank's; bandwidth as nccl-tests defines it):",
             header, "-" * len(header)]
    for row in rows:
        lines.append(f"{cut(row['op'], op):<{op}} {cut(row['config'], 18):<18} "
                     f"{cut(str(row['group']), 8):<8} {row['ranks'] or '-':>5} "
                     f"{_size(row['bytes']):>10} {_number(row['median_ms'], 4):>9} "
                     f"{_number(row['algbw_gbps']):>10} {_number(row['busbw_gbps']):>10}")
    return "\n".join(lines)

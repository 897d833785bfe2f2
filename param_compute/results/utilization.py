"""How close a pass came to the machine's limits: utilization of peak FLOP/s and bandwidth.

Peaks come from ``python -m param_compute.calibrate`` (or ``--peaks FILE``) as
``{"flops_per_s": F, "bytes_per_s": B}`` for the pass's dtype. The bound that applies is read
off the roofline: a pass whose arithmetic intensity (FLOPs per byte touched) is at or above the
machine balance (F / B) is compute-bound, below it memory-bound. Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional


def utilization(flops: Optional[int], nbytes: Optional[int], seconds: Optional[float],
                peaks: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``flops_util``, ``bw_util`` (fractions of peak), ``intensity`` (FLOP/byte) and
    ``bound`` ("compute" or "memory") for one call's work done in ``seconds``; the keys whose
    inputs are missing, or whose value would not be a finite number (results are JSON: no
    ``Infinity``, no ``NaN``), are left out."""
    if not peaks or not _finite(seconds) or seconds <= 0:
        return {}
    peak_flops, peak_bw = peaks.get("flops_per_s"), peaks.get("bytes_per_s")
    peak_flops = peak_flops if _finite(peak_flops) and peak_flops > 0 else None
    peak_bw = peak_bw if _finite(peak_bw) and peak_bw > 0 else None
    out: Dict[str, Any] = {}
    if flops is not None and peak_flops:
        _put(out, "flops_util", lambda: flops / seconds / peak_flops)
    if nbytes is not None and peak_bw:
        _put(out, "bw_util", lambda: nbytes / seconds / peak_bw)
    if flops is not None and nbytes:
        _put(out, "intensity", lambda: flops / nbytes)
    if "intensity" in out and peak_flops and peak_bw:  # balance: finite, peaks are positive
        out["bound"] = ("compute" if out["intensity"] * peak_bw >= peak_flops else "memory")
    elif flops == 0 and nbytes and peak_bw:
        out["bound"] = "memory"  # no arithmetic at all: only bandwidth can limit it
    if "bound" in out:
        out["util"] = out.get("flops_util" if out["bound"] == "compute" else "bw_util")
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _put(out: Dict[str, Any], key: str, ratio) -> None:
    """``out[key] = ratio()`` where that is a finite number (an overflow is left out)."""
    try:
        value = ratio()
    except (OverflowError, ZeroDivisionError):
        return
    if math.isfinite(value):
        out[key] = value


def percent_of_peak(throughput: Optional[Dict[str, Any]]) -> str:
    """The table's cell: the utilization of the bound that applies, e.g. ``"83% mem"``.

    Above 100% of the memory peak the data was cache-resident (the peak is DRAM bandwidth):
    the cell says ``cache``, not a number. Above 100% of the FLOP peak the peak itself is
    suspect (calibrated on a busy machine, or for another dtype): ``>100% FLOP``."""
    if not throughput or throughput.get("util") is None:
        return "-"
    util = throughput["util"]
    if throughput["bound"] == "memory":
        return "cache" if util > 1.0 else f"{util:.0%} mem"
    return ">100% FLOP" if util > 1.0 else f"{util:.0%} FLOP"

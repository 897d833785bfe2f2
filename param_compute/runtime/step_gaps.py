"""Host gaps for the step replay: the original host's time between calls, fitted to the replay.

A live capture writes the original's unprofiled host step (``real_host_us``) and where its
host spent time outside the captured calls (``gap_us`` per call, ``tail_gap_us``): a shape,
since a Python timer cannot measure gaps of a few µs. The replay times its own host step (its
calls and its own work between them) and waits the difference out in that shape
(``runtime.step_replay``, ``--host-gaps``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple


def fit_gaps(step: Dict[str, Any], failed: Sequence[bool], replay_host_us: float
             ) -> Tuple[Optional[List[int]], int, Dict[str, Any]]:
    """(ns to wait before each call, ns after the last, what was done): the original's host
    step less the replay's own (``replay_host_us``), spread over the gaps in proportion to
    their captured shape; the gap before a call left out (``failed``) goes to the next call
    replayed (or after the last), as a capture hands on a call it left out. The waits are
    None where nothing is added, and the fit says why (``why``): the replay's host is as slow
    already, or the shape is empty (no gap to put the difference in)."""
    real = float(step["real_host_us"])
    weights, owed = [], 0.0
    for entry, left_out in zip(step["calls"], failed):
        gap = float(entry.get("gap_us", 0.0))
        if left_out:  # where its host time lay: before the next call replayed, as captured
            weights.append(0.0)
            owed += gap
        else:
            weights.append(owed + gap)
            owed = 0.0
    tail = owed + float(step.get("tail_gap_us", 0.0))
    total = sum(weights) + tail
    extra = real - replay_host_us
    fit = {"real_host_us": round(real, 1), "replay_host_us": round(replay_host_us, 1),
           "added_us": 0.0, "captured_gaps_us": round(total, 1)}
    if extra <= 0:
        fit["why"] = "the replay's own host step is as long as the original's already"
        return None, 0, fit
    if total <= 0:
        fit["why"] = ("the step file puts none of the original's host time between the calls "
                      "(every gap_us and tail_gap_us is 0): nowhere to add it")
        return None, 0, fit
    scale = extra * 1e3 / total
    fit["added_us"] = round(extra, 1)
    return [int(w * scale) for w in weights], int(tail * scale), fit

"""A step's two tracks as a Chrome trace (the JSON trace event format Perfetto and chrome://tracing open).

``param-compute totals RESULTS --trace OUT.json`` writes it (``analysis.workload_totals``). One
process per track (``analysis.step_tracks``): pid 1 the original, laid out from the step file,
pid 2 the replay, one call-timed step of it; each with two threads, named by metadata events
(``ph: "M"``): tid 1 ``calls``, one complete event (``ph: "X"``) per call, ``name`` its op,
``ts``/``dur`` in µs from the step's start, ``args`` its run key and index in the step file
(the original's with its ``gap_us``, the replay's with the original's time of the same call);
and tid 2 ``step``, one event spanning the step, whose ``args`` say what the track rests on
(``real_step_us``; which call-timed step, the measured step's median). A call whose time
reaches past the next one's start (rounding) ends where that one starts, so the calls of a
track never overlap. ``otherData`` names the results file, its line and the step file.
Torch-free.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from param_compute.analysis.step_tracks import ORIGINAL, StepTracks, Track

#: pid of each track; tid of its calls and of its whole step.
PIDS = {ORIGINAL: 1, "replay": 2}
CALLS_TID, STEP_TID = 1, 2
PROCESS_NAMES = {ORIGINAL: "original (the step file's times)",
                 "replay": "replay (param_compute, one call-timed step)"}


def _us(value: float) -> float:
    return round(value, 3)


def _metadata(pid: int, track: Track) -> List[Dict[str, Any]]:
    name = PROCESS_NAMES.get(track.name, track.name)
    return [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
             "args": {"sort_index": pid}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": CALLS_TID,
             "args": {"name": "calls"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": STEP_TID,
             "args": {"name": "step"}}]


def _calls(pid: int, track: Track, other: Optional[Dict[int, float]]
           ) -> List[Dict[str, Any]]:
    out = []
    calls = track.calls
    for number, call in enumerate(calls):
        duration = call.dur_us
        if number + 1 < len(calls):  # never past the next call's start
            duration = min(duration, max(0.0, calls[number + 1].start_us - call.start_us))
        args: Dict[str, Any] = {"run": call.run, "call": call.index}
        if other is not None and call.index in other:
            args["original_us"] = other[call.index]
        if call.gap_us:
            args["gap_us"] = call.gap_us
        out.append({"name": call.op, "cat": "call", "ph": "X", "pid": pid, "tid": CALLS_TID,
                    "ts": _us(call.start_us), "dur": _us(duration), "args": args})
    return out


def chrome_trace(tracks: StepTracks) -> Dict[str, Any]:
    """The trace as a JSON object (``traceEvents``, ``displayTimeUnit``, ``otherData``)."""
    events: List[Dict[str, Any]] = []
    original = tracks.original
    times = {call.index: call.dur_us for call in original.calls} if original else None
    for track in tracks.tracks():
        pid = PIDS[track.name]
        events.extend(_metadata(pid, track))
        events.extend(_calls(pid, track, None if track.name == ORIGINAL else times))
        events.append({"name": "step", "cat": "step", "ph": "X", "pid": pid, "tid": STEP_TID,
                       "ts": 0, "dur": _us(track.span_us),
                       "args": {**track.about, "calls": len(track.calls)}})
    other: Dict[str, Any] = {"results": tracks.source, "step_calls": tracks.step_calls}
    if tracks.step_file is not None:
        other["step_file"] = str(tracks.step_file)
    if tracks.cut:
        other["cut"] = f"the record kept the first {tracks.kept_calls} calls' times"
    if tracks.notes:
        other["notes"] = tracks.notes
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def trace_text(tracks: StepTracks) -> str:
    """:func:`chrome_trace` as compact JSON text (one line)."""
    return json.dumps(chrome_trace(tracks), separators=(",", ":"),
                      ensure_ascii=True) + "\n"

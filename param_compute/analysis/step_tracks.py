"""The replayed step beside its original as two tracks of calls, from the step record and the step file.

What the trace export (``analysis.step_trace``) and the report's timeline
(``analysis.step_timeline``) draw. Each track is the step's calls in order, each with its op,
run key, index in the step file, start and time (µs, from the step's start):

- the **replay**: the step record's ``timeline`` (``runtime.step_timeline``), one call-timed
  step kept call by call, the one whose sum is nearest the median's; calls that failed are not
  on it;
- the **original**: laid out from the step file the record names (``config.input.step_file``,
  else the file given): each call's ``gap_us`` of host time outside captured calls, then the
  call for its ``original_us``, one after the other; the step lasts to the last call's end and
  ``tail_gap_us``, or ``real_step_us`` where that is longer. On a device, where ``original_us``
  is the call's device time and the gaps its host's, that is the capture's shape, not when each
  kernel ran. A call without ``original_us`` is not on it.

Both are untrusted input. A step record whose timeline is missing or garbled is a
:class:`StepTracksError` naming ``RESULTS:LINE`` and the field; a step file that cannot be read,
is not the one replayed (other calls), or holds no original times leaves the original track out
with a note that says why (the tools print it as a warning). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from param_compute.errors import format_json_path
from param_compute.formatting import printable
from param_compute.runtime.step_timeline import (PACKED, Timeline, TimelineProblem,
                                                 check_timeline)
from param_compute.spec.step_file import (JOB_VERSION, StepFileError, rank_step, read_step_file,
                                          split_run_key)

#: The two tracks, as the trace and the report name them.
ORIGINAL, REPLAY = "original", "replay"


class StepTracksError(Exception):
    """No replay track can be drawn: the message names the file, the line and why."""


@dataclass
class Call:
    index: int  # in the step file's order
    op: str
    run: str
    start_us: float
    dur_us: float
    gap_us: Optional[float] = None  # the original's host time before it (the step file's)


@dataclass
class Track:
    name: str
    calls: List[Call]
    span_us: float  # the step on this track, from its start
    about: Dict[str, Any] = field(default_factory=dict)  # what it rests on, for people


@dataclass
class StepTracks:
    replay: Track
    original: Optional[Track]
    source: str  # RESULTS:LINE of the step record
    step_calls: int  # the step's calls (the record's)
    kept_calls: int  # the calls the timeline kept (failed ones included)
    cut: bool = False  # the timeline kept the first calls only
    step_file: Optional[Path] = None
    notes: List[str] = field(default_factory=list)  # what was left out, and why

    def tracks(self) -> List[Track]:
        return [t for t in (self.original, self.replay) if t is not None]


def last_step(steps: Sequence[Tuple[int, Dict[str, Any]]]) -> Optional[Tuple[int, Dict]]:
    """The last step record of a results file (``ResultsStream.steps``), with its line."""
    return steps[-1] if steps else None


def _object(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def replay_track(record: Dict[str, Any], source: str) -> Tuple[Track, Timeline]:
    """The replay's track from a step record (``source``: RESULTS:LINE, for messages)."""
    if record.get("status") not in (None, "ok"):
        error = _object(record.get("error"))
        why = printable(error.get("message") or record.get("status"), 200)
        raise StepTracksError(f"{source}: the step replay did not run ({why}): no timeline")
    step = _object(record.get("step"))
    try:
        timeline = check_timeline(step.get("timeline"), step.get("calls"))
    except TimelineProblem as problem:
        raise StepTracksError(f"{source}: step record's {problem}") from None
    calls = []
    span = 0.0
    for index in range(len(timeline)):
        start, duration = timeline.start_us[index], timeline.dur_us[index]
        if start is None or duration is None:
            continue
        key = timeline.key(index)
        calls.append(Call(index, split_run_key(key)[0], key, float(start), float(duration)))
        span = max(span, start + duration)
    about: Dict[str, Any] = {
        "what": f"call-timed step {timeline.step + 1} of {timeline.of} kept, the one whose "
                "sum of call times is nearest the median's"
        if timeline.step is not None and timeline.of else "a call-timed step",
        "layout": "calls laid end to end (device times)" if timeline.layout == PACKED
        else "as the host clock read them"}
    if timeline.sum_ms is not None:
        about["calls_sum_ms"] = timeline.sum_ms
    median = _object(_object(record.get("stats")).get("step")).get("median")
    if isinstance(median, (int, float)) and not isinstance(median, bool):
        about["step_median_ms"] = median
    return Track(REPLAY, calls, span, about), timeline


def step_file_of(record: Dict[str, Any], results: Path,
                 given: Optional[Path] = None) -> Optional[Path]:
    """Where the step file is: ``given``, else the record's ``config.input.step_file`` as
    written (relative to where the run was started), else beside the results file; None when
    the record names none."""
    if given is not None:
        return Path(given)
    named = _object(_object(record.get("config")).get("input")).get("step_file")
    if not isinstance(named, str) or not named or "\x00" in named or len(named) > 4096:
        return None
    path = Path(named)
    if path.is_absolute():
        return path
    for candidate in (path, results.parent / path, results.parent / path.name):
        if candidate.exists():
            return candidate
    return path


def original_track(data: Dict[str, Any], timeline: Timeline) -> Tuple[Optional[Track], str]:
    """The original's track from a checked step file (the calls the timeline holds), or
    (None, why)."""
    calls_in = data["calls"]
    for index in range(min(len(timeline), len(calls_in))):
        if calls_in[index]["run"] != timeline.key(index):
            return None, (f"is not the step that was replayed: call {index} runs "
                          f"{printable(calls_in[index]['run'], 120)} there, "
                          f"{printable(timeline.key(index), 120)} in the record")
    calls: List[Call] = []
    cursor = 0.0
    for index, entry in enumerate(calls_in[:len(timeline)]):
        gap = entry.get("gap_us")
        cursor += gap or 0.0
        duration = entry.get("original_us")
        if duration is None:
            continue
        calls.append(Call(index, split_run_key(entry["run"])[0], entry["run"], cursor,
                          float(duration), gap))
        cursor += duration
    if not calls:
        return None, ("holds no original time per call (original_us: capture --run, or "
                      "--from-et with --kineto, writes them)")
    if len(timeline) == len(calls_in):
        cursor += data.get("tail_gap_us") or 0.0
    laid_out = cursor
    if len(timeline) == len(calls_in):
        cursor = max(cursor, data.get("real_step_us") or 0.0)  # the step, where timed
    about: Dict[str, Any] = {
        "what": "the step file's calls, each after its gap_us, for its original_us",
        "laid_out_us": round(laid_out, 3)}
    left = len(calls_in[:len(timeline)]) - len(calls)
    if left:
        about["calls_without_original_us"] = left
    for key in ("real_step_us", "real_host_us", "real_host_from"):
        if data.get(key) is not None:
            about[key] = data[key]
    return Track(ORIGINAL, calls, cursor, about), ""


def read_tracks(results: Path, steps: Sequence[Tuple[int, Dict[str, Any]]],
                step_file: Optional[Path] = None) -> StepTracks:
    """The two tracks of a results file's last step record (``steps``: its step records with
    their lines); ``step_file``: the step file to lay the original out from, else the one the
    record names. Raises :class:`StepTracksError` when there is no replay track to draw."""
    found = last_step(steps)
    if found is None:
        raise StepTracksError(f"{printable(results)}: no step record (run --replay-step "
                              "writes one)")
    line, record = found
    source = f"{printable(results)}:{line}"
    replay, timeline = replay_track(record, source)
    step = _object(record.get("step"))
    count = step.get("calls") if isinstance(step.get("calls"), int) else len(timeline)
    out = StepTracks(replay, None, source, count, len(timeline), timeline.cut)
    path = step_file_of(record, results, step_file)
    if path is None:
        out.notes.append(f"{source}: the step record names no step file: the original's "
                         "track is left out (--step FILE names one)")
        return out
    out.step_file = path
    try:
        data = read_step_file(path)
    except StepFileError as exc:
        first = exc.problems[0] if exc.problems else None
        why = "unusable" if first is None else (
            f"{format_json_path(first.path)}: {first.message}" if first.path else first.message)
        more = len(exc.problems) - 1
        out.notes.append(f"{printable(path)}: {printable(why, 300)}"
                         + (f" (and {more} more problems)" if more > 0 else "")
                         + f": the original's track is left out (the step file of {source}; "
                           "--step FILE names another)")
        return out
    if data.get("version") == JOB_VERSION:  # a job's: the rank this record replayed
        rank = step.get("rank") if isinstance(step.get("rank"), int) else 0
        try:
            data = rank_step(data, rank)
        except StepFileError:
            out.notes.append(f"{printable(path)} has no step of rank {rank}: the original's "
                             "track is left out")
            return out
    if len(data["calls"]) != count:
        why = (f"has {len(data['calls'])} calls, the step replayed in {source} had {count}: "
               "it is not the step that was replayed")
    else:
        out.original, why = original_track(data, timeline)
    if out.original is None:
        out.notes.append(f"{printable(path)} {why}: the original's track is left out")
    return out

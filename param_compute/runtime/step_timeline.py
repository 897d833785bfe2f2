"""The step record's ``timeline``: one call-timed step of the replay, call by call, written and checked.

The step replay times every call in its call-timed steps (``runtime.step_run``); the record
keeps, besides each config's in-step time, one of those steps whole, so that the tools can draw
it beside the original (``analysis.step_tracks``): the representative one, whose sum of call
times is nearest the median of the sums (the earliest of equals). Its form, under the record's
``step``::

    "timeline": {"version": 1,
                 "layout": "measured",      # or "packed" (below)
                 "step": 3, "of": 12,       # which call-timed step, of how many kept
                 "sum_ms": 0.42,            # its calls' times summed
                 "runs": ["aten::mm|0|0|2", ...],   # each run key once
                 "run": [0, 1, 0, ...],     # per call (the step file's order): its key's index
                 "start_us": [0.0, 5.1, ...],       # per call: its start, from the first's
                 "dur_us": [4.8, 1.2, ...],         # per call: its time
                 "cut": true}               # only when the step had more calls than kept

A call that failed has ``null`` for its start and time. ``measured`` (the host): each start as
the clock read it, so the replay's own time between calls shows; ``packed`` (a device): the
calls' times laid end to end, since what lies between two calls' stamps there is the launch
cover, no part of the step. The first ``MAX_CALLS`` calls are kept (about 25 bytes a call: a
step of 100,000 calls adds some 2.5 MB to its record line), and the run keys at most
``MAX_RUN_CHARS`` characters in all; a longer step's timeline is cut there and says so.

The record is read back as untrusted input: :func:`check_timeline` returns the timeline or
raises :class:`TimelineProblem` naming the field (``step.timeline.start_us[3]``) and what is
wrong with it. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from param_compute.formatting import printable
from param_compute.results.stats import median

VERSION = 1
#: How the starts were taken (see the module's doc).
MEASURED, PACKED = "measured", "packed"
LAYOUTS = (MEASURED, PACKED)
#: The most calls a timeline keeps, and the most characters of run keys.
MAX_CALLS = 200_000
MAX_RUN_CHARS = 4 * 2**20
#: The longest run key a timeline may name (the step file's limit).
MAX_KEY_CHARS = 1024
#: The largest start or time (µs) a timeline may hold (31 years, as the step file's).
MAX_US = 1e15

WHERE = "step.timeline"


class TimelineProblem(ValueError):
    """A timeline that cannot be used: ``field`` (``step.timeline.dur_us[3]``) and ``why``."""

    def __init__(self, field: str, why: str):
        super().__init__(f"{field} {why}")
        self.field, self.why = field, why


@dataclass
class Timeline:
    """A checked timeline: per call its run key, start and time (µs; None: it failed)."""

    layout: str
    runs: List[str]
    run: List[int]
    start_us: List[Optional[float]]
    dur_us: List[Optional[float]]
    step: Optional[int] = None
    of: Optional[int] = None
    sum_ms: Optional[float] = None
    cut: bool = False

    def __len__(self) -> int:
        return len(self.run)

    def key(self, index: int) -> str:
        return self.runs[self.run[index]]


def representative(sums: Sequence[float]) -> int:
    """The index of the sum nearest the median of ``sums`` (the first of equals)."""
    middle = median(list(sums))
    return min(range(len(sums)), key=lambda i: (abs(sums[i] - middle), i))


def build_timeline(keys: Sequence[str], failed: Sequence[bool], passes: Sequence[Any],
                   layout: str) -> Optional[Dict[str, Any]]:
    """The record's ``timeline`` from the call-timed steps kept: ``passes`` holds per step
    (its times, its starts), ns by call index; ``keys`` and ``failed``, per call, its run key
    and whether it was left out. None when no step was call-timed."""
    if not passes:
        return None
    sums = [sum(times) for times, _ in passes]  # a failed call's time is 0
    pick = representative(sums)
    times, starts = passes[pick]
    table: Dict[str, int] = {}
    chars = 0
    run: List[int] = []
    start_us: List[Optional[float]] = []
    dur_us: List[Optional[float]] = []
    for index, key in enumerate(keys):
        if index >= MAX_CALLS:
            break
        if key not in table:
            if chars + len(key) > MAX_RUN_CHARS:
                break
            chars += len(key)
            table[key] = len(table)
        run.append(table[key])
        if failed[index]:
            start_us.append(None)
            dur_us.append(None)
        else:
            start_us.append(round(starts[index] / 1e3, 3))
            dur_us.append(round(times[index] / 1e3, 3))
    out: Dict[str, Any] = {"version": VERSION, "layout": layout, "step": pick,
                           "of": len(passes), "sum_ms": round(sums[pick] / 1e6, 4),
                           "runs": list(table), "run": run, "start_us": start_us,
                           "dur_us": dur_us}
    if len(run) < len(keys):
        out["cut"] = True
    return out


# -- reading it back ---------------------------------------------------------------------------

def _count(value: Any) -> bool:
    return type(value) is int and 0 <= value <= 2**31  # noqa: E721


def _time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and 0 <= value <= MAX_US


def _list(value: Any, name: str, limit: int) -> List[Any]:
    if not isinstance(value, list):
        raise TimelineProblem(f"{WHERE}.{name}", "is not a list" if value is not None
                              else "is missing")
    if len(value) > limit:
        raise TimelineProblem(f"{WHERE}.{name}", f"holds {len(value)} entries, over the "
                                                 f"limit of {limit}")
    return value


def check_timeline(value: Any, calls: Any = None) -> Timeline:
    """The timeline of a step record's ``step`` (``value``: its ``timeline``), checked field by
    field; ``calls``: the step's calls as the record says (the timeline holds no more).
    Raises :class:`TimelineProblem`."""
    if value is None:
        raise TimelineProblem(WHERE, "is missing (a step record written before the replay "
                                     "kept one, or by another tool): replay the step again")
    if not isinstance(value, dict):
        raise TimelineProblem(WHERE, "is not an object")
    if value.get("version") != VERSION:
        raise TimelineProblem(f"{WHERE}.version", f"is {printable(value.get('version'), 40)}, "
                                                  f"not {VERSION} (the version this reads)")
    layout = value.get("layout")
    if layout not in LAYOUTS:
        raise TimelineProblem(f"{WHERE}.layout", f"is {printable(layout, 40)}, not one of "
                                                 f"{', '.join(LAYOUTS)}")
    for name in ("step", "of"):
        if value.get(name) is not None and not _count(value[name]):
            raise TimelineProblem(f"{WHERE}.{name}", "is not a whole number >= 0")
    if value.get("sum_ms") is not None and not _time(value["sum_ms"]):
        raise TimelineProblem(f"{WHERE}.sum_ms", f"is not a number from 0 to {MAX_US:g}")
    if not isinstance(value.get("cut", False), bool):
        raise TimelineProblem(f"{WHERE}.cut", "is not true/false")
    runs = _list(value.get("runs"), "runs", MAX_CALLS)
    chars = 0
    for index, key in enumerate(runs):
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS:
            raise TimelineProblem(f"{WHERE}.runs[{index}]", f"is not a run key (text of 1 to "
                                                            f"{MAX_KEY_CHARS} characters)")
        chars += len(key)
    if chars > MAX_RUN_CHARS:
        raise TimelineProblem(f"{WHERE}.runs", f"holds {chars} characters, over the limit of "
                                               f"{MAX_RUN_CHARS}")
    run = _list(value.get("run"), "run", MAX_CALLS)
    starts = _list(value.get("start_us"), "start_us", MAX_CALLS)
    durations = _list(value.get("dur_us"), "dur_us", MAX_CALLS)
    if not len(run) == len(starts) == len(durations):
        raise TimelineProblem(WHERE, f"has {len(run)} run, {len(starts)} start_us and "
                                     f"{len(durations)} dur_us entries: one each per call")
    if _count(calls) and len(run) > calls:
        raise TimelineProblem(WHERE, f"holds {len(run)} calls, more than the step's {calls}")
    last = 0.0
    timed = 0
    for index, (number, start, duration) in enumerate(zip(run, starts, durations)):
        if not _count(number) or number >= len(runs):
            raise TimelineProblem(f"{WHERE}.run[{index}]", f"is not an index into runs (0 to "
                                                           f"{len(runs) - 1})")
        if start is None and duration is None:  # a call left out
            continue
        for name, item in (("start_us", start), ("dur_us", duration)):
            if not _time(item):
                raise TimelineProblem(f"{WHERE}.{name}[{index}]",
                                      f"is not a number from 0 to {MAX_US:g}"
                                      + (" (null only with the other null: a call left out)"
                                         if item is None else ""))
        if start < last:
            raise TimelineProblem(f"{WHERE}.start_us[{index}]",
                                  f"{start:g} is before the previous call's start ({last:g}): "
                                  "the calls are in the step's order")
        last = start
        timed += 1
    if run and not timed:
        raise TimelineProblem(WHERE, "has no call with a time")
    return Timeline(layout, list(runs), run, starts, durations, value.get("step"),
                    value.get("of"), value.get("sum_ms"), value.get("cut", False))

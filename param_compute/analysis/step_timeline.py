"""The HTML report's picture of the step: the original and the replay as two lanes of an inline SVG.

Drawn from the step's two tracks (``analysis.step_tracks``) on one time axis, the original above
the replay, so that where they part shows: each call a rectangle at its start, as wide as its
time, coloured by its op (the ops with the most time in both lanes get colours of their own,
the rest one grey), a legend naming the colours, and each rectangle's hover title saying its
op, call, run key, start and time. A step of thousands of calls stays a few thousand
rectangles: consecutive calls that would be narrower than a pixel together are merged into one
(coloured by the op with the most time in it, its title saying how many calls of which ops),
so each lane holds at most about two rectangles per pixel of width. Inline SVG, no script;
every text from the files escaped. Torch-free.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

from param_compute.analysis.html_page import e
from param_compute.analysis.step_tracks import ORIGINAL, Call, StepTracks, Track

#: Geometry (px): the label column, the plot, a lane and the gap between lanes.
LABEL, PLOT, RIGHT = 90, 1000, 20
LANE, LANE_GAP, TOP = 34, 14, 10
#: Consecutive calls narrower than this together (px) are one rectangle.
MERGE_PX = 1.0
#: Ops with a colour of their own; the rest are OTHER.
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f"]
OTHER = "#c8c8c8"
LEGEND_COLUMNS, LEGEND_ROW = 4, 18
LANE_NAMES = {ORIGINAL: "original", "replay": "replay"}


def _time(us: float) -> str:
    if us >= 1000:
        return f"{us / 1000:.3f} ms"
    return f"{us:.2f} µs"


def _tick(us: float) -> str:
    return f"{us / 1000:g} ms" if us >= 1000 else f"{us:g} µs"


def _step(span: float, ticks: int = 8) -> float:
    """A round tick step (1, 2 or 5 × 10^k µs) giving about ``ticks`` ticks over ``span``."""
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def op_colours(tracks: StepTracks) -> Dict[str, str]:
    """op -> colour: the ops with the most time over both lanes first."""
    totals: Dict[str, float] = {}
    for track in tracks.tracks():
        for call in track.calls:
            totals[call.op] = totals.get(call.op, 0.0) + call.dur_us
    ranked = sorted(totals, key=lambda op: (-totals[op], op))
    return {op: COLOURS[i] if i < len(COLOURS) else OTHER for i, op in enumerate(ranked)}


class _Box:
    """One rectangle: a call, or consecutive calls merged."""

    def __init__(self, call: Call, scale: float):
        self.calls = [call]
        self.x0 = call.start_us * scale
        self.x1 = (call.start_us + call.dur_us) * scale
        self.time: Dict[str, float] = {call.op: call.dur_us}

    def add(self, call: Call, scale: float) -> None:
        self.calls.append(call)
        self.x1 = max(self.x1, (call.start_us + call.dur_us) * scale)
        self.time[call.op] = self.time.get(call.op, 0.0) + call.dur_us

    def op(self) -> str:
        return max(self.time, key=lambda op: (self.time[op], op))

    def title(self) -> str:
        first, last = self.calls[0], self.calls[-1]
        if len(self.calls) == 1:
            return (f"{first.op}: call {first.index} ({first.run}), starts at "
                    f"{_time(first.start_us)}, takes {_time(first.dur_us)}")
        ops = sorted(self.time.items(), key=lambda item: -item[1])
        shown = ", ".join(f"{op} {_time(us)}" for op, us in ops[:3])
        more = f", {len(ops) - 3} more ops" if len(ops) > 3 else ""
        return (f"{len(self.calls)} calls merged ({first.index} to {last.index}), from "
                f"{_time(first.start_us)} to {_time(last.start_us + last.dur_us)}: "
                f"{shown}{more}")


def boxes(calls: List[Call], scale: float) -> List[_Box]:
    """The calls of a lane as rectangles, consecutive calls spanning less than ``MERGE_PX``
    together merged into one (calls in start order)."""
    out: List[_Box] = []
    current: Optional[_Box] = None
    for call in calls:
        end = (call.start_us + call.dur_us) * scale
        if current is not None and end - current.x0 < MERGE_PX:
            current.add(call, scale)
            continue
        current = _Box(call, scale)
        out.append(current)
    return out


def _lane(track: Track, top: float, scale: float, colours: Dict[str, str]) -> List[str]:
    name = LANE_NAMES.get(track.name, track.name)
    out = [f'<g class="lane" data-lane="{e(name)}">',
           f'<text x="{LABEL - 8}" y="{top + LANE / 2 + 4:.1f}" text-anchor="end" '
           f'font-size="12">{e(name)}</text>',
           f'<rect class="lane-bg" x="{LABEL}" y="{top}" width="{PLOT}" height="{LANE}" '
           f'fill="#f6f6f6"/>']
    for box in boxes(track.calls, scale):
        width = max(box.x1 - box.x0, 0.6)
        merged = ' data-merged="1"' if len(box.calls) > 1 else ""
        out.append(f'<rect class="call" x="{LABEL + box.x0:.2f}" y="{top + 2}" '
                   f'width="{width:.2f}" height="{LANE - 4}" '
                   f'fill="{colours.get(box.op(), OTHER)}"{merged}>'
                   f'<title>{e(box.title())}</title></rect>')
    end = LABEL + track.span_us * scale
    out.append(f'<line class="step-end" x1="{end:.2f}" y1="{top - 3}" x2="{end:.2f}" '
               f'y2="{top + LANE + 3}" stroke="#222" stroke-width="2"><title>'
               f'{e(name)}: the step ends at {e(_time(track.span_us))}</title></line>')
    out.append("</g>")
    return out


def _axis(top: float, span: float, scale: float) -> List[str]:
    out = [f'<line x1="{LABEL}" y1="{top}" x2="{LABEL + PLOT}" y2="{top}" stroke="#888"/>']
    step = _step(span)
    count = int(span / step) + 1
    for number in range(count + 1):
        us = number * step
        if us > span * 1.0001:
            break
        x = LABEL + us * scale
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + 4}" '
                   'stroke="#888"/>')
        out.append(f'<text x="{x:.1f}" y="{top + 16}" text-anchor="middle" '
                   f'font-size="11">{e(_tick(round(us, 6)))}</text>')
    return out


def _legend(top: float, colours: Dict[str, str]) -> Tuple[List[str], float]:
    entries = [(op, colour) for op, colour in colours.items() if colour != OTHER]
    others = len(colours) - len(entries)
    if others:
        entries.append((f"{others} other op{'s' if others != 1 else ''}", OTHER))
    width = (LABEL + PLOT) // LEGEND_COLUMNS
    out = ['<g class="legend">']
    for number, (name, colour) in enumerate(entries):
        row, column = divmod(number, LEGEND_COLUMNS)
        x, y = LABEL + column * width, top + row * LEGEND_ROW
        shown = name if len(name) <= 38 else name[:37] + "…"
        out.append(f'<g class="entry"><rect x="{x}" y="{y}" width="12" height="12" '
                   f'fill="{colour}"/><text x="{x + 17}" y="{y + 10}" font-size="11">'
                   f'{e(shown)}<title>{e(name)}</title></text></g>')
    out.append("</g>")
    rows = (len(entries) + LEGEND_COLUMNS - 1) // LEGEND_COLUMNS
    return out, rows * LEGEND_ROW


def timeline_svg(tracks: StepTracks) -> str:
    """The two lanes, their time axis and the legend, as one ``<svg>`` element."""
    lanes = tracks.tracks()
    span = max([track.span_us for track in lanes] + [1e-3])
    scale = PLOT / span
    colours = op_colours(tracks)
    parts: List[str] = []
    top = float(TOP)
    for track in lanes:
        parts.extend(_lane(track, top, scale, colours))
        top += LANE + LANE_GAP
    parts.extend(_axis(top - LANE_GAP + 4, span, scale))
    legend, height = _legend(top + 24, colours)
    parts.extend(legend)
    total_height = top + 24 + height + 6
    total_width = LABEL + PLOT + RIGHT
    return (f'<svg class="step-timeline" xmlns="http://www.w3.org/2000/svg" '
            f'width="{total_width}" height="{total_height:.0f}" '
            f'viewBox="0 0 {total_width} {total_height:.0f}" style="max-width:100%;height:auto" '
            f'role="img" aria-label="the step, call by call: original and replay">'
            + "".join(parts) + "</svg>")


def _about(track: Track) -> str:
    about = track.about
    name = LANE_NAMES.get(track.name, track.name)
    if track.name == ORIGINAL:
        text = (f"{name}: the step file's calls, each after its host gap (gap_us), for its "
                f"original time (original_us), {len(track.calls)} calls ending at "
                f"{_time(about.get('laid_out_us', track.span_us))}")
        if isinstance(about.get("real_step_us"), (int, float)):
            text += f"; the real step took {_time(about['real_step_us'])}"
        left = about.get("calls_without_original_us")
        if left:
            text += f"; {left} calls without an original time are not drawn"
        return text
    text = f"{name}: {about.get('what', 'a call-timed step')}, {len(track.calls)} calls"
    if isinstance(about.get("calls_sum_ms"), (int, float)):
        text += f" taking {_time(about['calls_sum_ms'] * 1000)} in all"
    if isinstance(about.get("step_median_ms"), (int, float)):
        text += f" (the timed steps' median: {_time(about['step_median_ms'] * 1000)})"
    return text + f"; starts {about.get('layout', '')}"


def timeline_section(tracks: Optional[StepTracks], problem: Optional[str] = None) -> str:
    """The report's section: the picture and what it rests on, or, where no replay track can
    be drawn, the reason (``problem``)."""
    head = "<h2>The step, call by call</h2>"
    if tracks is None:
        return head + f'<p class="note">No timeline of the step: {e(problem)}.</p>'
    notes = [_about(track) for track in tracks.tracks()]
    if tracks.cut:
        notes.append(f"the step has {tracks.step_calls} calls; the record kept the first "
                     f"{tracks.kept_calls} of them call by call")
    notes.append("consecutive calls narrower than a pixel together are drawn as one "
                 "(hover for what is in it)")
    notes.extend(tracks.notes)
    items = "".join(f"<li>{e(note)}</li>" for note in notes)
    return head + timeline_svg(tracks) + f'<ul class="note">{items}</ul>'

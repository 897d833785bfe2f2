"""``history show``: each series as a line of text with a unicode sparkline and its steps.

    torch.mm|0|0|0 (64×64·64×64 f32) [forward] on host cpu/x86_64 1t torch 2.13.0
      ▁▁▁▇██  c1 … c6 (6)  last 2.456 ms  step +19.4% at c4 (2.058 ms → 2.456 ms)

The sparkline spans the series' own range (a flat line when its medians are equal). Names and
labels come from the data: their control characters are printed as escapes (``\\n``,
``\\x1b``), never sent to the terminal.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Sequence, TextIO

from param_compute.formatting import format_ms
from param_compute.plan.summary import cut
from param_compute.history.series import Series
from param_compute.history.steps import Step, detect

BARS = "▁▂▃▄▅▆▇█"
#: Most points a sparkline shows (the latest ones).
SPARK_WIDTH = 60


#: Control characters (a terminal would act on them) as the escapes that name them.
_CONTROLS = {code: ascii(chr(code))[1:-1] for code in (*range(32), *range(127, 160))}


def plain(text: str) -> str:
    """Text from the data made safe to print: control characters shown as escapes."""
    return text.translate(_CONTROLS)


def sparkline(values: Sequence[float]) -> str:
    """One bar per value, from ▁ (the least) to █ (the most)."""
    if not values:
        return ""
    low, high = min(values), max(values)
    if high <= low:
        return BARS[0] * len(values)
    top = len(BARS) - 1
    return "".join(BARS[round((v - low) / (high - low) * top)] for v in values)


def describe_step(step: Step) -> str:
    return (f"{'+' if step.change >= 0 else ''}{100 * step.change:.1f}% at {plain(step.label)} "
            f"({format_ms(step.before)} → {format_ms(step.after)})")


def series_lines(series: Series, steps: List[Step]) -> List[str]:
    medians = [p.median for p in series.points]
    shown = medians[-SPARK_WIDTH:]
    more = "…" if len(medians) > len(shown) else ""
    labels = series.labels
    span = plain(labels[0] if len(labels) == 1 else f"{labels[0]} … {labels[-1]}")
    line = (f"  {more}{sparkline(shown)}  {span} ({len(labels)})  "
            f"last {format_ms(medians[-1])}")
    if steps:
        line += "  " + "; ".join(("step " if i == 0 else "") + describe_step(s)
                                 for i, s in enumerate(steps))
    return [plain(series.name), line]


def show(all_series: Iterable[Series], out: TextIO, min_change: float,
         width: Optional[int] = None) -> int:
    """Print every series, each line cut at ``width`` (``…``); the number printed."""
    count = 0
    for series in all_series:
        for line in series_lines(series, detect(series.points, min_change)):
            print(cut(line, width), file=out)
        count += 1
    return count

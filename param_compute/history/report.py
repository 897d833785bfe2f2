"""``history report -o DIR``: the history as a static HTML site (``DIR/index.html``).

One self-contained page, no server and no network (a Content-Security-Policy forbids any
fetch): an overview of the regressions and improvements found (series, label, size, levels),
then a plot per series (``history.plot``: median, interval band, steps marked, labels on the
axis). A select box filters by op (a few lines of inline script; ``index.html#op=NAME``
opens filtered). Series with steps are plotted first, at most ``max_plots`` in all, so a page
stays readable (and memory bounded) however long the history. Everything from the data is
HTML-escaped.
"""

from __future__ import annotations

import os
import time
from html import escape
from pathlib import Path
from typing import Iterable, List, Set, Tuple

from param_compute.errors import OptionsError
from param_compute.formatting import format_ms
from param_compute.history.backends import HistoryError
from param_compute.history.plot import series_svg
from param_compute.history.series import Series
from param_compute.history.steps import Step, detect
from param_compute.history.store import HistoryStore
from param_compute.files import write_output

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.6em} h3{font-size:.95em;margin:.2em 0}
table{border-collapse:collapse;font-size:.85em} td,th{border:1px solid #ccc;padding:3px 6px}
th{background:#f2f2f2;text-align:left} td.num{text-align:right;font-variant-numeric:tabular-nums}
.regression{color:#b00020} .improvement{color:#1b7f3b} .note{color:#666;font-size:.85em}
section.series{margin:1em 0 1.6em} .hidden{display:none}
svg .frame{fill:#fff;stroke:#bbb} svg .band{fill:#4a7bd1;fill-opacity:.18;stroke:none}
svg .median{fill:none;stroke:#2456b3;stroke-width:1.6} svg .point{fill:#2456b3}
svg .tick,svg .label{font-size:10px;fill:#444} svg .steptext{font-size:11px}
svg line.step{stroke-dasharray:4 3;stroke-width:1.4} svg line.regression{stroke:#b00020}
svg line.improvement{stroke:#1b7f3b} svg text.regression{fill:#b00020}
svg text.improvement{fill:#1b7f3b}
"""

SCRIPT = """
(function(){
  var select = document.getElementById('op-filter');
  function apply(op){
    var items = document.querySelectorAll('[data-op]');
    for (var i = 0; i < items.length; i++) {
      var show = !op || items[i].getAttribute('data-op') === op;
      items[i].classList.toggle('hidden', !show);
    }
    document.getElementById('shown').textContent =
      document.querySelectorAll('section.series:not(.hidden)').length;
  }
  select.addEventListener('change', function(){
    apply(select.value);
    history.replaceState(null, '', select.value ? '#op=' + encodeURIComponent(select.value)
                                                : '#');
  });
  var match = /^#op=(.*)$/.exec(location.hash);
  if (match) { select.value = decodeURIComponent(match[1]); }
  apply(select.value);
})();
"""

CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
       "img-src data:")


def _change(step: Step) -> str:
    return f"{'+' if step.change >= 0 else ''}{100 * step.change:.1f}%"


def _finding_rows(findings: List[Tuple[Step, Series, int]]) -> str:
    rows = []
    for step, series, number in findings:
        kind = "regression" if step.regression else "improvement"
        rows.append(f'<tr data-op="{escape(series.op)}"><td class="{kind}">{kind}</td>'
                    f'<td class="num {kind}">{_change(step)}</td><td>{escape(step.label)}</td>'
                    f'<td class="num">{escape(format_ms(step.before))} → '
                    f'{escape(format_ms(step.after))}</td>'
                    + (f'<td><a href="#series-{number}">{escape(series.name)}</a></td>'
                       if number >= 0 else f"<td>{escape(series.name)}</td>") + "</tr>")
    return "".join(rows)


def _section(series: Series, steps: List[Step], number: int) -> str:
    said = "; ".join(f"{_change(s)} at {s.label}" for s in steps) or "no step"
    return (f'<section class="series" id="series-{number}" data-op="{escape(series.op)}">'
            f"<h3>{escape(series.name)}</h3><p class=\"note\">{len(series.points)} label(s), "
            f"last {escape(format_ms(series.points[-1].median))}; {escape(said)}</p>"
            f"{series_svg(series, steps)}</section>")


def write_report(store: HistoryStore, all_series: Iterable[Series], output: Path, title: str,
                 min_change: float, max_plots: int) -> Path:
    """Write ``output/index.html``; its path."""
    if os.path.lexists(output) and (os.path.islink(output) or not output.is_dir()):
        raise HistoryError(f"-o {output}: not a directory (the dashboard is a folder: "
                           "DIR/index.html)")
    output.mkdir(parents=True, exist_ok=True)
    findings: List[Tuple[Step, Series, int]] = []
    with_steps: List[str] = []
    without: List[str] = []
    ops: Set[str] = set()
    count = 0
    for series in all_series:
        count += 1
        ops.add(series.op)
        steps = detect(series.points, min_change)
        plotted = bool(steps) and len(with_steps) < max_plots or \
            not steps and len(with_steps) + len(without) < max_plots
        number = count if plotted else -1
        if plotted:
            (with_steps if steps else without).append(_section(series, steps, number))
        for step in steps:
            findings.append((step, Series(series.machine, series.op, series.run_key,
                                          series.config, series.pass_name, series.kind),
                             number))
    plots = (with_steps + without)[:max_plots]
    findings.sort(key=lambda item: (not item[0].regression, -abs(item[0].change)))
    totals = store.counts()
    options = "".join(f'<option value="{escape(op)}">{escape(op)}</option>'
                      for op in sorted(ops))
    overview = (f"<table><thead><tr><th>kind</th><th>change</th><th>from label</th>"
                f"<th>level before → after</th><th>series</th></tr></thead><tbody>"
                f"{_finding_rows(findings)}</tbody></table>" if findings
                else "<p>No step found in any series.</p>")
    regressions = sum(1 for step, _, _ in findings if step.regression)
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{escape(title)}</h1><p class=\"note\">{totals['machines']} machine(s), "
            f"{totals['labels']} label(s), {count} series shown of {totals['series']}; "
            f"steps of at least {100 * min_change:g}%; written "
            f"{escape(time.strftime('%Y-%m-%d %H:%M:%S'))}.</p>"
            f'<p><label for="op-filter">op: </label><select id="op-filter">'
            f'<option value="">all ops</option>{options}</select> '
            f'<span class="note"><span id="shown">{len(plots)}</span> plot(s) shown</span></p>'
            f"<h2>Overview: {regressions} regression(s), {len(findings) - regressions} "
            f"improvement(s)</h2>{overview}"
            f"<h2>Series</h2><p class=\"note\">{len(plots)} of {count} plotted (series with "
            f"steps first; --max-plots)</p>{''.join(plots)}"
            f"<script>{SCRIPT}</script></body></html>")
    index = output / "index.html"
    try:  # checked as every output is: never through a link, never a directory or FIFO
        database = store.backend.path  # an SQLite file; None on PostgreSQL
        write_output("index.html", index, page, {"history database": database})
    except OptionsError as exc:
        raise HistoryError(str(exc)) from None
    return index

"""The HTML report's first section for a captured workload: the step, then where its time goes.

Three parts, in the order a person asks: the step totals (replayed Σ median × count, the
original step and the in-step replay where the results hold them, how much of the original the
capture covered), where the time goes per op (its share of the replayed step as a bar, beside
the original and in-step times and their ratio, with the ledger's one-word reason where they
differ), and the largest configs with their shapes. Built from :class:`WorkloadTotals` and the
fidelity ledger (:mod:`param_compute.analysis.ledger`); empty for results that are no captured
workload (no record carries a ``count``). Torch-free.
"""

from __future__ import annotations

from html import escape
from typing import Any, Dict, List, Optional

from param_compute.formatting import format_ms
from param_compute.analysis.ledger import AGREE, faults_text, has_faults
from param_compute.results.totals import WorkloadTotals


def _ms(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}"


def _x(value: Optional[float]) -> str:
    return "-" if value is None else (f"{value:.2f}×" if value >= 0.1 else f"{value:.2g}×")


def _ratio_cell(value: Optional[float]) -> str:
    """A ratio, marked where replay and original disagree by more than the ledger allows."""
    if value is None:
        return "<td class=\"num\">-</td>"
    off = not 1 / AGREE <= value <= AGREE
    return f"<td class=\"num{' off' if off else ''}\">{_x(value)}</td>"


def _bar(share: float) -> str:
    width = max(0.0, min(share, 1.0)) * 100
    return (f"<td class=\"share\"><span class=\"bar\" style=\"width:{width:.1f}%\"></span>"
            f"<span class=\"pct\">{share:.1%}</span></td>")


def _totals(totals: WorkloadTotals, ledger: Dict[str, Any]) -> str:
    items = [("replayed step (Σ median × count)",
              f"{format_ms(totals.total_ms)} over {totals.calls} calls in {totals.configs} "
              "configs")]
    if totals.failed_configs:
        items.append(("not measured", f"{totals.failed_configs} configs "
                                      f"({totals.failed_calls} calls)"))
    for label, key in (("original step, op time", "original_ms"),
                       ("original op time captured", "original_captured_ms"),
                       ("in-step replay (step replayed in order)", "in_step_ms"),
                       ("of it, the original's host gaps kept", "host_gaps_ms"),
                       ("real step (unprofiled)", "real_step_ms"),
                       ("real step outside its ops", "outside_ops_ms")):
        if ledger.get(key) is not None:
            items.append((label, f"{ledger[key]:.3f} ms"))
    if ledger.get("covered_fraction") is not None:
        items.append(("covered by the capture", f"{ledger['covered_fraction']:.1%}"))
    if ledger.get("isolated_ms") and ledger.get("original_ms"):
        items.append(("replayed / original", _x(ledger["isolated_ms"] / ledger["original_ms"])))
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in items)
    return f"<h2>Step totals</h2><dl class=\"totals\">{rows}</dl>"


def _per_op(totals: WorkloadTotals, ledger: Dict[str, Any]) -> str:
    by_op: Dict[str, Dict[str, Any]] = {row["op"]: row for row in ledger.get("ops", [])}
    has_original = any(r.get("original_ms") is not None for r in by_op.values())
    has_step = any(r.get("in_step_ms") is not None for r in by_op.values())
    head = ["op", "share of the replayed step", "configs", "calls", "replayed ms"]
    if has_original:
        head += ["original ms", "replayed / original"]
    if has_step:
        head += ["in-step ms", "replayed / in-step"]
    if has_original and has_step:
        head.append("in-step / original")
    faults = has_faults(ledger)
    if faults:
        head.append("page faults per step, original / in-step")
    if has_original or has_step:
        head.append("why they differ")
    out = ["<h2>Where the time goes</h2><p class=\"note\">Per op, Σ median × count of its "
           "configs" + (", beside the time the captured run spent in it" if has_original
                        else "") +
           (f"; ratios outside {1 / AGREE:.2f}–{AGREE:.2f}× are marked" if has_original
            or has_step else "") + ".</p><table class=\"ops\"><thead><tr>",
           "".join(f"<th>{escape(h)}</th>" for h in head), "</tr></thead><tbody>"]
    names: List[str] = [op.op_name for op in totals.top_ops()]
    names += [name for name in by_op if name not in names]  # not replayed: original only
    for name in names:
        op = totals.by_op.get(name)
        row = by_op.get(name, {})
        replayed = op.total_ms if op is not None and op.configs else None
        cells = [f"<td>{escape(name)}</td>", _bar(totals.share(replayed or 0.0)),
                 f"<td class=\"num\">{row.get('configs', op.configs if op else 0)}</td>",
                 f"<td class=\"num\">{row.get('calls', op.calls if op else 0)}</td>",
                 f"<td class=\"num\">{_ms(replayed)}</td>"]
        if has_original:
            cells += [f"<td class=\"num\">{_ms(row.get('original_ms'))}</td>",
                      _ratio_cell(row.get("isolated_over_original"))]
        if has_step:
            cells += [f"<td class=\"num\">{_ms(row.get('in_step_ms'))}</td>",
                      _ratio_cell(row.get("isolated_over_in_step"))]
        if has_original and has_step:
            cells.append(_ratio_cell(row.get("in_step_over_original")))
        if faults:
            cells.append(f"<td class=\"num\">{escape(faults_text(row) if row else '')}</td>")
        if has_original or has_step:
            cells.append(f"<td>{escape(row.get('reason') or '')}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _largest(totals: WorkloadTotals) -> str:
    head = ("op", "config", "median", "count", "median × count", "share")
    out = ["<h3>Largest configs</h3><table><thead><tr>",
           "".join(f"<th>{h}</th>" for h in head), "</tr></thead><tbody>"]
    for top in totals.top_configs():
        out.append(f"<tr><td>{escape(top.op)}</td><td class=\"config\" title=\"{escape(top.id)}\">"
                   f"{escape(top.config)}</td><td class=\"num\">{format_ms(top.median_ms)}</td>"
                   f"<td class=\"num\">{top.count}</td><td class=\"num\">"
                   f"{format_ms(top.total_ms)}</td>{_bar(totals.share(top.total_ms))}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def workload_html(totals: WorkloadTotals, ledger: Dict[str, Any]) -> str:
    """The captured workload's section ("" when no record carried a count)."""
    if not totals.configs and not totals.failed_configs:
        return ""
    return _totals(totals, ledger) + _per_op(totals, ledger) + _largest(totals)

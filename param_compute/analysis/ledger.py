"""The fidelity ledger: which numbers of a captured workload's replay predict production.

Per op and for the step: the original (the captured run's op time: Kineto with the
profiler's per-call cost subtracted, or each op timed in place by ``capture --run``), the
in-step replay (``--replay-step``: the step replayed in order, outputs fed to consumers), the
isolated replay (Σ median × count) and the real step when the capture timed it. Where two
of them differ by more than ``AGREE`` a one-word reason says why (the gap to the original
first: it says whether the replay predicts production), as a hint from the op, its page
faults and the direction of the gap:

* ``missing``: not captured, or failed in the replay (no replay time at all);
* ``profiler``: the original reads longer than the replay and comes from a profiler trace
  (its per-call cost; small calls above all), or, timed in place by ``capture --run``, its
  calls are small (under ``SMALL_CALL_US`` each: the in-place timer's own Python between
  calls leaves a call of a few microseconds colder than the step ran it);
* ``values``: the replay reads faster than the original for an op whose calls read an
  optimizer's state that the capture had no values for (a trace records none: the step file's
  ``original.values_unknown``, ``capture.trace.value_blind``): subnormal state runs several
  times slower on a CPU, generated ordinary values at full speed. The row's ``evidence`` says
  which calls and the remedy (a live capture's value profile, or ``--subnormal-state``);
* ``data``: an op whose time depends on index or integer data (embedding, gather, pooling
  indices, losses over targets): generated data differ from the real ones;
* ``allocation``: the op's minor page faults per step (first touches of fresh memory) differ
  between the original and the in-step replay in the direction of the time gap (the allocator
  handed one fresh pages and the other recycled memory), or slower in the step than isolated
  while making a fresh output the step touches first (which a hot isolated loop reuses; where
  the replay counted no first touches, that gap is ``cache``);
* ``cache``: any other gap between in-step and isolated or original (inputs written long
  before in the step, hot and alone in isolation);
* ``comms``: a collective whose times differ (its ranks' skew, the backend's thread sharing
  cores with compute, another network).

A collective's row (a job's, ``runtime.job``) is its communication time: the original's
from its issue to its backend span's end (or its kernels), the in-step time from its issue until its work completed, and the
isolated time measured alone across the ranks (the slowest rank's). A job's ledger also says,
per rank, the step's compute, its communication and the part of it not hidden behind compute
(``communication``); ``job_ledger`` puts the ranks of one job together (the job's
``in_step_ms`` is the median over the ranks of each rank's step).

A compiled region's graph (``graph::NAME``) is a row like an op's, marked ``(eager)`` where
``--eager-regions`` ran it as PyTorch runs it uncompiled; a trace's compiled regions that no captured
call ran are rows of their own (``compiled region kernels: ...``, original time only).

Torch-free: it reads the results file's run records and its step record (the step replay's,
``results.file``'s typed reader hands both).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional

from param_compute.formatting import printable
from param_compute.operators.collectives import is_collective
from param_compute.terminal import fit_lines
from param_compute.plan.runkey import key_of
from param_compute.results.fields import MAX_NUMBER, measured
from param_compute.results.file import STEP_PASS

#: Ratios within 1/AGREE .. AGREE count as agreeing.
AGREE = 1.25
#: Calls shorter than this (µs, in the original) are the in-place timer's to perturb.
SMALL_CALL_US = 25.0
#: Page faults per step that make a difference (4 MiB of first touches: about a millisecond).
FAULT_PAGES = 1024
#: Op name parts whose time depends on the values of index or integer data.
DATA_OPS = ("embedding", "index", "gather", "scatter", "take", "put", "pool", "nll_loss",
            "unique", "bincount", "one_hot", "sort", "topk", "ctc")


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return measured(a / b) if a is not None and b else None


def _differs(ratio: Optional[float]) -> bool:
    return ratio is not None and not 1 / AGREE <= ratio <= AGREE


def _data_op(op: str) -> bool:
    base = op.split("::", 1)[-1]
    return any(part in base for part in DATA_OPS)


def _faults_explain(ratio: float, in_step_faults: Optional[float],
                    original_faults: Optional[float]) -> bool:
    """Whether the op's page faults differ enough, and in the time gap's direction, to be its
    cause (the replay faulting more where it is slower, or less where it is faster)."""
    if in_step_faults is None or original_faults is None:
        return False
    more = in_step_faults - original_faults
    return abs(more) >= max(FAULT_PAGES, 0.25 * max(in_step_faults, original_faults)) \
        and (more > 0) == (ratio > 1)


def reason(op: str, original: Optional[float], in_step: Optional[float],
           isolated: Optional[float], profiled: bool, in_step_faults: Optional[float] = None,
           original_faults: Optional[float] = None, calls: int = 0,
           values_unknown: bool = False, collective: bool = False) -> str:
    """The one-word reason for a gap in an op's row ('' where its numbers agree);
    ``calls``: the op's calls per step (for the time of one call in the original);
    ``values_unknown``: its calls read state whose values the capture did not have. The gap
    to the original comes first (it says whether the replay predicts production); the gap
    between isolated and in-step replay is explained where the original agrees."""
    replay = in_step if in_step is not None else isolated
    if not replay:
        return "missing" if original else ""
    if collective:
        return "comms" if any(_differs(r) for r in (
            _ratio(replay, original), _ratio(isolated, in_step))) else ""
    to_original = _ratio(replay, original)
    if _differs(to_original):
        if in_step is not None and _faults_explain(to_original, in_step_faults,
                                                   original_faults):
            why = "allocation"
        elif values_unknown and to_original < 1:
            why = "values"
        elif _data_op(op):
            why = "data"
        else:
            small = bool(calls) and original is not None \
                and original * 1e3 / calls < SMALL_CALL_US
            why = "profiler" if to_original < 1 and (profiled or small) else "cache"
        return why
    isolated_to_step = _ratio(isolated, in_step)
    if _differs(isolated_to_step):
        first_touch = in_step_faults is None or in_step_faults >= FAULT_PAGES
        if _data_op(op):
            why = "data"
        elif isolated_to_step < 1 and not op.endswith("_") and first_touch:
            why = "allocation"
        else:
            why = "cache"
        return why
    return ""


def _values_unknown(entries: Any) -> Dict[str, Dict[str, Any]]:
    """op -> its step file's ``values_unknown`` entry, for ops given no value profile (one
    given a profile has its values, as far as the user knew them)."""
    out: Dict[str, Dict[str, Any]] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("op"), str) \
                and not entry.get("profile"):
            out[entry["op"]] = entry
    return out


def values_evidence(row: Dict[str, Any], entry: Dict[str, Any]) -> str:
    """Why ``values`` is the cause of a row's gap, with the remedy."""
    calls = _calls(entry.get("calls"))
    optimizer = printable(str(entry.get("optimizer") or "an optimizer"), 40)
    return (f"{'?' if calls is None else calls} of {row['calls']} calls read {optimizer}'s "
            f"state, whose values the capture did not record (a trace has none), and the "
            f"replay runs {_x(row['in_step_over_original'] or row['isolated_over_original'])}"
            " of the original: subnormal state is several times slower on a CPU, generated "
            "values are ordinary. Capture live (capture --run) for its value profile, or give "
            "one: capture --from-et ... --subnormal-state FRACTION")


def _object(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _step_fields(record: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """What the ledger reads of a step record: its ``step`` details with the step's ``stats``
    (its ``step`` pass's: how many steps, their median), and its error's text beside them."""
    record = _object(record)
    step = dict(_object(record.get("step")))
    step["stats"] = _object(_object(record.get("stats")).get(STEP_PASS))
    if "iterations" not in step and _calls(step["stats"].get("n")) is not None:
        step["iterations"] = step["stats"]["n"]
    error = record.get("error")
    if error is not None:
        error = _object(error)
        step["error"] = ": ".join(str(part) for part in (error.get("type"), error.get("message"))
                                  if part is not None)
    return step


def _calls(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) \
        and 0 <= value <= 2**53 else None


def _original_side(original_us: Any, device_side: bool,
                   collective: bool = False) -> Optional[float]:
    if not isinstance(original_us, dict):
        return None
    if collective and measured(original_us.get("comm")) is not None:
        return measured(original_us.get("comm"))  # its communication, not its issue
    if device_side and measured(original_us.get("device")):
        return measured(original_us.get("device"))
    return measured(original_us.get("cpu"))


def ledger_fields(record: Dict[str, Any]) -> Dict[str, Any]:
    """What :func:`build_ledger` reads of a record (kept while a file streams by): its key,
    count, original time, status and forward median."""
    forward = ((record.get("stats") or {}).get("forward") or {})
    return {"op_name": record.get("op_name"), "id": record.get("id"),
            "count": record.get("count"), "original_us": record.get("original_us"),
            "status": record.get("status"),
            "stats": {"forward": {"median": forward.get("median")}}}


def build_ledger(records: Iterable[Dict[str, Any]], step: Optional[Dict[str, Any]] = None,
                 run_options: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The ledger of a results file: its run records, its step record (the last, if any) and
    its header's run options."""
    device_side = str((run_options or {}).get("device") or "cpu").startswith("cuda")
    step = _step_fields(step)
    in_step_configs = step.get("configs") if isinstance(step.get("configs"), dict) else {}
    in_step_comms = _object(step.get("collectives"))
    ops: Dict[str, Dict[str, Any]] = {}
    partial = set()
    seen = set()  # the run keys the records hold
    for record in records:
        if not isinstance(record, dict):
            continue
        seen.add(key_of(str(record.get("op_name")), record.get("id")))
        count = record.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            continue
        op = str(record.get("op_name"))
        collective = is_collective(op)
        row = ops.setdefault(op, _row(op, collective))
        row["configs"] += 1
        row["calls"] += count
        original = _original_side(record.get("original_us"), device_side, collective)
        if original is not None:
            row["original_ms"] = (row["original_ms"] or 0.0) + original * count / 1e3
        median = measured(((record.get("stats") or {}).get("forward") or {}).get("median"))
        if record.get("status") == "ok" and median is not None:
            row["isolated_ms"] = (row["isolated_ms"] or 0.0) + median * count
        else:
            row["failed"] += 1
        in_step = in_step_configs.get(key_of(op, record.get("id")))
        comm = _object(in_step_comms.get(key_of(op, record.get("id"))))
        if collective and isinstance(in_step, dict) and measured(comm.get("comm_us")) is not None:
            in_step = {**in_step, "in_step_us": comm["comm_us"]}  # issue to completion
        if isinstance(in_step, dict) and measured(in_step.get("in_step_us")) is not None:
            calls = _calls(in_step.get("calls"))
            if calls is None:
                calls = count
            row["in_step_ms"] = (row["in_step_ms"] or 0.0) + in_step["in_step_us"] * calls / 1e3
            for field, key in (("in_step_faults", "faults"), ("original_faults",
                                                              "original_faults")):
                per_call = measured(in_step.get(key))
                if per_call is None:  # one config without counts: the op's sum is unknown
                    partial.add((op, field))
                else:
                    row[field] = (row[field] or 0.0) + per_call * calls
    for op, field in partial:
        ops[op][field] = None
    _step_only(ops, in_step_configs, in_step_comms, seen, device_side)
    original_info = step.get("original") if isinstance(step.get("original"), dict) else {}
    how = original_info.get("how") if isinstance(original_info.get("how"), dict) else {}
    # Originals come from a profiler trace unless the capture timed them live.
    profiled = "live timing" not in str(how.get("file", ""))
    unknown = _values_unknown(original_info.get("values_unknown"))
    missing = []
    for item in original_info.get("not_captured") or []:
        if not isinstance(item, dict):
            continue
        original = _original_side(item.get("original_us"), device_side)
        missing.append({"op": str(item.get("op")), "calls": _calls(item.get("calls")),
                        "original_ms": original / 1e3 if original is not None else None})
    rows = list(ops.values())
    for item in missing:
        if item["op"] in ops or not item["original_ms"]:
            continue
        rows.append({"op": item["op"], "configs": 0, "calls": item["calls"] or 0,
                     "original_ms": item["original_ms"], "in_step_ms": None,
                     "isolated_ms": None, "failed": 0, "original_faults": None,
                     "in_step_faults": None, "collective": is_collective(item["op"])})
    graphs = step.get("graphs") if isinstance(step.get("graphs"), dict) else {}
    eager = graphs.get("mode") == "eager"
    for row in rows:
        if row["op"].startswith("graph::"):  # a compiled region's graph: how it replayed
            row["replayed"] = "eager" if eager else "compiled"
        row["in_step_over_original"] = _ratio(row["in_step_ms"], row["original_ms"])
        row["isolated_over_original"] = _ratio(row["isolated_ms"], row["original_ms"])
        row["isolated_over_in_step"] = _ratio(row["isolated_ms"], row["in_step_ms"])
        blind = unknown.get(row["op"])
        row["reason"] = reason(row["op"], row["original_ms"], row["in_step_ms"],
                               row["isolated_ms"], profiled, row["in_step_faults"],
                               row["original_faults"], row["calls"], blind is not None,
                               row["collective"])
        if row["reason"] == "values":
            row["evidence"] = values_evidence(row, blind)
    rows.sort(key=lambda r: -max(r["original_ms"] or 0, r["in_step_ms"] or 0,
                                 r["isolated_ms"] or 0))
    return _totals(rows, step, original_info, missing, device_side)


def _row(op: str, collective: bool) -> Dict[str, Any]:
    """An op's row of the ledger, before its configs are added up."""
    return {"op": op, "configs": 0, "calls": 0, "original_ms": None, "in_step_ms": None,
            "isolated_ms": None, "failed": 0, "original_faults": None,
            "in_step_faults": None, "collective": collective}


def _step_only(ops: Dict[str, Dict[str, Any]], configs: Dict[str, Any], comms: Dict[str, Any],
               seen: set, device_side: bool) -> None:
    """Configs the step replayed whose isolated runs are not in the file (filtered out):
    their in-step time and original (the step file's, per call) still count for their op."""
    for key, in_step in configs.items():
        if key in seen or not isinstance(in_step, dict):
            continue
        op = str(key).rpartition("|")[0].rpartition("|")[0].rpartition("|")[0]
        calls = _calls(in_step.get("calls"))
        if not op or not calls:
            continue
        collective = is_collective(op)
        comm = _object(comms.get(key))
        per_call = measured(comm.get("comm_us")) if collective else \
            measured(in_step.get("in_step_us"))
        original = measured(comm.get("original_comm_us")) if collective else \
            measured(in_step.get("original_us"))
        row = ops.setdefault(op, _row(op, collective))
        row["configs"] += 1
        row["calls"] += calls
        if per_call is not None:
            row["in_step_ms"] = (row["in_step_ms"] or 0.0) + per_call * calls / 1e3
        if original is not None and not device_side:
            row["original_ms"] = (row["original_ms"] or 0.0) + original * calls / 1e3


def _totals(rows, step, original_info, missing, device_side) -> Dict[str, Any]:
    def total(key: str, collective: Optional[bool] = None) -> Optional[float]:
        values = [r[key] for r in rows if r[key] is not None
                  and (collective is None or r.get("collective") is collective)]
        return sum(values) if values else None

    stats = step.get("stats") if isinstance(step.get("stats"), dict) else {}
    recorded = original_info.get("total_us") if isinstance(original_info.get("total_us"),
                                                            dict) else {}
    side = "device" if device_side and measured(recorded.get("device")) else "cpu"
    whole = measured((original_info.get("total_us") or {}).get(side)) \
        if isinstance(original_info.get("total_us"), dict) else None
    captured = measured((original_info.get("captured_us") or {}).get(side)) \
        if isinstance(original_info.get("captured_us"), dict) else None
    original_ms = whole / 1e3 if whole else total("original_ms")
    captured_ms = captured / 1e3 if captured is not None else \
        sum(r["original_ms"] or 0 for r in rows if r["configs"])
    gaps = step.get("host_gaps") if isinstance(step.get("host_gaps"), dict) else {}
    in_step = measured(stats.get("median"))
    added = measured(gaps.get("added_us")) if gaps.get("kept") is True else None
    if added is not None and (in_step is None or added / 1e3 > in_step * 1.001 + 1e-3):
        added = None  # "of it": the waits are part of every step timed whole
    real_us = measured(step.get("real_step_us"))
    real_ms = real_us / 1e3 if real_us else None
    outside = real_ms - original_ms if real_ms and original_ms and real_ms > original_ms else None
    return {
        "rank": _calls(step.get("rank")),
        "world_size": _calls(step.get("world_size")),
        "in_step_ms": in_step,
        "host_gaps_ms": added / 1e3 if added is not None else None,
        "in_step_ops_ms": total("in_step_ms"),
        "in_step_faults": total("in_step_faults"),
        "original_faults": total("original_faults"),
        "isolated_ms": total("isolated_ms"),
        "original_ms": original_ms,
        "original_captured_ms": captured_ms if original_ms else None,
        "real_step_ms": real_ms,
        "outside_ops_ms": outside,
        "host_gaps_kept": gaps.get("kept") is True,
        "covered_fraction": _ratio(captured_ms, original_ms),
        "original_side": side,
        "step_replay": {key: _calls(step[key]) if key != "error" else printable(step[key], 500)
                        for key in ("calls", "replayed_calls", "iterations", "fed_inputs",
                                    "dataflow_mismatches", "failed_calls", "error")
                        if key in step} or None,
        "not_captured": missing,
        "compute": {"original_ms": total("original_ms", False),
                    "in_step_ms": total("in_step_ms", False),
                    "isolated_ms": total("isolated_ms", False)},
        "communication": _communication(step, original_info) if any(
            r.get("collective") for r in rows) else None,
        "regions": _regions(step, rows),
        "ops": rows,
    }


def _communication(step: Dict[str, Any], original_info: Dict[str, Any]) -> Dict[str, Any]:
    """A job's rank: its collectives' time in the step and the part not hidden behind
    compute, in the original and in the replay (ms per step)."""
    replay = _object(step.get("communication"))
    original = _object(original_info.get("communication"))

    def ms(value: Any) -> Optional[float]:
        number = measured(value)
        return number / 1e3 if number is not None else None
    return {"calls": _calls(replay.get("calls")),
            "original_ms": ms(original.get("comm_us")) if original else
            measured(replay.get("original_comm_ms")),
            "in_step_ms": measured(replay.get("comm_ms")),
            "original_exposed_ms": ms(original.get("exposed_us")),
            "in_step_exposed_ms": measured(replay.get("exposed_ms"))}


def _regions(step: Dict[str, Any], rows) -> Optional[Dict[str, Any]]:
    """The compiled regions: how their graphs replayed (the step record's ``graphs``), and
    the original time of regions a trace left uncovered (``compiled region kernels: ...``)."""
    graphs = step.get("graphs") if isinstance(step.get("graphs"), dict) else {}
    uncovered = [r for r in rows if r["op"].startswith("compiled region kernels")]
    if not graphs.get("count") and not uncovered:
        return None
    mode = graphs.get("mode") if graphs.get("mode") in ("eager", "compiled") else None
    eager_as = graphs.get("eager_as") if isinstance(graphs.get("eager_as"), dict) else {}
    return {"graphs": _calls(graphs.get("count")), "mode": mode,
            "as_own_ops": sum(1 for how in eager_as.values() if how == "graph"),
            "not_covered_ms": sum(r["original_ms"] or 0 for r in uncovered) or None}


def regions_note(ledger: Dict[str, Any]) -> Optional[str]:
    """One line on the step's compiled regions: replayed eagerly or compiled, or their time a
    trace could not capture."""
    regions = ledger.get("regions")
    if not regions:
        return None
    parts = []
    if regions.get("graphs"):
        own = regions.get("as_own_ops") or 0
        parts.append(f"{regions['graphs']} compiled regions' graphs replayed "
                     + (f"eagerly (--eager-regions: as PyTorch runs them uncompiled"
                        + (f"; {own} as their own aten ops one by one" if own else "") + ")"
                        if regions.get("mode") == "eager" else "compiled with Inductor"))
    if regions.get("not_covered_ms"):
        parts.append(f"{_ms(regions['not_covered_ms'])} ms of compiled region kernels not "
                     "covered (no captured call ran them)")
    return "; ".join(parts) or None


#: The share of the real step outside its ops from which the ledger says why (10%).
OUTSIDE_SHARE = 0.10


def outside_note(ledger: Dict[str, Any]) -> Optional[str]:
    """Why the in-step replay falls short of the real step when the step's time outside its
    ops is large and the replay did not keep the original's host gaps; None otherwise."""
    outside, real = ledger.get("outside_ops_ms"), ledger.get("real_step_ms")
    if outside is None or not real or outside < OUTSIDE_SHARE * real \
            or ledger.get("host_gaps_kept"):
        return None
    return (f"{100 * outside / real:.0f}% of the real step is outside its ops (framework work "
            "between calls, or a device waiting on its host): not replayed; --host-gaps on "
            "keeps it")


def _ms(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}" if value < 1e9 else f"{value:.3g}"


def _x(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}x" if value < 1e9 else f"{value:.3g}x"


def _count(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.0f}" if value < 1e12 else f"{value:.3g}"


def has_faults(ledger: Dict[str, Any]) -> bool:
    return any(row.get("original_faults") is not None or row.get("in_step_faults") is not None
               for row in ledger["ops"])


def faults_text(row: Dict[str, Any]) -> str:
    """``original/in-step`` page faults per step, ``-`` for an unknown side."""
    return "/".join(_count(row.get(key)) for key in ("original_faults", "in_step_faults"))


def format_ledger(ledger: Dict[str, Any], width: Optional[int] = None) -> str:
    """The ledger as plain text: the step totals, then one row per op. ``width``: no line
    wider (the op column narrows, a row's reason is cut, prose wraps)."""
    faults = has_faults(ledger)
    numbers = 70 + (18 if faults else 0)  # the columns after the op's
    op_width = 36 if width is None else max(8, min(36, width - numbers - 1))
    lines = ["fidelity ledger (ms per step):"]
    for label, key in (("real step (unprofiled)", "real_step_ms"),
                       ("in-step replay", "in_step_ms"),
                       ("  of it, host gaps kept (--host-gaps)", "host_gaps_ms"),
                       ("in-step replay, sum of ops", "in_step_ops_ms"),
                       ("isolated replay, Σ median × count", "isolated_ms"),
                       (f"original op time ({ledger['original_side']})", "original_ms"),
                       ("original op time captured", "original_captured_ms")):
        if key == "host_gaps_ms" and ledger.get(key) is None:
            continue
        lines.append(f"  {label:<36} {_ms(ledger[key]):>12}")
    if ledger["covered_fraction"] is not None:
        lines.append(f"  {'covered by the capture':<36} {100 * ledger['covered_fraction']:>11.1f}%")
    if ledger.get("outside_ops_ms") is not None:
        lines.append(f"  {'real step outside its ops':<36} {_ms(ledger['outside_ops_ms']):>12}")
    if ledger["real_step_ms"] and ledger["in_step_ms"]:
        lines.append(f"  {'in-step / real step':<36} "
                     f"{_x(_ratio(ledger['in_step_ms'], ledger['real_step_ms'])):>12}")
    note = outside_note(ledger)
    if note:
        lines.append(f"  ({note})")
    regions = regions_note(ledger)
    if regions:
        lines.append(f"  compiled regions: {regions}")
    touched = [ledger.get(key) for key in ("original_faults", "in_step_faults")]
    if any(count is not None and count >= FAULT_PAGES for count in touched):
        lines.append(f"  {'first touches a step, orig / in-step':<36} "
                     f"{'/'.join(_count(c) for c in touched):>12}")
        lines.append("  (fresh pages: how many a step takes depends on the host allocator's "
                     "settings, sys_info.allocator)")
    header = (f"{'op':<{op_width}} {'calls':>6} {'original':>10} {'in-step':>10} {'isolated':>10} "
              f"{'step/orig':>9} {'iso/orig':>9} {'iso/step':>9}"
              + (f" {'faults orig/step':>17}" if faults else "") + "  reason")
    lines += ["", header, "-" * len(header)]
    table = range(len(lines) - 2, len(lines) + len(ledger["ops"]))  # cut, not wrapped
    for row in ledger["ops"]:
        label = row["op"] + (" (eager)" if row.get("replayed") == "eager" else "")
        lines.append(f"{printable(label[:op_width]):<{op_width}} {row['calls']:>6} "
                     f"{_ms(row['original_ms']):>10} "
                     f"{_ms(row['in_step_ms']):>10} {_ms(row['isolated_ms']):>10} "
                     f"{_x(row['in_step_over_original']):>9} "
                     f"{_x(row['isolated_over_original']):>9} "
                     f"{_x(row['isolated_over_in_step']):>9}"
                     + (f" {faults_text(row):>17}" if faults else "") + f"  {row['reason']}")
    if faults:
        lines.append("faults: minor page faults per step (first touches of fresh memory), in "
                     "the original / in the in-step replay")
    evidence = [row for row in ledger["ops"] if row.get("evidence")]
    if evidence:
        lines.append("")
        lines += [f"{printable(row['op'][:60])}: {row['reason']}: {printable(row['evidence'])}"
                  for row in evidence[:8]]
    if ledger["not_captured"]:
        lines.append("")
        lines.append("not captured: " + ", ".join(
            f"{printable(m['op'][:60])} x{'?' if m['calls'] is None else m['calls']}"
            + (f" ({_ms(m['original_ms'])} ms)"
                                         if m["original_ms"] else "")
            for m in ledger["not_captured"][:12])
            + (" ..." if len(ledger["not_captured"]) > 12 else ""))
    return "\n".join(lines if width is None else fit_lines(lines, width, table))


def ledger_section(ledger: Dict[str, Any]) -> str:
    """The HTML report's first section (empty when the results hold no captured workload)."""
    from html import escape

    if not ledger["ops"]:
        return ""
    totals = "".join(
        f"<tr><td>{escape(label)}</td><td class=\"num\">{_ms(ledger[key])}</td></tr>"
        for label, key in (("real step (unprofiled)", "real_step_ms"),
                           ("in-step replay", "in_step_ms"),
                           ("of it, host gaps kept (--host-gaps)", "host_gaps_ms"),
                           ("isolated replay, Σ median × count", "isolated_ms"),
                           ("original op time", "original_ms"),
                           ("original op time captured", "original_captured_ms"),
                           ("real step outside its ops", "outside_ops_ms"))
        if key not in ("host_gaps_ms", "outside_ops_ms") or ledger.get(key) is not None)
    for note in (outside_note(ledger), regions_note(ledger)):
        if note:
            totals += f"<tr><td colspan=\"2\" class=\"note\">{escape(note)}</td></tr>"
    faults = has_faults(ledger)
    head = ("op", "calls", "original ms", "in-step ms", "isolated ms", "in-step / original",
            "isolated / original", "isolated / in-step") \
        + (("page faults, original / in-step",) if faults else ()) + ("reason",)
    body = "".join(
        f"<tr><td>{escape(row['op'] + (' (eager)' if row.get('replayed') == 'eager' else ''))}"
        f"</td><td class=\"num\">{row['calls']}</td>"
        + "".join(f"<td class=\"num\">{cell}</td>" for cell in (
            _ms(row["original_ms"]), _ms(row["in_step_ms"]), _ms(row["isolated_ms"]),
            _x(row["in_step_over_original"]), _x(row["isolated_over_original"]),
            _x(row["isolated_over_in_step"])) + ((faults_text(row),) if faults else ()))
        + f"<td>{escape(row['reason'])}"
        + (f"<br><span class=\"note\">{escape(row['evidence'])}</span>"
           if row.get("evidence") else "") + "</td></tr>" for row in ledger["ops"])
    return ("<h2>Fidelity ledger: which numbers predict production</h2>"
            "<p class=\"note\">ms per step; a reason names the likely cause where two numbers "
            f"differ by more than {int(100 * (AGREE - 1))}%.</p>"
            f"<table><tbody>{totals}</tbody></table><table><thead><tr>"
            + "".join(f"<th>{h}</th>" for h in head) + f"</tr></thead><tbody>{body}"
            "</tbody></table>")

"""``--explain``: how each variant of a spec expands, value by value, before anything runs.

For every arg-spec-list that ``RangeConfigIterator`` expands, one line per axis gives its path
and the values it takes (a ``[min, max(, step)]`` range written out), then each ``__copy__``
(``args[1].shape[0] = args[0].shape[1]``), then the number of runs, the product of the axes.
What a reader might take for a list of shapes shows as what it is. Pure Python, no torch.
"""

from __future__ import annotations

from typing import Any, Iterator, List

from param_compute.errors import format_json_path
from param_compute.spec.macros import (RANGE_ITERATOR, copy_steps, data_spec_axis_values,
                                       literal_count, range_length, variant_count)
from param_compute.spec.walker import SECTIONS, config_entries

#: Values written out per axis before ``…`` (the count is always given).
SHOWN_VALUES = 12


def _values(values) -> str:
    """``64, 128, 192, 256   (range [64, 256, 64])``; long lists cut after ``SHOWN_VALUES``."""
    count = (range_length([values.start, values.stop - 1, values.step])
             if isinstance(values, range) else len(values))
    text = ", ".join(str(v) for v in values[:SHOWN_VALUES])
    if count > SHOWN_VALUES:
        text += f", … ({count - SHOWN_VALUES} more)"
    if isinstance(values, range) and count:
        text += f"   (range [{values.start}, {values.start + (count - 1) * values.step}, " \
                f"{values.step}])"
    return text


def _axes(asl: Any) -> Iterator[tuple]:
    for section in ("args", "kwargs"):
        entries = asl.get(section) or ([] if section == "args" else {})
        keyed = enumerate(entries) if section == "args" else entries.items()
        for where, spec in keyed:
            if isinstance(spec, dict):
                yield from data_spec_axis_values(spec, (section, where))


def explain(raw: Any) -> List[str]:
    """The lines of ``--explain`` for a validated spec's JSON."""
    lines: List[str] = []
    for entry, path in config_entries(raw):
        op = raw[path[0]]
        for section in SECTIONS:
            iterator = op.get(f"{section}_iterator", "DefaultConfigIterator")
            for index, asl in enumerate(entry.get(section) or []):
                where = format_json_path(path + (section, index))
                if iterator != RANGE_ITERATOR or not isinstance(asl, dict):
                    lines.append(f"{where}: 1 run ({iterator}: taken as written)")
                    continue
                count = variant_count(asl)
                literal = literal_count(asl)
                note = (f"; written as {literal} value(s): ranges multiply"
                        if literal is not None and count > literal else "")
                lines.append(f"{where}: {count} run(s){note}")
                for axis, values in _axes(asl):
                    lines.append(f"  {format_json_path(axis)}: {_values(values)}")
                for sect, arg, attr, target, src_arg, src_elem in copy_steps(asl):
                    into = f"{sect}[{arg}].{attr}" + ("" if target is None else f"[{target}]")
                    source = f"args[{src_arg}].{attr}" + ("" if src_elem is None
                                                           else f"[{src_elem}]")
                    lines.append(f"  {into} = {source}   (__copy__)")
    return lines


def print_explanation(raw: Any) -> int:
    """Print ``explain(raw)`` (``--explain``); the exit status, 0."""
    print("\n".join(explain(raw)))
    return 0

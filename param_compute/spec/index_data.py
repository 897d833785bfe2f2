"""Integer tensors whose values have a structure: what a spec may say about them, checked.

Three optional keys of a ``tensor`` data spec (integer dtypes only) say how its values are made;
validation checks them with these functions and the data generator (``data.generator``) reads them
through ``parse_distribution``. Torch-free.

``distribution``: how values are drawn from ``value_range`` (or the default integer range):
  ``"uniform"`` (the default) or ``"zipf:ALPHA"`` (ALPHA > 0): value ``low + r`` has the weight
  of rank ``r + 1`` under Zipf's law, ``(r + 1) ** -ALPHA``, drawn from its continuous form
  (memory bounded by the tensor, not the range) and the ranks spread over the range by a fixed
  stride coprime with its size, so hot rows are not neighbours in memory.

``bags``: the tensor is one view of ``indices`` indices split into ``bags`` bags
  (``embedding_bag`` and its backward ops): ``{"indices": N, "bags": B, "as": FORM,
  "lengths": "fixed" | "uniform"}``. FORM ``offsets`` (shape ``[B]``: where each bag starts, a
  non-decreasing sequence from 0, each at most N), ``offsets_with_end`` (shape ``[B + 1]``, the
  last value N: ``include_last_offset``), ``offset2bag`` (shape ``[N]``: each index's bag) or
  ``bag_size`` (shape ``[B]``). ``lengths``: ``fixed`` (the default: every bag N / B indices,
  the first N mod B one more) or ``uniform`` (each index falls in a bag chosen uniformly at random,
  the same split for every tensor with the same N and B, so the args of one config agree).

``values``: the tensor's values themselves, a flat list of ``prod(shape)`` integers (at most
  ``MAX_VALUES``): the small metadata tensors whose values are what the op is about (the per-table
  row counts and offsets of a table-batched embedding, ``capture.tbe_rules``).

``pool_window``: the tensor holds max-pooling indices (``max_pool*_with_indices_backward``):
  ``{"input": [spatial dims], "kernel": [...], "stride": [...], "padding": [...],
  "dilation": [...]}``, one entry per spatial dim, or ``{"input": [...], "adaptive": true}``
  (``adaptive_max_pool*_backward``: output o's window spans ``[floor(o * size / out),
  ceil((o + 1) * size / out))``); each element lies in its output position's window, at a
  position chosen uniformly among those inside the input, as the flat offset in the input's
  spatial plane. The tensor's trailing dims are the pooled output's.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple

from param_compute.dtypes import DTYPE_NAMES

#: The default ``distribution``.
UNIFORM = "uniform"
ZIPF = "zipf"
BAG_FORMS = ("offsets", "offsets_with_end", "offset2bag", "bag_size")
BAG_LENGTHS = ("fixed", "uniform")
BAG_KEYS = ("indices", "bags", "as", "lengths")
POOL_KEYS = ("input", "kernel", "stride", "padding", "dilation")
#: Keys that decide a tensor's values (with them, ``value_range`` has no say).
STRUCTURE_KEYS = ("bags", "pool_window", "values")
#: The most values a ``values`` list may hold.
MAX_VALUES = 1 << 16
#: The integers each integer dtype holds.
_INT_BOUNDS = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
               "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
               "uint8": (0, 255)}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_distribution(text: Any) -> Tuple[str, float]:
    """``"uniform"`` -> ("uniform", 0.0); ``"zipf:1.1"`` -> ("zipf", 1.1); ValueError saying
    what is wrong otherwise."""
    if not isinstance(text, str):
        raise ValueError(f'a distribution is "uniform" or "zipf:ALPHA", got {text!r}')
    if text == UNIFORM:
        return UNIFORM, 0.0
    kind, sep, alpha = text.partition(":")
    if kind != ZIPF or not sep:
        raise ValueError(f'unknown distribution {text[:40]!r}: write "uniform" or "zipf:ALPHA" '
                         '(e.g. "zipf:1.05")')
    try:
        value = float(alpha)
    except ValueError:
        raise ValueError(f"zipf's ALPHA must be a number, got {alpha[:40]!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"zipf's ALPHA must be a finite number > 0, got {alpha[:40]!r}")
    return ZIPF, value


def bag_shape(bags: dict) -> List[int]:
    """The 1-d shape a ``bags`` view has."""
    form, count = bags["as"], bags["bags"]
    if form == "offset2bag":
        return [bags["indices"]]
    return [count + 1] if form == "offsets_with_end" else [count]


def bags_problems(bags: Any, shape: Any) -> List[Tuple[tuple, str]]:
    """(sub-path, message) for each problem of a ``bags`` object on a tensor of ``shape``."""
    if not isinstance(bags, dict):
        return [((), "bags is an object {indices, bags, as, lengths?}")]
    problems = [((key,), f"unknown key {key!r} (known: {', '.join(BAG_KEYS)})")
                for key in bags if key not in BAG_KEYS]
    for key in ("indices", "bags"):
        if not _is_int(bags.get(key)) or bags[key] < 0:
            problems.append(((key,), f"{key} must be an integer >= 0, got {bags.get(key)!r}"))
    if bags.get("as") not in BAG_FORMS:
        problems.append((("as",), f"as must be one of {', '.join(BAG_FORMS)}, got "
                                  f"{bags.get('as')!r}"))
    if bags.get("lengths", "fixed") not in BAG_LENGTHS:
        problems.append((("lengths",), f"lengths must be one of {', '.join(BAG_LENGTHS)}, got "
                                       f"{bags.get('lengths')!r}"))
    if not problems and bags["bags"] == 0 and bags["indices"] > 0:
        problems.append((("bags",), f"{bags['indices']} indices need at least one bag"))
    if not problems and isinstance(shape, list) and all(map(_is_int, shape)) \
            and shape != bag_shape(bags):
        problems.append(((), f"a {bags['as']} tensor of {bags['indices']} indices in "
                             f"{bags['bags']} bags has shape {bag_shape(bags)}, not {shape}"))
    return problems


def _window_span(size: int, kernel: int, stride: int, padding: int, dilation: int,
                 o: int) -> Tuple[int, int, int]:
    """(first position, count, step) of output position ``o``'s taps inside the input."""
    start = o * stride - padding  # where tap 0 lands; tap j at start + j * dilation
    first = 0 if start >= 0 else (-start + dilation - 1) // dilation
    last = min(kernel - 1, (size - 1 - start) // dilation)
    return start + first * dilation, last - first + 1, dilation


def window_spans(window: dict, axis: int, out: int) -> List[Tuple[int, int, int]]:
    """For each of ``out`` output positions along spatial dim ``axis``: (first position,
    count, step) of its window's positions inside the input (count < 1: none). An adaptive
    window of output o covers ``[floor(o * size / out), ceil((o + 1) * size / out))``."""
    size = window["input"][axis]
    if window.get("adaptive") is True:
        return [((o * size) // out, -(-(o + 1) * size // out) - (o * size) // out, 1)
                for o in range(out)]
    args = [window[key][axis] for key in ("kernel", "stride", "padding", "dilation")]
    return [_window_span(size, *args, o) for o in range(out)]


def pool_window_problems(window: Any, shape: Any) -> List[Tuple[tuple, str]]:
    """(sub-path, message) for each problem of a ``pool_window`` object on a tensor of
    ``shape`` (its trailing dims the pooled output's)."""
    if not isinstance(window, dict):
        return [((), "pool_window is an object {input, kernel, stride, padding, dilation} or "
                     "{input, adaptive: true}")]
    adaptive = window.get("adaptive", False)
    known = ("input", "adaptive") if adaptive is True else POOL_KEYS + ("adaptive",)
    problems = [((key,), f"unknown key {key!r} (known: {', '.join(known)})")
                for key in window if key not in known]
    if not isinstance(adaptive, bool):
        problems.append((("adaptive",), f"adaptive is true or false, got {adaptive!r}"[:100]))
    dims = window.get("input")
    if not isinstance(dims, list) or not 1 <= len(dims) <= 3:
        return problems + [(("input",), "input is the list of the pooled input's spatial dims "
                                        "(1 to 3 of them)")]
    lowest = {"input": 1, "kernel": 1, "stride": 1, "padding": 0, "dilation": 1}
    for key, low in lowest.items():
        values = window.get(key)
        if key not in known:
            continue
        if not isinstance(values, list) or len(values) != len(dims) \
                or not all(_is_int(v) and v >= low for v in values):
            problems.append(((key,), f"{key} must be {len(dims)} integers >= {low}, got "
                                     f"{values!r}"[:160]))
    if problems:
        return problems
    if not isinstance(shape, list) or not all(map(_is_int, shape)):
        return problems
    if len(shape) < len(dims):
        return [((), f"a tensor of {len(shape)} dims cannot hold {len(dims)}-d pooling indices")]
    outs = shape[len(shape) - len(dims):]
    for axis, out in enumerate(outs):
        for o, (_, count, _) in enumerate(window_spans(window, axis, out)):
            if count < 1:
                problems.append(((), f"the window of output position {o} along spatial dim "
                                     f"{axis} lies outside the input ({dims[axis]} wide)"))
                break
    return problems


def values_problems(values: Any, shape: Any, dtype: Any) -> List[Tuple[tuple, str]]:
    """(sub-path, message) for each problem of a ``values`` list on a tensor of ``shape``."""
    if not isinstance(values, list) or len(values) > MAX_VALUES \
            or not all(map(_is_int, values)):
        return [((), f"values is a list of at most {MAX_VALUES} integers")]
    if isinstance(shape, list) and all(map(_is_int, shape)) and len(values) != math.prod(shape):
        return [((), f"{len(values)} values for a tensor of shape {shape} "
                     f"({math.prod(shape)} elements)")]
    low, high = _INT_BOUNDS.get(DTYPE_NAMES.get(dtype, ""), (-math.inf, math.inf))
    for i, value in enumerate(values):
        if not low <= value <= high:
            return [((i,), f"{value} does not fit a {dtype} tensor")]
    return []


def structure_problems(spec: dict) -> List[Tuple[tuple, str, Optional[str]]]:
    """(path under the tensor spec, message, hint) for each problem of the keys this module
    owns, on one tensor data spec (dtype and shape taken as given when they are plain)."""
    present = [key for key in ("distribution",) + STRUCTURE_KEYS if key in spec]
    if not present:
        return []
    out: List[Tuple[tuple, str, Optional[str]]] = []
    dtype = spec.get("dtype")
    if isinstance(dtype, str) and dtype in DTYPE_NAMES \
            and not DTYPE_NAMES[dtype].startswith(("int", "uint")):
        out.append(((present[0],), f"{present[0]} applies to integer tensors, not {dtype}",
                    "use an integer dtype (long, int, ...) or drop it"))
        return out
    if "distribution" in spec:
        try:
            parse_distribution(spec["distribution"])
        except ValueError as exc:
            out.append((("distribution",), str(exc), None))
    structure = [key for key in STRUCTURE_KEYS if key in spec]
    if len(structure) > 1:
        out.append(((structure[1],), f"{structure[0]} and {structure[1]} both decide the "
                                     "values: give one", None))
    for key in structure:
        for other in ("value_range", "distribution", "stride", "storage_offset"):
            if other in spec:
                out.append(((other,), f"{other} cannot be combined with {key}, which decides "
                                      "the values (and a contiguous layout)",
                            f"drop {other}"))
    check = {"bags": bags_problems, "pool_window": pool_window_problems,
             "values": lambda values, shape: values_problems(values, shape, dtype)}
    for key in structure[:1]:
        for where, message in check[key](spec[key], spec.get("shape")):
            out.append(((key,) + where, message, None))
    return out


def fixed_lengths(indices: int, bags: int) -> List[int]:
    """``indices`` split into ``bags`` bags as evenly as can be (the first ones one longer)."""
    if bags <= 0:
        return []
    base, extra = divmod(indices, bags)
    return [base + (b < extra) for b in range(bags)]


def coprime_stride(size: int) -> int:
    """A stride near ``size`` x (golden ratio - 1) sharing no factor with ``size``: ``r ->
    r * stride mod size`` then visits every value once, spreading neighbours apart."""
    if size <= 2:
        return 1
    stride = max(1, int(size * 0.6180339887))
    while math.gcd(stride, size) != 1:
        stride += 1
    return stride

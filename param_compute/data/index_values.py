"""Values of integer tensors with a structure: row draws, embedding bags, pooling windows.

What the spec keys mean (``distribution``, ``bags``, ``pool_window``) and how they are checked
lives in ``spec.index_data``; this module makes the tensors. Random draws use torch's global
generator (seeded per run by the engine), except the ``uniform`` split of indices into bags,
which depends only on the number of indices and bags so that every tensor of one config
(offsets, offset2bag, bag sizes) describes the same bags.
"""

from __future__ import annotations

import zlib
from typing import Any, Dict, Sequence

import torch

from param_compute.spec.index_data import (UNIFORM, coprime_stride, fixed_lengths,
                                           parse_distribution, window_spans)

#: Above this many values the zipf ranks are not spread (``rank * stride`` would overflow int64).
MAX_SPREAD = 1 << 31


def draw_integers(shape: Sequence[int], low: int, high: int, distribution: str,
                  dtype: torch.dtype, device: Any) -> torch.Tensor:
    """Integers in ``[low, high)`` drawn as ``distribution`` says (``spec.index_data``)."""
    kind, alpha = parse_distribution(distribution)
    if kind == UNIFORM:
        return torch.randint(low, high, tuple(shape), dtype=dtype, device=device)
    size = high - low
    u = torch.rand(tuple(shape), dtype=torch.float64, device=device)
    if abs(alpha - 1.0) < 1e-12:  # the continuous Zipf law on [1, size + 1): inverse CDF
        x = torch.pow(float(size + 1), u)
    else:
        top = float(size + 1) ** (1.0 - alpha)
        x = torch.pow((top - 1.0) * u + 1.0, 1.0 / (1.0 - alpha))
    rank = (x.floor().to(torch.int64) - 1).clamp_(0, size - 1)
    if size <= MAX_SPREAD:
        rank = rank.mul_(coprime_stride(size)).remainder_(size)
    return rank.add_(low).to(dtype)


def _bag_lengths(indices: int, bags: int, lengths: str) -> torch.Tensor:
    if lengths == "fixed" or bags == 0:
        return torch.tensor(fixed_lengths(indices, bags), dtype=torch.int64)
    generator = torch.Generator().manual_seed(zlib.crc32(f"bags {indices} {bags}".encode()))
    chosen = torch.randint(0, bags, (indices,), generator=generator)
    return torch.bincount(chosen, minlength=bags)


def bag_values(bags: Dict[str, Any], dtype: torch.dtype, device: Any) -> torch.Tensor:
    """The ``bags`` view of ``bags["indices"]`` indices in ``bags["bags"]`` bags."""
    count, total, form = bags["bags"], bags["indices"], bags["as"]
    lengths = _bag_lengths(total, count, bags.get("lengths", "fixed"))
    if form == "bag_size":
        values = lengths
    elif form == "offset2bag":
        values = torch.repeat_interleave(torch.arange(count, dtype=torch.int64), lengths)
    else:
        ends = torch.cumsum(lengths, 0)
        values = torch.cat([torch.zeros(1, dtype=torch.int64), ends])
        if form == "offsets":
            values = values[:count]
    return values.to(dtype=dtype, device=device)


def pool_window_values(shape: Sequence[int], window: Dict[str, Any], dtype: torch.dtype,
                       device: Any) -> torch.Tensor:
    """Max-pooling indices of shape ``shape``: each a position inside its output's window,
    chosen uniformly among those that lie inside the input, as a flat spatial offset."""
    dims = window["input"]
    spatial = len(dims)
    flat = torch.zeros(tuple(shape), dtype=torch.int64)
    step = 1
    for axis in reversed(range(spatial)):
        out = shape[len(shape) - spatial + axis]
        spans = window_spans(window, axis, out)
        if any(count < 1 for _, count, _ in spans):
            raise ValueError(f"pool_window: a window along spatial dim {axis} lies outside "
                             "the input")
        view = [1] * len(shape)
        view[len(shape) - spatial + axis] = out
        begin, count, stride = (torch.tensor([span[i] for span in spans],
                                             dtype=torch.int64).view(view) for i in range(3))
        tap = (torch.rand(tuple(shape)) * count).long().clamp_(max=count - 1)
        flat += (begin + tap * stride) * step
        step *= dims[axis]
    return flat.to(dtype=dtype, device=device)

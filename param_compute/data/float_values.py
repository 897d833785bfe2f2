"""Floating tensors given a ``value_profile``: zeros, all-zero rows, subnormals, signs drawn.

What the profile means lives in ``spec.float_data``. Every draw comes from torch's global
generator, which the engine seeds per run, so the same spec gives the same data each time; a
profile without ``zero_rows`` or ``negative`` draws exactly what it drew before those keys
existed (the signs are one draw more, after the others).
"""

from __future__ import annotations

from typing import Dict, Tuple

import torch

from param_compute.spec.float_data import ZERO_ROWS


def split_rows(profile: Dict[str, float], shape: Tuple[int, ...]) -> Tuple[int, Dict[str, float]]:
    """(how many rows of a ``shape`` tensor are made all zero, the element-wise profile of the
    others): ``round(zero_rows x rows)`` rows, and the other rows' shares of zeros and
    subnormals raised so that over the whole tensor they are still ``zeros`` and
    ``subnormal``. A ValueError for a tensor of fewer than 2 dims (validation refuses the key
    there unless the shape is copied from another arg)."""
    if len(shape) < 2:
        raise ValueError(f"value_profile.zero_rows applies to tensors of at least 2 dims, not "
                         f"shape {list(shape)} (its shape copied from another arg by __copy__?)")
    rows = shape[0]
    zeros, subnormal = profile.get("zeros", 0), profile.get("subnormal", 0)
    chosen = min(rows, int(round(profile.get(ZERO_ROWS, 0) * rows)))
    negative = profile.get("negative", 0)
    if chosen == 0:
        return 0, {"zeros": zeros, "subnormal": subnormal, "negative": negative}
    if chosen == rows:
        return rows, {}
    rest = 1 - chosen / rows
    zeros = min(max(zeros - chosen / rows, 0) / rest, 1)
    subnormal = min(subnormal / rest, 1 - zeros)
    return chosen, {"zeros": zeros, "subnormal": subnormal,
                    "negative": min(negative / rest, max(1 - zeros - subnormal, 0))}


def with_profile(tensor: torch.Tensor, profile: Dict[str, float]) -> torch.Tensor:
    """``tensor`` (floating, contiguous) with each element made a zero with probability
    ``profile["zeros"]``, else a positive subnormal with probability ``profile["subnormal"]``,
    from one draw of torch's global generator; none when both are 0. The other elements are
    negated with probability ``negative / (1 - zeros - subnormal)`` (a second draw). With
    ``zero_rows`` (``tensor`` of 2 or more dims) that share of its rows is made all zero
    instead, at places drawn after the elements, and the elements of the other rows drawn as
    ``split_rows`` says."""
    if tensor.device.type == "meta":
        return tensor
    chosen = 0
    if profile.get(ZERO_ROWS, 0) > 0:
        chosen, profile = split_rows(profile, tuple(tensor.shape))
    out = _elements(tensor, profile)
    if chosen:
        out = out.index_fill(0, row_places(tensor.shape[0], chosen, tensor.device), 0)
    return out


def row_places(rows: int, chosen: int, device: torch.device) -> torch.Tensor:
    """``chosen`` distinct row indices out of ``rows``, at random places (one draw)."""
    return torch.randperm(rows, device=device)[:chosen]


def zero_rows_of_view(storage: torch.Tensor, view: torch.Tensor, chosen: int) -> None:
    """Zero ``chosen`` random rows of ``view`` (a strided view of the flat ``storage``) by
    writing zeros into ``storage`` (rows that share storage share their zeros): through the
    storage, since a view with overlapping elements cannot be written in place."""
    places = row_places(view.shape[0], chosen, view.device)
    positions = torch.arange(storage.numel(), device=view.device).as_strided(
        view.shape, view.stride(), view.storage_offset())
    storage.view(-1)[positions[places].reshape(-1)] = 0


def _elements(tensor: torch.Tensor, profile: Dict[str, float]) -> torch.Tensor:
    zeros, subnormal = profile.get("zeros", 0), profile.get("subnormal", 0)
    out = tensor
    if zeros > 0 or subnormal > 0:
        u = torch.rand(tensor.shape, device=tensor.device)
        out = tensor.masked_fill(u < zeros, 0)
        if subnormal > 0:  # tiny x [0.5, 1): subnormal and nonzero in every floating dtype
            spread = ((u - zeros) / subnormal).clamp_(0, 1).to(tensor.dtype)
            tiny = torch.finfo(tensor.dtype).tiny
            chosen = (u >= zeros) & (u < zeros + subnormal)
            out = torch.where(chosen, spread.mul_(0.5).add_(0.5).mul_(tiny), out)
    negative = profile.get("negative", 0)
    ordinary = 1 - zeros - subnormal
    if negative > 0 and ordinary > 0:  # zeros stay zeros; subnormals are never chosen
        flip = torch.rand(tensor.shape, device=tensor.device) < min(negative / ordinary, 1.0)
        if subnormal > 0:
            flip &= out.abs() >= torch.finfo(tensor.dtype).tiny
        out = torch.where(flip, -out, out)
    return out

"""The ``value_profile`` of a live floating tensor: its shares of zeros, subnormals, negatives.

What the key means and when a capture writes it lives in ``spec.float_data``. Counting is one
pass of read-only torch ops over at most ``MAX_SAMPLE`` elements: a larger tensor is sampled
with a stride along its largest dims (every k-th row of an embedding table, say), which reads
no more than that and copies nothing. All-zero rows (``zero_rows``, tensors of 2 or more dims)
are counted on the same sample, from the same zero mask: a row whose sampled elements are all
zero counts as all zero (exact when the sample steps through rows only, as it does for a table
with more rows than columns). The tensor and torch's generators are left untouched.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch

from param_compute.spec.float_data import profile_of

#: The most elements counted per tensor.
MAX_SAMPLE = 1 << 20


def sample(tensor: torch.Tensor, limit: int = MAX_SAMPLE) -> torch.Tensor:
    """A strided view of ``tensor`` with at most ``limit`` elements (``tensor`` itself when
    it has no more): its largest dim stepped through until it fits."""
    while tensor.numel() > limit:
        dim = max(range(tensor.dim()), key=lambda d: tensor.shape[d])
        step = -(-tensor.numel() // limit)  # ceil: enough when this dim alone is stepped
        index = [slice(None)] * tensor.dim()
        index[dim] = slice(None, None, min(step, tensor.shape[dim]))
        tensor = tensor[tuple(index)]
    return tensor


def value_profile(tensor: torch.Tensor) -> Optional[Dict[str, float]]:
    """The profile a capture writes for a floating ``tensor`` (None: ordinary values, an empty
    tensor, or one whose values cannot be read here)."""
    if not tensor.dtype.is_floating_point or tensor.numel() == 0 \
            or tensor.device.type == "meta":
        return None
    values = sample(tensor.detach())
    magnitude = values.abs()
    is_zero = values == 0
    tiny = torch.finfo(values.dtype).tiny
    counts = [is_zero.sum(), ((magnitude < tiny) & (magnitude > 0)).sum(),
              (values <= -tiny).sum()]
    rows = values.dim() >= 2 and values[0].numel() > 1  # rows of one element are elements
    if rows:
        counts.append(is_zero.flatten(1).all(1).sum())
    counts = torch.stack(counts).tolist()  # one sync on a device
    return profile_of(counts[0] / values.numel(), counts[1] / values.numel(),
                      counts[3] / values.shape[0] if rows else None,
                      negative=counts[2] / values.numel())

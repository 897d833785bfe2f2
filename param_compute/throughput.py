"""Work per call, counted once per config outside every timed region: FLOPs and bytes touched.

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode`` (one instance reused: building it
costs ~250 µs, entering it ~25 µs). Bytes touched are the bytes of the call's input and output
tensors (for backward: the output gradient in, the gradients of the inputs that require grad
out) — the memory traffic a perfectly cached kernel could not avoid.
"""

from __future__ import annotations

from typing import Any, Callable, Tuple

import torch


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in ``value`` (tensors, and lists/tuples/dicts of them)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def gradient_bytes(args: Any) -> int:
    """Bytes of the gradients a backward pass writes for the inputs that require grad."""
    if isinstance(args, torch.Tensor):
        return tensor_bytes(args) if args.requires_grad else 0
    if isinstance(args, dict):
        args = list(args.values())
    if isinstance(args, (list, tuple)):
        return sum(gradient_bytes(a) for a in args)
    return 0


class FlopCounter:
    """Counts the FLOPs of one call of a callable."""

    def __init__(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)

    def count(self, fn: Callable[[], Any]) -> Tuple[int, Any]:
        """(FLOPs, output) of one call of ``fn``."""
        with self._mode:
            output = fn()
        return int(self._mode.get_total_flops()), output

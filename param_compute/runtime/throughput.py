"""Work per call, counted once per config outside every timed region: FLOPs and bytes touched.

FLOPs come from torch's own formulas (``torch.utils.flop_counter``) applied by a light dispatch
mode. Bytes touched are the bytes of the call's input and output
tensors (for backward: the output gradient in, the gradients of the inputs that require grad
out) — the memory traffic a perfectly cached kernel could not avoid.
"""

from __future__ import annotations

from typing import Any, Callable, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry


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


class _FlopCountingMode(TorchDispatchMode):
    """Adds up the FLOPs of every aten call, with torch's own formulas (``flop_registry``).

    ``FlopCounterMode`` does the same, but as a dispatch mode wrapped for torch.compile its first
    use imports ``torch._dynamo``: 1.2 s and 70 MB on every run. ``_should_skip_dynamo`` is the
    switch torch documents for modes that need no such wrapping.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        output = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=output)
        return output


class FlopCounter:
    """Counts the FLOPs of one call of a callable (one mode object, reused)."""

    def __init__(self) -> None:
        self._mode = _FlopCountingMode()

    def count(self, fn: Callable[[], Any]) -> Tuple[int, Any]:
        """(FLOPs, output) of one call of ``fn``."""
        self._mode.flops = 0
        with self._mode:
            output = fn()
        return int(self._mode.flops), output

"""Work per call, counted once per config outside every timed region: FLOPs and bytes touched.

FLOPs come from torch's own formulas (``torch.utils.flop_counter``) applied by a light dispatch
mode. Bytes touched are the bytes of the call's input and output
tensors (for backward: the output gradient in, the gradients of the inputs that require grad
out) — the memory traffic a perfectly cached kernel could not avoid. A call whose aten ops are
all views, aliases or metadata queries (``t``, ``view``, ``detach``, ``expand``, ``size``...)
moves no data: it counts 0 bytes, whatever the size of the tensors it describes. An in-place op
counts what it reads (its inputs) and what it writes (its output, the same tensor as ``self``).
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
        #: Whether any op of the call read or wrote tensor data (not only views or metadata).
        self.moved = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        output = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=output)
        if not self.moved and moves_data(func):
            self.moved = True
        return output


#: Ops that torch's schemas do not mark as views but that only re-describe existing memory.
_VIEW_LIKE = frozenset({"_unsafe_view", "_reshape_alias", "lift_fresh", "lift", "_neg_view",
                        "_conj", "resolve_conj", "resolve_neg"})


def moves_data(func) -> bool:
    """Whether an aten op reads or writes tensor data: not a view or alias of its input
    (``is_view``), and returning a tensor or writing one (a metadata query returns neither)."""
    if func.is_view or func._overloadpacket.__name__ in _VIEW_LIKE:
        return False
    schema = func._schema
    return schema.is_mutable or any(str(r.type).startswith(("Tensor", "List[Tensor]",
                                                            "Optional[Tensor]"))
                                    for r in schema.returns)


class FlopCounter:
    """Counts the FLOPs of one call of a callable (one mode object, reused)."""

    def __init__(self) -> None:
        self._mode = _FlopCountingMode()

    def count(self, fn: Callable[[], Any]) -> Tuple[int, Any]:
        """(FLOPs, output) of one call of ``fn``; :attr:`moved` then says whether it moved
        any data (False for a call made only of views, aliases and metadata queries)."""
        self._mode.flops = 0
        self._mode.moved = False
        with self._mode:
            output = fn()
        return int(self._mode.flops), output

    @property
    def moved(self) -> bool:
        """Whether the last counted call read or wrote tensor data."""
        return self._mode.moved

"""Operators known to read or write out of bounds: which runs must only ever run isolated.

Some operators trust their index arguments: given indices the data generator drew at random, they
read or write outside their tensors and the process dies (a segfault) or, worse, goes on with
corrupted memory. Measured with torch 2.x on the CPU: the ``max_pool*_with_indices`` and
``adaptive_max_pool*`` backward ops and ``_segment_reduce_backward`` segfault on out-of-range
indices; ``segment_reduce`` does with ``unsafe=True`` (its check skipped) and lengths that overrun
the data. The engine runs such a run in an isolated worker even without ``--isolate`` (a crash
there is an error record), so it can't take the run down. Torch-free: names and configs only.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

#: aten base names (also reached as ``torch.X``) that never check their index inputs.
UNCHECKED_INDICES = frozenset({
    "max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward",
    "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward",
    "_segment_reduce_backward",
})
#: Operators whose checks an argument turns off: base name -> (keyword, positional index).
UNSAFE_FLAGS = {"segment_reduce": ("unsafe", 6)}


def base_name(op_name: str) -> str:
    """``aten::max_pool2d_with_indices_backward.grad_input`` or ``torch.segment_reduce`` ->
    the bare operator name."""
    if op_name.startswith("aten::"):
        return op_name[len("aten::"):].split(".", 1)[0]
    return op_name.rsplit(".", 1)[-1]


def _true(spec: Any) -> bool:
    return isinstance(spec, dict) and spec.get("value") is True


def unsafe_reason(op_name: str, config: Optional[Dict[str, Any]]) -> Optional[str]:
    """Why a run of ``op_name`` with this expanded input config may touch memory out of bounds,
    or None."""
    base = base_name(op_name)
    if base in UNCHECKED_INDICES:
        return f"{base} does not check its indices (out-of-bounds reads segfault)"
    flag = UNSAFE_FLAGS.get(base)
    if flag is None or not isinstance(config, dict):
        return None
    keyword, position = flag
    args = config.get("args") or []
    kwargs = config.get("kwargs") or {}
    if _true(kwargs.get(keyword) if isinstance(kwargs, dict) else None) or (
            isinstance(args, list) and len(args) > position and _true(args[position])):
        return f"{base} with {keyword}=True skips its bounds checks"
    return None

"""Operators known to read or write out of bounds: which runs must only ever run isolated.

Some operators trust their index arguments: given indices the data generator drew at random, they
read or write outside their tensors and the process dies (a segfault) or, worse, goes on with
corrupted memory. Measured with torch 2.x on the CPU: the ``max_pool*_with_indices`` and
``adaptive_max_pool*`` backward ops and ``_segment_reduce_backward`` segfault on out-of-range
indices; ``segment_reduce`` does with ``unsafe=True`` (its check skipped) and lengths that overrun
the data. The engine runs such a run in an isolated worker even without ``--isolate`` (a crash
there is an error record), so it can't take the run down. Torch-free: names and configs only.

One case is proved safe instead: a pooling backward whose indices the default data generator
draws from a ``value_range`` inside the pooled input's plane, or inside the windows of a valid
``pool_window`` over that plane (``spec.index_data``), with every shape consistent (what a
capture writes for a CNN: ``index_rules`` gives max-pool indices their windows). That run
cannot address outside its tensors, so it is measured in process like any other.

Operators of custom namespaces (``fbgemm::...``, ``custom_namespace``) are isolated by default
too: their kernels trust generated data as torch's unchecked ones do.
"""

from __future__ import annotations

from math import prod
from typing import Any, Dict, List, Optional

from param_compute.spec.index_data import pool_window_problems
from param_compute.spec.model import DEFAULT_DATA_GENERATORS

#: aten base names (also reached as ``torch.X``) that never check their index inputs.
UNCHECKED_INDICES = frozenset({
    "max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward",
    "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward",
    "_segment_reduce_backward",
})
#: Pooling backward ops whose indices address the flattened trailing (spatial) dims of the
#: pooled input: base name -> (position of grad_output, of self, of indices; spatial dims).
POOL_INDICES = {
    "max_pool2d_with_indices_backward": (0, 1, 7, 2),
    "max_pool3d_with_indices_backward": (0, 1, 7, 3),
    "adaptive_max_pool2d_backward": (0, 1, 2, 2),
    "adaptive_max_pool3d_backward": (0, 1, 2, 3),
}
_NAMES = ("grad_output", "self", "indices")
#: Operators whose checks an argument turns off: base name -> (keyword, positional index).
UNSAFE_FLAGS = {"segment_reduce": ("unsafe", 6)}


def base_name(op_name: str) -> str:
    """``aten::max_pool2d_with_indices_backward.grad_input`` or ``torch.segment_reduce`` ->
    the bare operator name."""
    if op_name.startswith("aten::"):
        return op_name[len("aten::"):].split(".", 1)[0]
    return op_name.rsplit(".", 1)[-1]


def custom_namespace(op_name: str) -> Optional[str]:
    """The namespace of an ``ns::op`` operator outside aten (``fbgemm``), else None. Its kernels
    are not torch's and unchecked: by default its runs are measured in an isolated worker."""
    from param_compute.operators.collectives import is_collective
    from param_compute.operators.names import TORCH_NAMESPACES

    namespace, sep, _ = op_name.partition("::")
    # (graph::NAME, a captured graph, runs aten's ops, compiled by torch's own Inductor)
    if not sep or namespace in ("aten", "graph") or namespace in TORCH_NAMESPACES \
            or is_collective(op_name):  # torch's own kernels, or torch.distributed's
        return None
    return namespace


def _true(spec: Any) -> bool:
    return isinstance(spec, dict) and spec.get("value") is True


def unsafe_reason(op_name: str, config: Optional[Dict[str, Any]],
                  data_generator: Optional[str] = None) -> Optional[str]:
    """Why a run of ``op_name`` with this expanded input config may touch memory out of bounds,
    or None. ``data_generator`` names the generator that makes the config's values (a bounds
    proof holds only for the default generator, whose ranges are known)."""
    base = base_name(op_name)
    if base in UNCHECKED_INDICES:
        if base in POOL_INDICES and data_generator in DEFAULT_DATA_GENERATORS and \
                _pool_indices_in_bounds(POOL_INDICES[base], config):
            return None
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


def _argument(config: Dict[str, Any], position: int, name: str) -> Any:
    args, kwargs = config.get("args") or [], config.get("kwargs") or {}
    if isinstance(kwargs, dict) and name in kwargs:
        return kwargs[name]
    return args[position] if isinstance(args, list) and len(args) > position else None


def _shape(spec: Any) -> Optional[List[int]]:
    if not (isinstance(spec, dict) and spec.get("type") == "tensor"):
        return None
    shape = spec.get("shape")
    if isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape):
        return shape
    return None


def _pool_indices_in_bounds(layout, config: Any) -> bool:
    """Whether every index the run can be given lies inside the pooled input's plane.

    Each grad_output element is paired with the index at the same position, and the index
    addresses the plane of the same batch entry and channel in the input. So: indices shaped
    exactly like grad_output, whose leading (batch, channel) dims are the input's, and index
    values drawn from ``[low, high]`` with ``0 <= low <= high < plane size``.
    """
    if not isinstance(config, dict):
        return False
    *positions, dims = layout
    grad, pooled, indices = (_argument(config, position, name)
                             for position, name in zip(positions, _NAMES))
    grad_shape, pooled_shape, index_shape = _shape(grad), _shape(pooled), _shape(indices)
    if grad_shape is None or pooled_shape is None or index_shape is None:
        return False
    if len(pooled_shape) not in (dims + 1, dims + 2) or index_shape != grad_shape \
            or len(grad_shape) != len(pooled_shape) \
            or grad_shape[:-dims] != pooled_shape[:-dims]:
        return False
    if indices.get("dtype") not in ("long", "int64"):
        return False
    window = indices.get("pool_window")
    if window is not None:  # every value inside a window, every window inside the plane
        return isinstance(window, dict) and window.get("input") == pooled_shape[-dims:] \
            and not pool_window_problems(window, index_shape)
    bounds = indices.get("value_range")
    if not (isinstance(bounds, list) and len(bounds) == 2
            and all(type(b) is int for b in bounds)):
        return False
    return 0 <= bounds[0] <= bounds[1] < prod(pooled_shape[-dims:])

"""The one byte estimate of a tensor data spec, before anything is allocated.

The memory guard (refusing configs above ``--max-memory``), the plan's cost estimate (shard
balancing, summaries) and the results' summaries count a tensor spec's bytes here: the storage
its shape, ``stride`` and ``storage_offset`` make the data generator allocate, times the item
size of its dtype (``dtypes.ITEM_SIZE``; a spec without a dtype is float32, as generated).
Torch-free.
"""

from __future__ import annotations

from typing import Any, Dict

from param_compute.dtypes import DTYPE_NAMES, ITEM_SIZE


def _int(value: Any) -> int:
    """A dim, stride or offset as the estimate counts it: non-numbers and negatives are 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def storage_elements(shape: Any, stride: Any = None, offset: Any = 0) -> int:
    """Elements of storage a tensor spec makes the data generator allocate.

    Contiguous: the product of the dims. With ``stride`` or ``storage_offset``: the storage the
    view needs, ``offset + 1 + sum((size - 1) * stride)`` (``offset`` alone for an empty view);
    a stride list of the wrong length is counted as the generator pairs it with the dims (the
    generator refuses it, but the estimate must not be the smaller for it) and never below the
    dense size; with one stride per dim (stride 0 for broadcast views) it is exactly the storage.
    """
    dims = [_int(d) for d in shape] if isinstance(shape, list) else []
    dense = 1
    for dim in dims:
        dense *= dim
    if stride is None and not offset:
        return dense
    offset = _int(offset)
    if any(dim == 0 for dim in dims):
        return offset
    strides = [_int(s) for s in stride] if isinstance(stride, list) else []
    if not strides:  # an offset contiguous view
        return offset + dense
    view = 1 + sum((size - 1) * step for size, step in zip(dims, strides))
    return offset + (view if len(strides) == len(dims) else max(view, dense))


def tensor_spec_bytes(spec: Dict[str, Any]) -> int:
    """Bytes of the storage a ``{"type": "tensor", ...}`` data spec makes the generator
    allocate (an unknown dtype, which validation refuses, counts as float32)."""
    dtype = DTYPE_NAMES.get(spec.get("dtype", "float"), "float32")
    elements = storage_elements(spec.get("shape") or [], spec.get("stride"),
                                spec.get("storage_offset", 0))
    return elements * ITEM_SIZE[dtype]

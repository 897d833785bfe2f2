"""Argument values -> data specs: tensors keep dtype, shape, strides and device; scalars, lists,
None, devices, dtypes, layouts and memory formats keep their values.

``tensor_spec`` is shared by both capture paths; ``live_spec`` converts the Python values a
``TorchDispatchMode`` sees (an execution trace's values are converted in ``execution_trace``).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

from ..dtypes import LAYOUT_NAMES, MEMORY_FORMAT_NAMES
from .workload import Unreplayable

#: torch dtype attribute name -> the spec's dtype name (PARAM's names where it has one).
SPEC_DTYPE = {
    "float32": "float", "float64": "double", "float16": "float16", "bfloat16": "bfloat16",
    "int32": "int", "int64": "long", "int8": "int8", "int16": "int16", "uint8": "uint8",
    "bool": "bool", "complex64": "complex64", "complex128": "complex128",
}
INTEGER_SPEC_DTYPES = frozenset({"int", "long", "int8", "int16", "uint8"})


def contiguous_stride(shape: Sequence[int]) -> List[int]:
    stride, step = [], 1
    for size in reversed(shape):
        stride.append(step)
        step *= max(size, 1)
    return list(reversed(stride))


def is_contiguous(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """As torch counts it: strides of size-1 dims don't matter, nor do those of empty tensors."""
    if any(size == 0 for size in shape):
        return True
    expected = contiguous_stride(shape)
    return all(size == 1 or have == want for size, have, want in zip(shape, stride, expected))


def tensor_spec(dtype: str, shape: Sequence[int], stride: Optional[Sequence[int]],
                device: str, storage_offset: int = 0,
                value_range: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """A data spec recreating a tensor: non-contiguous strides and a storage offset kept
    (dropped later where they don't matter), no grad (replayed ops run below autograd)."""
    spec: Dict[str, Any] = {"type": "tensor", "dtype": dtype, "shape": list(shape)}
    if stride is not None and len(stride) == len(shape) and not is_contiguous(shape, stride):
        spec["stride"] = list(stride)
    if storage_offset:
        spec["storage_offset"] = int(storage_offset)
    if value_range is not None:
        spec["value_range"] = [int(value_range[0]), int(value_range[1])]
    spec["requires_grad"] = False
    spec["device"] = device
    return spec


def float_spec(value: float) -> Dict[str, Any]:
    if math.isfinite(value):
        return {"type": "float", "value": value}
    return {"type": "float", "value": "nan" if math.isnan(value) else
            ("inf" if value > 0 else "-inf")}


def _enum_name(value: Any, names: Sequence[str], kind: str) -> str:
    name = str(value).rsplit(".", 1)[-1]
    if name not in names:
        raise Unreplayable(f"{kind} {name} has no spec name")
    return name


def live_tensor(tensor) -> Dict[str, Any]:
    import torch

    if tensor.layout != torch.strided:
        raise Unreplayable(f"a {tensor.layout} tensor argument (only strided tensors replay)")
    if tensor.is_quantized or getattr(tensor, "is_nested", False):
        raise Unreplayable("a quantized or nested tensor argument")
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        raise Unreplayable(f"a tensor subclass argument ({type(tensor).__name__})")
    if tensor.device.type == "meta":
        raise Unreplayable("a meta tensor argument")
    dtype = SPEC_DTYPE.get(str(tensor.dtype).rsplit(".", 1)[-1])
    if dtype is None:
        raise Unreplayable(f"a {tensor.dtype} tensor argument (no spec dtype)")
    value_range = None
    if dtype in INTEGER_SPEC_DTYPES and tensor.numel() > 0:
        value_range = (int(tensor.min()), int(tensor.max()))
    return tensor_spec(dtype, tensor.shape, tensor.stride(), str(tensor.device),
                       tensor.storage_offset(), value_range)


def live_spec(value: Any) -> Dict[str, Any]:
    """The data spec of one argument value seen by a dispatch mode."""
    import torch

    if value is None:
        return {"type": "none"}
    if isinstance(value, torch.Tensor):
        return live_tensor(value)
    if isinstance(value, bool):
        return {"type": "bool", "value": value}
    if isinstance(value, int):
        return {"type": "int", "value": value}
    if isinstance(value, float):
        return float_spec(value)
    if isinstance(value, str):
        return {"type": "str", "value": value}
    if isinstance(value, torch.device):
        return {"type": "device", "value": str(value)}
    if isinstance(value, torch.dtype):
        name = SPEC_DTYPE.get(str(value).rsplit(".", 1)[-1])
        if name is None:
            raise Unreplayable(f"dtype {value} has no spec name")
        return {"type": "dtype", "value": name}
    if isinstance(value, torch.layout):
        return {"type": "layout", "value": _enum_name(value, LAYOUT_NAMES, "layout")}
    if isinstance(value, torch.memory_format):
        return {"type": "memory_format",
                "value": _enum_name(value, MEMORY_FORMAT_NAMES, "memory format")}
    if isinstance(value, (list, tuple)):
        return {"type": "genericlist", "value": [live_spec(item) for item in value]}
    if isinstance(value, torch.Generator):
        raise Unreplayable("a torch.Generator argument (its state is not captured)")
    raise Unreplayable(f"an argument of type {type(value).__name__}")

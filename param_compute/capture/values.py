"""Argument values -> data specs: tensors keep dtype, shape, strides and device (live floating
tensors with many zeros or subnormals a ``value_profile``); scalars, lists, None, devices,
dtypes, layouts and memory formats keep their values.

``tensor_spec`` is shared by both capture paths; ``live_spec`` converts the Python values a
``TorchDispatchMode`` sees (an execution trace's values are converted in ``execution_trace``,
with the name tables kept here: trace element types, c10 enum codes).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

from param_compute.capture.accounting import Unreplayable
from param_compute.dtypes import DTYPE_NAMES, LAYOUT_NAMES, MEMORY_FORMAT_NAMES


def _first_spec_names() -> Dict[str, str]:
    names: Dict[str, str] = {}
    for spec_name, torch_name in DTYPE_NAMES.items():  # PARAM's name comes first in the table
        names.setdefault(torch_name, spec_name)
    return names


#: torch dtype attribute name -> the spec's dtype name (PARAM's names where it has one),
#: from the project's one dtype table.
SPEC_DTYPE = _first_spec_names()
#: spec dtype names (all spellings) of integer tensors.
INTEGER_SPEC_DTYPES = frozenset(name for name, torch_name in DTYPE_NAMES.items()
                                if torch_name.startswith(("int", "uint")))

#: Tensor element type names in execution traces (C++ type names) -> spec dtype names.
ET_DTYPES = {
    "float": SPEC_DTYPE["float32"], "double": SPEC_DTYPE["float64"],
    "c10::Half": SPEC_DTYPE["float16"], "c10::BFloat16": SPEC_DTYPE["bfloat16"],
    "int": SPEC_DTYPE["int32"], "long int": SPEC_DTYPE["int64"], "long": SPEC_DTYPE["int64"],
    "signed char": SPEC_DTYPE["int8"], "unsigned char": SPEC_DTYPE["uint8"],
    "short int": SPEC_DTYPE["int16"], "short": SPEC_DTYPE["int16"], "bool": SPEC_DTYPE["bool"],
    "c10::complex<float>": SPEC_DTYPE["complex64"],
    "c10::complex<double>": SPEC_DTYPE["complex128"],
}
#: c10 ``ScalarType`` codes (as traces record dtype arguments) -> spec dtype names.
SCALAR_TYPES = {0: SPEC_DTYPE["uint8"], 1: SPEC_DTYPE["int8"], 2: SPEC_DTYPE["int16"],
                3: SPEC_DTYPE["int32"], 4: SPEC_DTYPE["int64"], 5: SPEC_DTYPE["float16"],
                6: SPEC_DTYPE["float32"], 7: SPEC_DTYPE["float64"], 9: SPEC_DTYPE["complex64"],
                10: SPEC_DTYPE["complex128"], 11: SPEC_DTYPE["bool"], 15: SPEC_DTYPE["bfloat16"]}
#: c10 ``Layout`` codes -> names (``LAYOUT_NAMES``).
LAYOUTS = {0: "strided", 1: "sparse_coo", 2: "sparse_csr", 4: "sparse_csc", 5: "sparse_bsr",
           6: "sparse_bsc"}
#: c10 ``MemoryFormat`` codes -> names (``MEMORY_FORMAT_NAMES``).
MEMORY_FORMATS = {0: "contiguous_format", 1: "preserve_format", 2: "channels_last",
                  3: "channels_last_3d"}
assert set(LAYOUTS.values()) <= set(LAYOUT_NAMES)
assert set(MEMORY_FORMATS.values()) <= set(MEMORY_FORMAT_NAMES)


def split_types(text: str) -> List[str]:
    """The item types of a trace's ``GenericList[A,B]`` type text, split at top-level commas."""
    parts, depth, current = [], 0, []
    for char in text:
        if char in "[(<":
            depth += 1
        elif char in "])>":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


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
                value_range: Optional[Sequence[int]] = None,
                value_profile: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
    """A data spec recreating a tensor: non-contiguous strides and a storage offset kept
    (dropped later where they don't matter), no grad (replayed ops run below autograd)."""
    spec: Dict[str, Any] = {"type": "tensor", "dtype": dtype, "shape": list(shape)}
    if stride is not None and len(stride) == len(shape) and not is_contiguous(shape, stride):
        spec["stride"] = list(stride)
    if storage_offset:
        spec["storage_offset"] = int(storage_offset)
    if value_range is not None:
        spec["value_range"] = [int(value_range[0]), int(value_range[1])]
    if value_profile is not None:
        spec["value_profile"] = dict(value_profile)
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

    from param_compute.capture.live.value_profile import value_profile

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
                       tensor.storage_offset(), value_range, value_profile(tensor))


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

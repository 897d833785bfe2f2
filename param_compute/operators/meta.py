"""Sizes told by the meta device: what a call or a module build would allocate, allocating nothing.

A meta tensor has a shape, dtype and strides but no data, and torch's meta kernels compute
output shapes exactly as the real ones do. The memory guard's hooks use this: a module is built
on the meta device to count its weights, and a torch function or aten op is called on meta
arguments to count the storage its outputs need (``torch.ones(size=[12000, 12000])``: 576 MB;
``torch.outer`` of two 1e5 vectors: 40 GB). Every device an argument names (a ``torch.device``,
a device string such as ``"cuda:0"``) becomes ``meta`` first, so nothing lands on a real device.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Callable, Dict, Iterator, List, Set

import torch

#: A string argument naming a device (``cpu``, ``cuda``, ``cuda:1``...): moved to meta.
_DEVICE_NAME = re.compile(r"(cpu|cuda|xpu|mps|hpu|mtia|xla|privateuseone)(:[0-9]+)?")
_META = torch.device("meta")


def on_meta(value: Any) -> Any:
    """An argument tree with every device it names replaced by the meta device."""
    if isinstance(value, torch.device):
        return _META
    if isinstance(value, str):
        return "meta" if _DEVICE_NAME.fullmatch(value) else value
    if isinstance(value, dict):
        return {key: on_meta(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_meta(item) for item in value)
    return value


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


def new_storage_bytes(result: Any, inputs: Any) -> int:
    """Bytes of the distinct storages of ``result``'s tensors that none of ``inputs`` uses
    (an in-place op's output, or a view of an input, adds nothing)."""
    known: Set[int] = {_storage_key(t) for t in _tensors(inputs)}
    total = 0
    for tensor in _tensors(result):
        key = _storage_key(tensor)
        if key not in known:
            known.add(key)
            total += tensor.untyped_storage().nbytes()
    return total


def call_output_bytes(function: Callable[..., Any], args: List[Any],
                      kwargs: Dict[str, Any]) -> int:
    """Storage bytes the outputs of ``function(*args, **kwargs)`` need, from a call on the
    meta device (``args`` hold meta tensors; factories without a device get meta as the
    default device). Raises what the call raises (an op without a meta kernel, an output
    shape that depends on data)."""
    args, kwargs = on_meta(args), on_meta(kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the real call warns, once, where it should
        with _META:
            result = function(*args, **kwargs)
    return new_storage_bytes(result, (args, kwargs))


def module_bytes(module_class: type, args: Any, kwargs: Dict[str, Any]) -> int:
    """Bytes of the parameters and buffers of ``module_class(*args, **kwargs)``, built on the
    meta device (``nn.Linear(40000, 40000)``: 6.4 GB)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with _META:
            module = module_class(*on_meta(list(args)), **on_meta(kwargs))
    tensors = list(module.parameters()) + list(module.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def torch_owned(function: Any) -> bool:
    """True for a function of torch itself (``torch.*``, ``torch.nn.functional.*``, a Tensor
    method, an aten op): safe to call on meta arguments. A plugin's own function may have side
    effects, and another namespace's kernel may read the data a meta tensor does not have."""
    module = getattr(function, "__module__", None) or ""
    owner = getattr(function, "__objclass__", None)
    if module.startswith("torch._ops."):  # torch.ops.<namespace>: only aten's kernels are torch's
        return module == "torch._ops.aten"
    return (module == "torch" or module.startswith("torch.")
            or owner is not None and (getattr(owner, "__module__", "") or "").startswith("torch"))

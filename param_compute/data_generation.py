"""``PyTorch:DefaultDataGenerator``: expanded arg specs -> real Python values and tensors.

Random values come from Python's ``random`` and torch's global generators, which the engine seeds
per run from ``--seed`` and the run id (``seed_for_run``): every run gets the same data on every
invocation, including when resumed from its middle.
"""

from __future__ import annotations

import random
import zlib
from typing import Any, Dict, List, Tuple

import torch

from .dtypes import DTYPE_NAMES, is_differentiable
from .interfaces import DataGenerator

# PARAM's default for integer tensors without value_range: uniform integers in [-10, 10).
DEFAULT_INT_LOW, DEFAULT_INT_HIGH = -10, 10


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, DTYPE_NAMES[name])


def seed_for_run(seed: int, run_key: str) -> int:
    """A per-run seed that depends only on ``--seed`` and the run's ``op|id`` key."""
    return zlib.crc32(f"{seed}|{run_key}".encode()) ^ (seed & 0xFFFFFFFF)


def seed_generators(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def _tensor(spec: Dict[str, Any], device: str) -> torch.Tensor:
    dtype = torch_dtype(spec["dtype"])
    shape = tuple(spec["shape"])
    value_range = spec.get("value_range")
    if dtype.is_floating_point or dtype.is_complex:
        tensor = torch.rand(shape, dtype=dtype, device=device)
        if value_range:
            low, high = value_range
            tensor.mul_(high - low).add_(low)
    elif dtype == torch.bool:
        tensor = torch.randint(0, 2, shape, device=device).bool()
    else:
        if value_range:
            low, high = int(value_range[0]), int(value_range[1]) + 1
        elif dtype == torch.uint8:
            low, high = 0, DEFAULT_INT_HIGH
        else:
            low, high = DEFAULT_INT_LOW, DEFAULT_INT_HIGH
        tensor = torch.randint(low, high, shape, dtype=dtype, device=device)
    requires_grad = spec.get("requires_grad", is_differentiable(spec["dtype"]))
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _number(spec: Dict[str, Any], draw) -> Any:
    if "value" in spec:
        return spec["value"]
    low, high = spec["value_range"]
    return draw(low, high)


def materialize(spec: Dict[str, Any], device: str) -> Any:
    """One expanded data spec -> its value on ``device``."""
    kind = spec["type"]
    if kind == "tensor":
        return _tensor(spec, device)
    if kind in ("int", "long"):
        return _number(spec, random.randint)
    if kind in ("float", "double"):
        return _number(spec, random.uniform)
    if kind == "bool":
        return spec["value"]
    if kind == "str":
        return spec.get("value", "")
    if kind == "none":
        return None
    if kind == "device":
        return torch.device(spec["value"])
    if kind == "dtype":
        return torch_dtype(spec["value"])
    if kind == "genericlist":
        return [materialize(item, device) for item in spec["value"]]
    if kind == "tuple":
        return tuple(materialize(item, device) for item in spec["value"])
    raise ValueError(f"unknown data type {kind!r}")


class DefaultDataGenerator(DataGenerator):
    """Materializes every arg and kwarg of an expanded arg-spec-list, in order."""

    def get_data(self, config: Dict[str, Any], device: str) -> Tuple[List[Any], Dict[str, Any]]:
        if not config:
            return [], {}
        args = [materialize(spec, device) for spec in config.get("args") or []]
        kwargs = {k: materialize(spec, device) for k, spec in (config.get("kwargs") or {}).items()}
        return args, kwargs


def register_builtin_generators() -> None:
    from .registry import REGISTRIES, register_data_generator

    for name in ("PyTorch:DefaultDataGenerator", "PyTorch::DefaultDataGenerator"):
        if name not in REGISTRIES.data_generators:
            register_data_generator(name, DefaultDataGenerator)

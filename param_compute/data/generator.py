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

from param_compute.dtypes import DTYPE_NAMES, LAYOUT_NAMES, MEMORY_FORMAT_NAMES, is_differentiable
from param_compute.plan.runkey import join_fields
from param_compute.plugins.interfaces import DataGenerator
from param_compute.data.index_values import bag_values, draw_integers, pool_window_values
from param_compute.data.float_values import split_rows, with_profile, zero_rows_of_view
from param_compute.spec.float_data import VALUE_PROFILE, ZERO_ROWS
from param_compute.spec.index_data import UNIFORM

# PARAM's default for integer tensors without value_range: uniform integers in [-10, 10).
DEFAULT_INT_LOW, DEFAULT_INT_HIGH = -10, 10


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, DTYPE_NAMES[name])


def seed_for_run(seed: int, run_key: str) -> int:
    """A per-run seed that depends only on ``--seed`` and the run's ``op|id`` key."""
    return zlib.crc32(join_fields(seed, run_key).encode()) ^ (seed & 0xFFFFFFFF)


def seed_generators(seed: int, device: str = "cpu") -> None:
    """Seed Python's generator and torch's generator(s) for ``device``.

    Not ``torch.manual_seed``: on a build with CUDA/XPU/MTIA support it also queues a deferred
    seeding of every such backend, capturing a stack trace each time (~0.13 ms per config).
    CPU data are the same bit for bit: ``torch.manual_seed`` seeds this same generator.
    """
    random.seed(seed)
    torch.default_generator.manual_seed(seed)
    if device.startswith("cuda"):
        torch.cuda.manual_seed(seed)  # the current device, which the executor set


def _storage_size(shape: Tuple[int, ...], stride: Tuple[int, ...], offset: int) -> int:
    """Elements a storage needs to hold a ``shape``/``stride`` view starting at ``offset``."""
    if any(size == 0 for size in shape):
        return offset
    return offset + 1 + sum((size - 1) * step for size, step in zip(shape, stride))


def _contiguous_stride(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    stride, step = [], 1
    for size in reversed(shape):
        stride.append(step)
        step *= max(size, 1)
    return tuple(reversed(stride))


def _tensor(spec: Dict[str, Any], device: str) -> torch.Tensor:
    device = spec.get("device", device)
    if "stride" in spec or "storage_offset" in spec:
        # A non-contiguous (or offset) tensor, recreated as such: a filled flat storage viewed
        # with the captured strides (stride 0, overlapping and offset views included).
        shape = tuple(spec["shape"])
        stride = tuple(spec.get("stride") or _contiguous_stride(shape))
        offset = spec.get("storage_offset", 0)
        if len(stride) != len(shape):  # refused before the storage is allocated
            raise ValueError(f"stride has {len(stride)} entries but the shape {list(shape)} has "
                             f"{len(shape)} dims")
        flat = {key: value for key, value in spec.items()
                if key not in ("stride", "storage_offset", "device")}
        flat.update(shape=[_storage_size(shape, stride, offset)], requires_grad=False)
        chosen = 0
        if (flat.get(VALUE_PROFILE) or {}).get(ZERO_ROWS, 0) > 0:
            # the storage gets the other rows' element-wise profile; the view's rows are
            # zeroed after, through the storage
            chosen, flat[VALUE_PROFILE] = split_rows(flat[VALUE_PROFILE], shape)
        storage = _tensor(flat, device)
        tensor = storage.as_strided(shape, stride, offset)
        if chosen and tensor.device.type != "meta":
            zero_rows_of_view(storage, tensor, chosen)
        if spec.get("requires_grad", is_differentiable(spec["dtype"])):
            tensor = tensor.detach().requires_grad_(True)
        return tensor
    dtype = torch_dtype(spec["dtype"])
    shape = tuple(spec["shape"])
    value_range = spec.get("value_range")
    if VALUE_PROFILE in spec and not dtype.is_floating_point:  # a dtype __copy__ filled in
        raise ValueError(f"value_profile applies to floating tensors, not {spec['dtype']} "
                         "(its dtype copied from another arg by __copy__?)")
    if dtype.is_floating_point or dtype.is_complex:
        tensor = torch.rand(shape, dtype=dtype, device=device)
        if value_range:
            low, high = value_range
            tensor.mul_(high - low).add_(low)
        if VALUE_PROFILE in spec:
            tensor = with_profile(tensor, spec[VALUE_PROFILE])
    elif dtype == torch.bool:
        tensor = torch.randint(0, 2, shape, device=device).bool()
    elif "bags" in spec:  # structured values (spec.index_data): embedding bags, pool windows
        tensor = bag_values(spec["bags"], dtype, device)
        if tuple(tensor.shape) != shape:
            raise ValueError(f"bags: a {spec['bags'].get('as')} tensor has shape "
                             f"{list(tensor.shape)}, not {list(shape)}")
    elif "values" in spec:
        tensor = torch.tensor(spec["values"], dtype=dtype, device=device).reshape(shape)
    elif "pool_window" in spec:
        tensor = pool_window_values(shape, spec["pool_window"], dtype, device)
    else:
        if value_range:
            low, high = int(value_range[0]), int(value_range[1]) + 1
        elif dtype == torch.uint8:
            low, high = 0, DEFAULT_INT_HIGH
        else:
            low, high = DEFAULT_INT_LOW, DEFAULT_INT_HIGH
        tensor = draw_integers(shape, low, high, spec.get("distribution", UNIFORM), dtype, device)
    requires_grad = spec.get("requires_grad", is_differentiable(spec["dtype"]))
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _number(spec: Dict[str, Any], draw) -> Any:
    if "value" in spec:
        value = spec["value"]
        return float(value) if isinstance(value, str) else value  # "inf", "-inf", "nan"
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
    if kind == "device":  # a captured arg naming the capture's device follows the run's
        return torch.device(device if spec.get("run_device") else spec["value"])
    if kind == "dtype":
        return torch_dtype(spec["value"])
    if kind in ("layout", "memory_format"):
        names = LAYOUT_NAMES if kind == "layout" else MEMORY_FORMAT_NAMES
        if spec["value"] not in names:
            raise ValueError(f"unknown {kind} {spec['value']!r}")
        return getattr(torch, spec["value"])
    if kind == "genericlist":
        return [materialize(item, device) for item in spec["value"]]
    if kind == "tuple":
        return tuple(materialize(item, device) for item in spec["value"])
    raise ValueError(f"unknown data type {kind!r}")


class DefaultDataGenerator(DataGenerator):
    """Materializes every arg and kwarg of an expanded arg-spec-list, in order."""

    #: ``get_data(config, "meta")`` allocates nothing real (tensor specs' own ``device`` aside,
    #: which the memory guard drops first): the guard may materialize inputs on meta.
    meta_safe = True

    def get_data(self, config: Dict[str, Any], device: str) -> Tuple[List[Any], Dict[str, Any]]:
        if not config:
            return [], {}
        args = [materialize(spec, device) for spec in config.get("args") or []]
        kwargs = {k: materialize(spec, device) for k, spec in (config.get("kwargs") or {}).items()}
        return args, kwargs


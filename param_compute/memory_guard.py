"""The memory guard: refuse a config whose tensors would not fit, before allocating anything.

The estimate is the bytes of the tensors a config's data specs describe (build and input,
including tensors inside lists), from shapes and dtypes alone; Python integers make absurd shapes
(10^30 elements) harmless to estimate. The default limit is half of the memory available when the
run starts (host memory for CPU, free plus cached device memory for CUDA), leaving room for the
outputs and workspace the estimate does not see.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, Optional

from .dtypes import DTYPE_NAMES, ITEM_SIZE
from .errors import OptionsError

DEFAULT_FRACTION = 0.5
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


def parse_size(text: str) -> Optional[int]:
    """``"8GB"``, ``"512MiB"``, ``"1e9"`` -> bytes; ``"none"`` or ``"0"`` -> None (no limit)."""
    value = text.strip().lower()
    if value in ("none", "off", "0"):
        return None
    match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)", value)
    if not match or match.group(2) not in _UNITS:
        raise OptionsError(f"--max-memory: cannot read {text!r}; write e.g. 8GB, 512MiB or none")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def format_size(nbytes: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{nbytes} B"


def _tensor_bytes(spec: Dict[str, Any]) -> int:
    dtype = DTYPE_NAMES.get(spec.get("dtype"), "float32")
    shape = spec.get("shape") or []
    stride = spec.get("stride")
    if stride and len(stride) == len(shape):
        elements = 0 if any(d == 0 for d in shape) else \
            1 + sum((d - 1) * s for d, s in zip(shape, stride))
    else:
        elements = 1
        for dim in shape:
            elements *= dim
    return elements * ITEM_SIZE[dtype]


def spec_bytes(value: Any) -> int:
    """Tensor bytes described by a data spec, arg-spec-list, or config (recursively)."""
    if isinstance(value, dict):
        if value.get("type") == "tensor":
            return _tensor_bytes(value)
        return sum(spec_bytes(v) for v in value.values() if isinstance(v, (dict, list)))
    if isinstance(value, list):
        return sum(spec_bytes(v) for v in value)
    return 0


def available_bytes(device: str) -> Optional[int]:
    """Memory available to the run's tensors now, or None when it cannot be told."""
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free + torch.cuda.memory_reserved(torch.device(device)))
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def default_limit(device: str) -> Optional[int]:
    available = available_bytes(device)
    return int(available * DEFAULT_FRACTION) if available else None


class MemoryLimitExceeded(Exception):
    """A config's estimated tensors exceed ``--max-memory`` (nothing was allocated)."""

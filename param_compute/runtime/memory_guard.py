"""The memory guard: refuse a config whose tensors would not fit, before allocating anything.

The estimate is the bytes of the storage the data generator allocates for a config's tensors
(build and input, including tensors inside lists), from shapes, strides, storage offsets and dtypes
alone: a strided or offset view needs ``offset + 1 + sum((size - 1) * stride)`` elements of
storage, however few elements the view shows. Python integers make absurd shapes (10^30
elements) harmless to estimate. Data generators and operators that allocate what no tensor spec
describes say so through optional hooks: ``DataGenerator.estimate_bytes(config)`` and
``OperatorInterface.estimate_build_bytes(*args, **kwargs)`` (``nn.Module`` operators build the
module on the meta device and count its parameters and buffers), and
``OperatorInterface.estimate_output_bytes(*args, **kwargs)`` for what a factory call returns
(a call without tensor inputs, such as ``torch.ones``, allocates its whole output from a few
integers: torch functions and aten ops are called on meta arguments). The outputs of calls with
tensor inputs are not estimated (a meta call costs more than the engine spends per config): the
address-space cap is their backstop. ``--cold`` adds what it makes
(``cold_bytes``): every rotation copy of a config's inputs, and the flush buffer, which lives
as long as the run. The default limit is half of the
memory available when the run starts (host memory for CPU, free plus cached device memory for
CUDA), leaving room for the outputs and workspace the estimate does not see. An estimate can
still be wrong (a plugin allocating on its own): ``address_space_cap`` gives the isolated
worker a hard limit as a backstop.
"""

from __future__ import annotations

import math
import re
from typing import Any, Optional, Tuple

from param_compute.plan.tensor_bytes import storage_elements, tensor_spec_bytes  # noqa: F401
from param_compute.errors import OptionsError
from param_compute.formatting import format_size  # noqa: F401 (imported from here too)

DEFAULT_FRACTION = 0.5
#: The largest ``--max-memory`` taken (an exabyte): more is no memory any machine has.
MAX_SIZE = 1e18
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
    size = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(size) or size > MAX_SIZE:  # 1e400: inf, which int() cannot take
        raise OptionsError(f"--max-memory {text}: more than {MAX_SIZE:.0e} bytes (an exabyte); "
                           "write 'none' for no limit")
    return int(size)


def spec_bytes(value: Any) -> int:
    """Tensor bytes described by a data spec, arg-spec-list, or config (recursively)."""
    if isinstance(value, dict):
        if value.get("type") == "tensor":
            return tensor_spec_bytes(value)
        return sum(spec_bytes(v) for v in value.values() if isinstance(v, (dict, list)))
    if isinstance(value, list):
        return sum(spec_bytes(v) for v in value)
    return 0


def available_bytes(device: str) -> Optional[int]:
    """Memory available to the run's tensors now, or None when it cannot be told: on a CPU
    the least of the host's available memory, what ``ulimit -v`` leaves and what the cgroup's
    limit leaves (``untrusted_json.memory_available``, the one reading of them)."""
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free + torch.cuda.memory_reserved(torch.device(device)))
    from param_compute.untrusted_json import memory_available

    found = memory_available()
    return found[0] if found else None


def default_limit(device: str) -> Optional[int]:
    available = available_bytes(device)
    return int(available * DEFAULT_FRACTION) if available else None


def cold_bytes(cold: Any, input_bytes: int) -> Tuple[int, str]:
    """(bytes, words) ``--cold`` adds to a config whose inputs take ``input_bytes``: the
    copies of the inputs it rotates over beyond the config's own (``measure.cold.ColdCache``)
    and its flush buffer on the CPU; (0, "") without ``--cold``."""
    if cold is None:
        return 0, ""
    copies = cold.copies(input_bytes)
    flush = cold.flush.nbytes if cold.flush is not None else 0
    said = []
    if copies > 1:
        said.append(f"{copies} copies of its {format_size(input_bytes)} inputs "
                    f"({format_size(copies * input_bytes)})")
    if flush:
        said.append(f"{format_size(flush)} flush buffer")
    words = f"with --cold {cold.method}'s " + " and its ".join(said) if said else ""
    return (copies - 1) * input_bytes + flush, words


class MemoryLimitExceeded(Exception):
    """A config's estimated tensors exceed ``--max-memory`` (nothing was allocated)."""


def config_bytes(generator: Any, config: Any) -> int:
    """Bytes a data generator allocates for one expanded config: its ``estimate_bytes(config)``
    hook where it has one (a generator sizing tensors from plain numbers), else the tensor specs'
    storage."""
    hook = getattr(generator, "estimate_bytes", None)
    estimate = hook(config) if hook is not None else None
    return int(estimate) if estimate is not None else spec_bytes(config)


def on_meta_specs(value: Any) -> Any:
    """A config with the ``device`` of its tensor specs dropped: materialized for an estimate
    on the meta device, no tensor may land on a real one."""
    if isinstance(value, dict):
        return {key: on_meta_specs(item) for key, item in value.items()
                if not (key == "device" and value.get("type") == "tensor")}
    if isinstance(value, list):
        return [on_meta_specs(item) for item in value]
    return value


def _hook_bytes(op: Any, hook_name: str, generator: Any, config: Any) -> int:
    """``op.<hook_name>(*args, **kwargs)`` with ``config`` materialized on the meta device
    (nothing allocated); 0 for an operator without the hook or one that cannot tell (None), and
    0 where the estimate fails (the build or the call itself then reports what is wrong)."""
    hook = getattr(op, hook_name, None)
    if hook is None:
        return 0
    try:
        args, kwargs = (generator.get_data(on_meta_specs(config), "meta") if config
                        else ([], {}))
        return int(hook(*args, **kwargs) or 0)
    except Exception:  # noqa: BLE001 - a failing estimate is the run's error to report
        return 0


def build_weight_bytes(op: Any, generator: Any, build: Any) -> int:
    """Bytes an operator allocates when built (module weights sized by integer build args), from
    its ``estimate_build_bytes(*args, **kwargs)`` hook called with the build args materialized on
    the meta device."""
    return _hook_bytes(op, "estimate_build_bytes", generator, build)


def _has_tensor_spec(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get("type") == "tensor" or any(
            _has_tensor_spec(v) for v in value.values() if isinstance(v, (dict, list)))
    if isinstance(value, list):
        return any(_has_tensor_spec(v) for v in value)
    return False


def output_bytes(op: Any, generator: Any, config: Any) -> int:
    """Bytes the outputs of a factory call allocate (``torch.ones(size=[12000, 12000])`` is
    576 MB from no tensor at all), from the operator's ``estimate_output_bytes(*args,
    **kwargs)`` hook called with the input args materialized on the meta device. Only calls
    without tensor inputs are estimated, and only with a generator that is ``meta_safe``: a
    call on meta tensors costs ~0.1 ms, more than the whole engine spends on a config."""
    if not getattr(generator, "meta_safe", False) or _has_tensor_spec(config):
        return 0
    return _hook_bytes(op, "estimate_output_bytes", generator, config)


#: Address space a worker may add beyond the estimate's limit: outputs, workspace, and the
#: stacks and allocator arenas of each thread (reserved, rarely used).
_CAP_HEADROOM = 2 * 2**30
_CAP_PER_THREAD = 128 * 2**20


def _mapped_bytes() -> Optional[int]:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def address_space_cap(limit: Optional[int], device: str, threads: int) -> Optional[int]:
    """The hard cap for an isolated worker measuring on the CPU: what it maps now plus twice the
    memory limit plus headroom, so an allocation far beyond the estimate fails with a
    ``MemoryError`` in the worker instead of exhausting the host. None where no cap applies (no
    limit, a GPU device whose driver maps vast address ranges, no /proc)."""
    mapped = _mapped_bytes()
    if limit is None or not device.startswith("cpu") or mapped is None:
        return None
    return mapped + max(2 * limit, limit + _CAP_HEADROOM) + threads * _CAP_PER_THREAD


def apply_address_space_cap(cap: Optional[int]) -> bool:
    """Set ``RLIMIT_AS`` of this process to ``cap`` (never above the hard limit); whether it was."""
    if cap is None:
        return False
    try:
        import resource
    except ImportError:  # not a POSIX system
        return False
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY and cap > hard:
        cap = hard
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError):
        return False
    return True

"""Which operators of a spec have a kernel on the replay device, asked before anything runs.

``missing_kernels`` asks the dispatcher, for each ``ns::`` operator of a spec, whether the device
has a kernel (its own backend key or a composite one) and lists those that don't; a dry run
that validated without torch asks its operator-name index instead (``kernel_of``). Torch is
imported only to ask the dispatcher.
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Any, Callable, Dict, List, Optional

#: Dispatch keys whose kernel serves every device.
COMPOSITE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd",
                  "CompositeExplicitAutogradNonFunctional")
#: Device type -> its dispatch key.
DEVICE_KEYS = {"cpu": "CPU", "cuda": "CUDA", "mps": "MPS", "xpu": "XPU", "meta": "Meta",
               "hip": "HIP"}


def device_type(device: str) -> str:
    return str(device).split(":", 1)[0]


@lru_cache(maxsize=8192)
def has_kernel(qualified: str, device: str) -> bool:
    """Whether the dispatcher has a kernel for ``qualified`` (``aten::add.Tensor``) that runs on
    ``device`` (a device type or name): the device's own key or a composite one."""
    import torch

    keys = [DEVICE_KEYS.get(device_type(device), device_type(device).upper()), *COMPOSITE_KEYS]
    for key in keys:
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key):
                return True
        except RuntimeError:  # no such operator, or no such key in this build
            continue
    return False


def can_check(device: str) -> bool:
    """Whether this torch build registers kernels for ``device``'s backend (a CPU-only build
    has no CUDA kernels to look up, though the target machine will)."""
    import torch

    kind = device_type(device)
    if kind in ("cpu", "meta"):
        return True
    if kind == "cuda":
        return torch.backends.cuda.is_built()
    if kind == "mps":
        return torch.backends.mps.is_built()
    return False


def _qualified(op: str, schema: Optional[str]) -> str:
    if schema:
        return schema.split("(", 1)[0].strip()
    return op


def missing_kernels(spec: Dict[str, Any], device: str,
                    kernel_of: Optional[Callable[[str], bool]] = None) -> List[Dict[str, Any]]:
    """The operators of a spec with no kernel on ``device``: ``{op, qualified, configs,
    calls}`` each (``calls``: the configs' counts summed; configs without a count count 1).
    Only ``ns::`` operators are checked (``torch.*`` callables and plugins always run); nothing
    where this torch build cannot tell (``can_check``). ``kernel_of`` answers "has a kernel on
    ``device``" for a qualified name instead of the dispatcher (a dry run's name index)."""
    out: Dict[str, Dict[str, Any]] = {}
    if kernel_of is None:
        if not can_check(device):
            return []
        kernel_of = partial(has_kernel, device=device)
    for op, entry in spec.items():
        if "::" not in op or not isinstance(entry, dict) or op.startswith("graph::"):
            continue  # (a captured graph's nodes are aten's, compiled for the run's device)
        for config in entry.get("config") or []:
            schema = None
            try:
                first = config["build"][0]["args"][0]
                if first.get("type") == "str":
                    schema = first["value"]
            except (KeyError, IndexError, TypeError, AttributeError):
                schema = None
            qualified = _qualified(op, schema)
            if kernel_of(qualified):
                continue
            inputs = config.get("input") or [{}]
            item = out.setdefault(qualified, {"op": op, "qualified": qualified, "configs": 0,
                                              "calls": 0})
            item["configs"] += len(inputs)
            item["calls"] += sum(int(i.get("count", 1)) if isinstance(i, dict) else 1
                                 for i in inputs)
    return sorted(out.values(), key=lambda item: -item["calls"])


def describe_missing(missing: List[Dict[str, Any]], device: str) -> List[str]:
    return [f"{item['qualified']}: no kernel on {device} ({item['configs']} configs, "
            f"{item['calls']} calls)" for item in missing]

"""Portable replay: backend kernels recorded on one machine mapped to native ops, and a check of
which captured configs have a kernel on the replay device.

A trace recorded on CUDA names ``cudnn_batch_norm_backward`` (called by an autograd node, with no
composite above it to replay instead); CPU has no kernel for it. ``native_call`` rewrites the
backend ops whose native equivalent takes the same data (batch norm forward and backward) into
that op. ``missing_kernels`` asks the dispatcher, for each operator of a spec, whether the replay
device has a kernel (its own backend key or a composite one) and lists those that don't, so that
they are reported before anything runs.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Dict, List, Optional, Tuple

#: Dispatch keys whose kernel serves every device.
COMPOSITE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd",
                  "CompositeExplicitAutogradNonFunctional")
#: Device type -> its dispatch key.
DEVICE_KEYS = {"cpu": "CPU", "cuda": "CUDA", "mps": "MPS", "xpu": "XPU", "meta": "Meta",
               "hip": "HIP"}

_NATIVE_BATCH_NORM = ("aten::native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, "
                      "Tensor? running_mean, Tensor? running_var, bool training, float momentum,"
                      " float eps) -> (Tensor, Tensor, Tensor)")
_NATIVE_BATCH_NORM_BACKWARD = (
    "aten::native_batch_norm_backward(Tensor grad_out, Tensor input, Tensor? weight, "
    "Tensor? running_mean, Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, "
    "bool train, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)")
_TRUE = {"type": "bool", "value": True}


def _batch_norm(args: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    # (input, weight, bias, running_mean, running_var, training, factor, epsilon): same order
    return list(args[:8])


def _batch_norm_backward(args: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    # (input, grad_output, weight, running_mean, running_var, save_mean, save_var [inverse
    # std, as cuDNN and MIOpen keep it], epsilon[, reserveSpace])
    input_, grad_output, weight, mean, var, save_mean, save_var, epsilon = args[:8]
    return [grad_output, input_, weight, mean, var, save_mean, save_var, _TRUE, epsilon,
            {"type": "genericlist", "value": [_TRUE, _TRUE, _TRUE]}]


#: backend op -> (the native schema, the argument rewrite).
NATIVE_EQUIVALENTS = {
    "cudnn_batch_norm": (_NATIVE_BATCH_NORM, _batch_norm),
    "miopen_batch_norm": (_NATIVE_BATCH_NORM, _batch_norm),
    "cudnn_batch_norm_backward": (_NATIVE_BATCH_NORM_BACKWARD, _batch_norm_backward),
    "miopen_batch_norm_backward": (_NATIVE_BATCH_NORM_BACKWARD, _batch_norm_backward),
}


def native_call(base: str, args: List[Dict[str, Any]], kwargs: Dict[str, Any]
                ) -> Optional[Tuple[str, List[Dict[str, Any]], Dict[str, Any]]]:
    """(native schema, args, kwargs) for a backend op with a native equivalent, else None."""
    entry = NATIVE_EQUIVALENTS.get(base)
    if entry is None or kwargs or len(args) < 8:
        return None
    schema, rewrite = entry
    return schema, rewrite(args), {}


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


def missing_kernels(spec: Dict[str, Any], device: str) -> List[Dict[str, Any]]:
    """The operators of a spec with no kernel on ``device``: ``{op, qualified, configs,
    calls}`` each (``calls``: the configs' counts summed; configs without a count count 1).
    Only ``ns::`` operators are checked (``torch.*`` callables and plugins always run); nothing
    where this torch build cannot tell (``can_check``)."""
    out: Dict[str, Dict[str, Any]] = {}
    if not can_check(device):
        return []
    for op, entry in spec.items():
        if "::" not in op or not isinstance(entry, dict):
            continue
        for config in entry.get("config") or []:
            schema = None
            try:
                first = config["build"][0]["args"][0]
                if first.get("type") == "str":
                    schema = first["value"]
            except (KeyError, IndexError, TypeError, AttributeError):
                schema = None
            qualified = _qualified(op, schema)
            if has_kernel(qualified, device):
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


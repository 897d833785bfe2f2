"""Portable replay: backend kernels recorded on one machine mapped to native ops, and a check of
which captured configs have a kernel on the replay device.

A trace recorded on CUDA names ``cudnn_batch_norm_backward`` (called by an autograd node, with no
composite above it to replay instead); CPU has no kernel for it. ``native_call`` rewrites the
backend ops whose native equivalent takes the same data (batch norm forward and backward) into
that op. ``missing_kernels`` (``operators.kernels``) asks the dispatcher, for each operator of a
spec, whether the replay device has a kernel and lists those that don't, so that they are
reported before anything runs.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

# The kernel check lives with the operators (a dry run uses it without importing capture).
from param_compute.operators.kernels import (can_check, describe_missing, device_type,  # noqa: F401
                                             has_kernel, missing_kernels)

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

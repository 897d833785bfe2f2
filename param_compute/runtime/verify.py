"""``--verify``: does what was timed (compiled, graph-replayed) compute what eager does?

The timed callable runs once more, untimed, on the run's inputs; then, on the same input
values (restored in place, for in-place operators), either the eager call (``eager``) or an
eager call on float64 copies of the inputs (``fp64``, the numerics of low-precision dtypes).
Outputs are compared, and with ``-b`` the gradients of the inputs as well (from a backward of
``ones_like`` the first differentiable output). The verdict: ``mean_rel_error`` (sum of
absolute differences over sum of absolute reference values, all tensors together) against a
tolerance for the least precise floating dtype compared; integer and boolean outputs must be
equal; differing structure, shapes or NaN positions fail. Both calls draw the same random
numbers: the CPU generator and the initialized CUDA generators are put back, before the
reference call, to their state before the timed one (``dropout`` verifies in eager mode).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

#: Largest mean relative error that passes, by the least precise floating dtype compared.
TOLERANCE = {torch.float64: 1e-7, torch.float32: 1e-4, torch.complex64: 1e-4,
             torch.complex128: 1e-7, torch.float16: 5e-3, torch.bfloat16: 2e-2}
DEFAULT_TOLERANCE = 2e-2  # other floating dtypes (float8 ...)


def tensors_in(value: Any) -> List[torch.Tensor]:
    """Every tensor in an output or argument tree, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    return []


def tolerance_for(tensors: List[torch.Tensor]) -> float:
    floating = [t.dtype for t in tensors if t.is_floating_point() or t.is_complex()]
    if not floating:
        return 0.0
    return max(TOLERANCE.get(dtype, DEFAULT_TOLERANCE) for dtype in floating)


def compare(actual: List[torch.Tensor], reference: List[torch.Tensor]) -> Dict[str, Any]:
    """``{status, mean_rel_error, max_abs_error}`` of ``actual`` against ``reference``."""
    if len(actual) != len(reference):
        return _fail(f"{len(actual)} tensors where the reference has {len(reference)}")
    diff_sum = ref_sum = 0.0
    max_abs = 0.0
    for got, want in zip(actual, reference):
        if got.shape != want.shape:
            return _fail(f"shape {list(got.shape)} where the reference has {list(want.shape)}")
        wide = torch.complex128 if got.is_complex() or want.is_complex() else torch.float64
        got64, want64 = got.detach().to("cpu", wide), want.detach().to("cpu", wide)
        both_nan = torch.isnan(got64) & torch.isnan(want64)
        diff = torch.where(both_nan, torch.zeros_like(got64), got64 - want64).abs()
        if bool(torch.isnan(diff).any()):
            return _fail("NaN where the reference has a number (or the other way round)")
        diff_sum += float(diff.sum())
        ref_sum += float(torch.where(both_nan, torch.zeros_like(want64), want64).abs().sum())
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
    mean_rel = diff_sum / ref_sum if ref_sum > 0 else diff_sum
    status = "PASS" if mean_rel <= tolerance_for(actual) else "FAIL"
    return {"status": status, "mean_rel_error": mean_rel, "max_abs_error": max_abs}


def _fail(reason: str) -> Dict[str, Any]:
    return {"status": "FAIL", "mean_rel_error": None, "max_abs_error": None, "reason": reason}


def _clone(value: Any) -> List[torch.Tensor]:
    return [t.detach().clone() for t in tensors_in(value)]


def _as_float64(value: Any) -> Any:
    """The argument tree with floating tensors as float64 leaf copies (requires_grad kept)."""
    if isinstance(value, torch.Tensor):
        if not value.is_floating_point():
            return value
        return value.detach().to(torch.float64).requires_grad_(value.requires_grad)
    if isinstance(value, dict):
        return {k: _as_float64(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_as_float64(v) for v in value)
    return value


def _call(fn: Callable[[], Any], inputs: List[torch.Tensor], backward: bool,
          output: Optional[Callable[[], Any]] = None) -> Tuple[List[torch.Tensor], List]:
    """Outputs (cloned) and, with ``backward``, the gradients of ``inputs`` of one call."""
    for tensor in inputs:
        tensor.grad = None
    result = fn()
    if output is not None:  # a replayed graph returns nothing: its outputs live in the capture
        result = output()
    outputs = _clone(result)
    grads: List[torch.Tensor] = []
    if backward:
        first = next((t for t in tensors_in(result) if t.requires_grad), None)
        if first is None:
            raise RuntimeError("--verify -b: the output has no tensor that requires grad")
        first.backward(torch.ones_like(first))
        grads = [t.grad.detach().clone() for t in inputs if t.grad is not None]
    return outputs, grads


def rng_rewind(cuda: Any = None) -> Callable[[], None]:
    """Record the state of torch's random generators now; the function returned puts it back.
    The CPU generator always, and every CUDA device's generator when CUDA is initialized
    (``cuda``: the ``torch.cuda`` module, a seam for tests)."""
    cuda = torch.cuda if cuda is None else cuda
    cpu_state = torch.default_generator.get_state()
    cuda_states = (cuda.get_rng_state_all()
                   if cuda.is_available() and cuda.is_initialized() else None)

    def rewind() -> None:
        torch.default_generator.set_state(cpu_state)
        if cuda_states is not None:
            cuda.set_rng_state_all(cuda_states)

    return rewind


def verify(timed: Callable[[], Any], eager: Callable[[Any, Any], Callable[[], Any]], args: Any,
           kwargs: Any, mode: str, backward: bool,
           timed_output: Optional[Callable[[], Any]] = None) -> Dict[str, Any]:
    """Run ``timed`` and the reference on the same input values; the verdict.

    ``eager(args, kwargs)`` binds an eager call (``op.bind_forward``); ``timed_output`` reads
    the outputs of a replayed CUDA graph.
    """
    inputs = [t for t in tensors_in((args, kwargs)) if t.requires_grad or not backward]
    every_input = tensors_in((args, kwargs))
    saved = _clone(every_input)
    rewind = rng_rewind()
    got, got_grads = _call(timed, [t for t in inputs if t.requires_grad], backward, timed_output)
    with torch.no_grad():  # in-place operators changed their inputs: restore them
        for tensor, value in zip(every_input, saved):
            tensor.copy_(value)
    rewind()  # the reference draws the random numbers the timed call drew
    if mode == "fp64":
        args, kwargs = _as_float64(args), _as_float64(kwargs)
    ref_inputs = [t for t in tensors_in((args, kwargs)) if t.requires_grad]
    want, want_grads = _call(eager(args, kwargs), ref_inputs, backward)
    verdict = compare(got + got_grads, want + want_grads)
    if backward:
        verdict["gradients"] = len(got_grads)
    return verdict

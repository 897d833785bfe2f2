"""The operators a trace may make capture run: an explicit allow-list of pure tensor ops.

A trace is data from another machine: nothing in it may choose code to run. Capture runs
operators in one place only, the layout replay of ``strides`` (on meta tensors: no data, no
compute), and an operator named by a trace runs there only when

- it is ``aten::NAME`` with NAME in ``META_REPLAY_OPS`` below (views, layout and copy ops,
  elementwise math and their in-place ``NAME_`` forms, reductions, matrix products,
  convolutions, normalizations...: ops that compute tensors from tensors and touch nothing
  else), or an operator of a namespace the user allowed on the command line
  (``--allow-namespace NS``: its library is trusted) with a Meta or composite kernel;
- the dispatcher's registry has that exact name and overload (``torch._C`` is asked for the
  schemas of the qualified name, a lookup by string that runs nothing); only then is the
  ``OpOverload`` fetched from ``torch.ops`` (the base name is this module's own constant for
  aten).

File, library, process, printing and random ops (``from_file``, ``load_library``,
``import_module``, ``save``, ``_print``, ``normal``...), dunder and attribute-like names, and
every namespace not allowed never resolve. Every ``Device`` argument of the operator's own
schema is forced to ``meta`` (a factory given no device would allocate on the CPU), so whatever
the trace records, nothing is allocated or written.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, FrozenSet, Optional, Sequence, Tuple

#: Views and alias bookkeeping: give their outputs the layouts being recovered.
_VIEWS = """
    alias as_strided as_strided_ chunk detach detach_ diagonal expand expand_as flatten
    indices lift lift_fresh movedim moveaxis narrow numpy_T permute reshape reshape_as
    select slice split split_with_sizes squeeze squeeze_ swapaxes swapdims t t_ tensor_split
    transpose transpose_ unbind unflatten unfold unsqueeze unsqueeze_ values view view_as
    view_as_complex view_as_real _conj _neg_view _reshape_alias _unsafe_view resolve_conj
    resolve_neg real imag conj mT mH adjoint matrix_H hsplit vsplit dsplit
    diagonal_scatter select_scatter slice_scatter as_strided_scatter
"""
#: Layout, dtype and copy ops, and factories (their device is always forced to meta).
_LAYOUT = """
    clone contiguous copy copy_ to _to_copy type_as empty_like zeros_like ones_like full_like
    empty empty_strided new_empty new_empty_strided new_zeros new_ones
    new_full zeros ones full fill fill_ zero_ _copy_from _copy_from_and_resize resize_
    resize_as_ _unsafe_index _to_dense to_dense
"""
#: Elementwise math (their in-place ``NAME_`` forms are allowed too).
_ELEMENTWISE = """
    abs acos acosh add addcdiv addcmul angle asin asinh atan atan2 atanh bitwise_and
    bitwise_not bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift ceil clamp
    clamp_max clamp_min clip copysign cos cosh deg2rad digamma div divide elu eq erf erfc
    erfinv exp exp2 expm1 floor floor_divide fmax fmin fmod frac ge gelu glu gt hardsigmoid
    hardswish hardtanh heaviside hypot i0 isfinite isinf isnan isneginf isposinf le leaky_relu
    lerp lgamma log log10 log1p log2 logaddexp logaddexp2 logical_and logical_not logical_or
    logical_xor logit lt masked_fill maximum minimum mish mul multiply nan_to_num ne neg
    negative nextafter pow rad2deg reciprocal relu relu6 remainder round rsqrt rsub selu
    sgn sigmoid sign signbit silu sin sinc sinh softplus softshrink sqrt square sub subtract
    tan tanh threshold true_divide trunc where xlogy celu hardshrink mvlgamma polygamma
    prelu _prelu_kernel special_erfcx
"""
#: Reductions, normalizations, matrix products, convolutions, indexing, shape arithmetic and
#: their backward ops.
_OTHERS = """
    addbmm addmm addmv addr baddbmm bmm dot matmul mm mv outer linear _addmm_activation
    bilinear einsum tensordot kron vdot inner
    all amax amin any argmax argmin count_nonzero cumprod cumsum logcumsumexp logsumexp max
    mean median min nanmean nansum norm prod std std_mean sum var var_mean aminmax
    _log_softmax _softmax log_softmax softmax _log_softmax_backward_data
    _softmax_backward_data
    batch_norm native_batch_norm native_batch_norm_backward _native_batch_norm_legit
    _native_batch_norm_legit_no_training _native_batch_norm_legit_functional
    layer_norm native_layer_norm native_layer_norm_backward group_norm native_group_norm
    native_group_norm_backward instance_norm rms_norm _fused_rms_norm
    conv1d conv2d conv3d convolution _convolution convolution_backward conv_transpose1d
    conv_transpose2d conv_transpose3d
    avg_pool1d avg_pool2d avg_pool3d avg_pool2d_backward max_pool1d max_pool2d max_pool3d
    max_pool2d_with_indices max_pool2d_with_indices_backward adaptive_avg_pool1d
    adaptive_avg_pool2d adaptive_avg_pool3d _adaptive_avg_pool2d
    _adaptive_avg_pool2d_backward adaptive_max_pool2d upsample_nearest2d
    upsample_bilinear2d pixel_shuffle pixel_unshuffle pad constant_pad_nd
    reflection_pad2d replication_pad2d col2im im2col
    cat concat concatenate stack hstack vstack dstack flip roll rot90 repeat tile tril triu
    gather scatter scatter_add scatter_reduce index_select index index_put index_put_
    index_add index_copy index_fill masked_scatter take_along_dim embedding
    embedding_backward embedding_dense_backward _embedding_bag _embedding_bag_forward_only
    embedding_bag sort topk kthvalue bucketize searchsorted
    gelu_backward threshold_backward sigmoid_backward tanh_backward
    silu_backward hardswish_backward hardsigmoid_backward leaky_relu_backward elu_backward
    softplus_backward mse_loss mse_loss_backward nll_loss nll_loss_forward nll_loss_backward
    nll_loss2d_forward nll_loss2d_backward cross_entropy_loss binary_cross_entropy
    binary_cross_entropy_with_logits smooth_l1_loss l1_loss huber_loss kl_div
    scaled_dot_product_attention _scaled_dot_product_flash_attention_for_cpu
    _scaled_dot_product_efficient_attention _scaled_dot_product_flash_attention
    _scaled_dot_product_cudnn_attention _fused_sdp_choice
    _efficient_attention_forward _flash_attention_forward
    linalg_vector_norm linalg_matrix_norm frobenius_norm cdist _cdist_forward
    cosine_similarity pairwise_distance dist renorm
    masked_fill_ one_hot diff cross cummax cummin clamp_ sum_to_size
    _foreach_add _foreach_mul _foreach_div _foreach_sub _foreach_addcmul _foreach_addcdiv
    _foreach_sqrt _foreach_lerp _foreach_neg _foreach_zero _foreach_copy _foreach_norm
    _foreach_maximum _foreach_minimum _foreach_pow _foreach_sign _foreach_abs _foreach_exp
"""


def _names(text: str) -> FrozenSet[str]:
    return frozenset(text.split())


VIEW_OPS = _names(_VIEWS)
LAYOUT_OPS = _names(_LAYOUT)
ELEMENTWISE_OPS = _names(_ELEMENTWISE)
#: Every aten base name the layout replay may run.
META_REPLAY_OPS: FrozenSet[str] = frozenset(
    VIEW_OPS | LAYOUT_OPS | ELEMENTWISE_OPS | _names(_OTHERS))
#: In-place forms of the elementwise ops (``add_``), where the dispatcher has one.
INPLACE_ELEMENTWISE_OPS = frozenset(f"{name}_" for name in ELEMENTWISE_OPS)

#: A namespace, base or overload name as the dispatcher spells them; a leading double
#: underscore (``__call__``, ``__class__``) never names an operator.
_NAMESPACE = re.compile(r"[a-z_][a-z0-9_]*\Z")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _plain(name: str, pattern: "re.Pattern[str]") -> bool:
    return isinstance(name, str) and bool(pattern.match(name)) and not name.startswith("__")


@lru_cache(maxsize=4096)
def registered_overloads(namespace: str, base: str) -> Optional[FrozenSet[str]]:
    """The overload names (``default`` for the unnamed one) the dispatcher's registry has for
    ``namespace::base``, or None where it has none: a lookup by string, nothing runs."""
    if not (_plain(namespace, _NAMESPACE) and _plain(base, _IDENTIFIER)):
        return None
    import torch

    try:
        schemas = torch._C._jit_get_schemas_for_operator(f"{namespace}::{base}")
    except RuntimeError:
        return None
    names = frozenset(s.overload_name or "default" for s in schemas)
    return names or None


def refusal(namespace: str, base: str, overload: str,
            allowed_namespaces: Sequence[str] = ()) -> Optional[str]:
    """Why the layout replay will not run ``namespace::base.overload``, or None when it may."""
    label = f"{namespace}::{base}" + ("" if overload == "default" else f".{overload}")
    if namespace == "aten":
        if base not in META_REPLAY_OPS and base not in INPLACE_ELEMENTWISE_OPS:
            return f"{label} is not on the layout replay's list of pure tensor ops"
    elif namespace not in allowed_namespaces:
        return f"{label}: namespace {namespace!r} is not allowed (--allow-namespace)"
    overloads = registered_overloads(namespace, base)
    if overloads is None:
        return f"{label} is not a registered operator here"
    if not _plain(overload, _IDENTIFIER) or overload not in overloads:
        return f"{label}: no overload {overload!r} is registered"
    if namespace != "aten" and not _has_meta_kernel(namespace, base, overload):
        return f"{label} has no Meta or composite kernel"
    return None


def _has_meta_kernel(namespace: str, base: str, overload: str) -> bool:
    import torch

    qualified = f"{namespace}::{base}" + ("" if overload == "default" else f".{overload}")
    try:
        return any(torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)
                   for key in ("Meta", "CompositeImplicitAutograd",
                               "CompositeExplicitAutograd"))
    except RuntimeError:
        return False


@lru_cache(maxsize=4096)
def _resolve(namespace: str, base: str, overload: str) -> Any:
    import torch

    owner = torch.ops.aten if namespace == "aten" else getattr(torch.ops, namespace)
    packet = getattr(owner, base, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return None
    operator = getattr(packet, overload, None)
    return operator if isinstance(operator, torch._ops.OpOverload) else None


def meta_operator(namespace: str, base: str, overload: str,
                  allowed_namespaces: Sequence[str] = ()) -> Tuple[Any, Optional[str]]:
    """(the ``OpOverload`` to run, None) or (None, why not): see the module's doc."""
    why = refusal(namespace, base, overload, allowed_namespaces)
    if why is not None:
        return None, why
    operator = _resolve(namespace, base, overload)
    if operator is None:
        return None, f"{namespace}::{base}.{overload} did not resolve to an operator"
    return operator, None


@lru_cache(maxsize=4096)
def device_arguments(operator: Any) -> Tuple[Tuple[int, str, bool], ...]:
    """(position, name, keyword-only) of each ``Device`` argument of ``operator``'s own schema."""
    out = []
    for index, argument in enumerate(operator._schema.arguments):
        if "Device" in str(argument.type):
            out.append((index, argument.name, argument.kwarg_only))
    return tuple(out)


def on_meta(operator: Any, args: list, kwargs: dict) -> None:
    """Force every ``Device`` argument of ``operator`` to meta (in place), given or not."""
    import torch

    meta = torch.device("meta")
    for index, name, kwarg_only in device_arguments(operator):
        if not kwarg_only and index < len(args):
            args[index] = meta
        elif kwarg_only or index >= len(args):
            kwargs[name] = meta

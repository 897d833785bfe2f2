"""Integer tensors that index: the value range a replay must draw from, or why it cannot.

An execution trace records the shapes of an op's tensors but not their values. An index tensor
filled with the generator's default integers (-10..9) would read out of bounds, so for the ops
that index, the range comes from the indexed tensor's shape (``embedding``: ``[0, rows - 1]``;
``gather``: ``[0, self.shape[dim] - 1]``; ``nll_loss`` targets: ``[0, classes - 1]``; max-pool
indices: ``[0, H * W - 1]``...). A live capture knows the values and records their actual min and
max, which these rules never overwrite.

Some ops cannot be replayed from shapes and ranges alone (sorted offsets, lengths that must add
up): ``index_rules`` says why, and the capture records the op as skipped with that reason.
"""

from __future__ import annotations

from math import prod
from typing import Any, Callable, Dict, List, Optional

from param_compute.capture.values import INTEGER_SPEC_DTYPES as INTEGER_DTYPES

Named = Dict[str, Any]  # argument name -> data spec


def is_integer_tensor(spec: Any) -> bool:
    return (isinstance(spec, dict) and spec.get("type") == "tensor"
            and spec.get("dtype") in INTEGER_DTYPES)


def _shape(spec: Any) -> Optional[List[int]]:
    if isinstance(spec, dict) and spec.get("type") == "tensor":
        return list(spec["shape"])
    return None


def _value(spec: Any) -> Any:
    return spec.get("value") if isinstance(spec, dict) else None


def _set_range(spec: Any, high: Optional[int], low: int = 0) -> None:
    """Give an integer tensor ``[low, high]`` unless it already has a (captured) range."""
    if is_integer_tensor(spec) and "value_range" not in spec and high is not None:
        spec["value_range"] = [low, max(low, high)]


def _dim_size(shape: Optional[List[int]], dim: Any) -> Optional[int]:
    if shape is None or not isinstance(dim, int):
        return None
    if not shape:  # a 0-d tensor indexes like a 1-element vector
        return 1
    if -len(shape) <= dim < len(shape):
        return shape[dim]
    return None


def _along_dim(self_name: str, dim_name: str, index_name: str) -> Callable[[Named], None]:
    def rule(named: Named) -> None:
        size = _dim_size(_shape(named.get(self_name)), _value(named.get(dim_name)))
        _set_range(named.get(index_name), None if size is None else size - 1)
    return rule


def _rows(table_name: str, index_name: str) -> Callable[[Named], None]:
    def rule(named: Named) -> None:
        shape = _shape(named.get(table_name))
        _set_range(named.get(index_name), shape[0] - 1 if shape else None)
    return rule


def _count(count_name: str, index_name: str) -> Callable[[Named], None]:
    def rule(named: Named) -> None:
        count = _value(named.get(count_name))
        _set_range(named.get(index_name), count - 1 if isinstance(count, int) else None)
    return rule


def _classes(input_name: str, target_name: str) -> Callable[[Named], None]:
    def rule(named: Named) -> None:
        shape = _shape(named.get(input_name))
        if shape:
            classes = shape[1] if len(shape) >= 2 else shape[0]
            _set_range(named.get(target_name), classes - 1)
    return rule


def _spatial(input_name: str, index_name: str, dims: int) -> Callable[[Named], None]:
    def rule(named: Named) -> None:
        shape = _shape(named.get(input_name))
        if shape and len(shape) >= dims:
            _set_range(named.get(index_name), prod(shape[-dims:]) - 1)
    return rule


def _numel(input_name: str, index_name: str) -> Callable[[Named], None]:
    def rule(named: Named) -> None:
        shape = _shape(named.get(input_name))
        if shape is not None:
            _set_range(named.get(index_name), prod(shape) - 1)
    return rule


def _unpool(index_name: str) -> Callable[[Named], None]:
    def rule(named: Named) -> None:
        size = named.get("output_size")
        values = [_value(item) for item in (_value(size) or [])]
        if values and all(isinstance(v, int) for v in values):
            _set_range(named.get(index_name), prod(values) - 1)
    return rule


def _one_hot(named: Named) -> None:
    classes = _value(named.get("num_classes"))
    _set_range(named.get("self"), classes - 1 if isinstance(classes, int) and classes > 0 else 9)


def _non_negative(name: str, high: int = 9) -> Callable[[Named], None]:
    def rule(named: Named) -> None:
        _set_range(named.get(name), high)
    return rule


def _advanced_indices(named: Named, self_name: str = "self") -> Optional[str]:
    """``Tensor?[] indices`` of ``aten::index``/``index_put``: each integer index addresses the
    dim it stands for; a boolean mask covers as many dims as it has."""
    shape = _shape(named.get(self_name))
    indices = _value(named.get("indices"))
    if shape is None or not isinstance(indices, list):
        return None
    position = 0
    for item in indices:
        if not isinstance(item, dict) or item.get("type") != "tensor":
            position += 1  # None: a full slice of one dim
            continue
        if item.get("dtype") == "bool":
            position += max(len(item["shape"]), 1)
            continue
        if position < len(shape):
            _set_range(item, shape[position] - 1)
        position += 1
    return None


def _index_put(named: Named) -> Optional[str]:
    indices = _value(named.get("indices"))
    if isinstance(indices, list) and any(isinstance(i, dict) and i.get("dtype") == "bool"
                                         for i in indices):
        return ("a boolean-mask index_put needs as many values as the mask has True elements, "
                "which depends on the data")
    return _advanced_indices(named)


def _refuse(reason: str) -> Callable[[Named], str]:
    return lambda named: reason


_SORTED_OFFSETS = ("its offsets must be sorted and start at 0 (values, not shapes, decide "
                   "validity)")
_LENGTHS = "its lengths must add up to the sizes of other inputs (values decide validity)"

#: base op name -> rule(named args); a rule returning a string refuses the op with that reason.
RULES: Dict[str, Callable[[Named], Optional[str]]] = {
    "embedding": _rows("weight", "indices"),
    "embedding_renorm_": _rows("self", "indices"),
    "embedding_dense_backward": _count("num_weights", "indices"),
    "embedding_backward": _count("num_weights", "indices"),
    "embedding_sparse_backward": _count("num_weights", "indices"),
    "index_select": _along_dim("self", "dim", "index"),
    "gather": _along_dim("self", "dim", "index"),
    "take_along_dim": _along_dim("self", "dim", "indices"),
    "take": _numel("self", "index"),
    "put": _numel("self", "index"),
    "put_": _numel("self", "index"),
    "nll_loss": _classes("self", "target"),
    "nll_loss_forward": _classes("self", "target"),
    "nll_loss_nd": _classes("self", "target"),
    "nll_loss2d": _classes("self", "target"),
    "nll_loss2d_forward": _classes("self", "target"),
    "nll_loss_backward": _classes("self", "target"),
    "nll_loss2d_backward": _classes("self", "target"),
    "cross_entropy_loss": _classes("self", "target"),
    "multi_margin_loss": _classes("self", "target"),
    "multi_margin_loss_backward": _classes("self", "target"),
    "max_pool2d_with_indices_backward": _spatial("self", "indices", 2),
    "max_pool3d_with_indices_backward": _spatial("self", "indices", 3),
    "adaptive_max_pool2d_backward": _spatial("self", "indices", 2),
    "adaptive_max_pool3d_backward": _spatial("self", "indices", 3),
    "fractional_max_pool2d_backward": _spatial("self", "indices", 2),
    "fractional_max_pool3d_backward": _spatial("self", "indices", 3),
    "max_unpool2d": _unpool("indices"),
    "max_unpool3d": _unpool("indices"),
    "one_hot": _one_hot,
    "bincount": _non_negative("self"),
    "repeat_interleave": _non_negative("repeats", 3),
    "index": _advanced_indices,
    "_unsafe_index": _advanced_indices,
    "index_put": _index_put,
    "index_put_": _index_put,
    "_index_put_impl_": _index_put,
    "_unsafe_index_put": _index_put,
    "embedding_bag": _refuse(f"embedding_bag: {_SORTED_OFFSETS}"),
    "_embedding_bag": _refuse(f"_embedding_bag: {_SORTED_OFFSETS}"),
    "_embedding_bag_forward_only": _refuse(f"_embedding_bag_forward_only: {_SORTED_OFFSETS}"),
    "_embedding_bag_backward": _refuse(f"_embedding_bag_backward: {_SORTED_OFFSETS}"),
    "_embedding_bag_dense_backward": _refuse(
        f"_embedding_bag_dense_backward: {_SORTED_OFFSETS}"),
    "_embedding_bag_per_sample_weights_backward": _refuse(
        f"_embedding_bag_per_sample_weights_backward: {_SORTED_OFFSETS}"),
    "ctc_loss": _refuse(f"ctc_loss: {_LENGTHS}"),
    "_ctc_loss": _refuse(f"_ctc_loss: {_LENGTHS}"),
    "_ctc_loss_backward": _refuse(f"_ctc_loss_backward: {_LENGTHS}"),
    "segment_reduce": _refuse(f"segment_reduce: {_LENGTHS}"),
    "_segment_reduce_backward": _refuse(f"_segment_reduce_backward: {_LENGTHS}"),
    "_nested_tensor_from_mask": _refuse("nested tensors are not replayable from shapes"),
}

#: Ops indexing along ``dim`` into ``self`` with ``index`` (scatter, index_add, ... families,
#: in-place and out= variants included).
_ALONG_DIM_PREFIXES = ("scatter", "index_add", "index_copy", "index_fill", "index_reduce")


def index_rules(base: str, named: Named) -> Optional[str]:
    """Fill in the value ranges of ``base``'s index arguments (in place); a reason when the op
    cannot be replayed from shapes at all."""
    rule = RULES.get(base)
    if rule is None and base.lstrip("_").startswith(_ALONG_DIM_PREFIXES):
        rule = _along_dim("self", "dim", "index")
    return rule(named) if rule is not None else None

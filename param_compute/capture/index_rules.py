"""Integer tensors that index: the values a replay must make for them, or why it cannot.

An execution trace records the shapes of an op's tensors but not their values. An index tensor
filled with the generator's default integers (-10..9) would read out of bounds, so for the ops
that index, the range comes from the indexed tensor's shape (``embedding``: ``[0, rows - 1]``;
``gather``: ``[0, self.shape[dim] - 1]``; ``nll_loss`` targets: ``[0, classes - 1]``...). A live
capture knows the values and records their actual min and max (a trace recorded with integral
tensor ranges too), which these rules never overwrite.

Where validity takes more than a range, the rule gives the tensor a structure
(``spec.index_data``): ``embedding_bag``'s offsets, offset2bag and bag sizes become ``bags``
views of the recorded number of indices in the recorded number of bags (the mean pooling factor
kept), and max-pool indices a ``pool_window`` from the op's kernel, stride, padding and
dilation. Such a structure replaces any recorded range: sorted offsets are not a range.

Some ops still cannot be replayed from shapes alone (lengths that must add up): ``index_rules``
says why, and the capture records the op as skipped with that reason.
"""

from __future__ import annotations

from math import prod
from typing import Any, Callable, Dict, List, Optional

from param_compute.capture.tbe_rules import TBE_PREFIXES, tbe_rule
from param_compute.capture.values import INTEGER_SPEC_DTYPES as INTEGER_DTYPES
from param_compute.spec.index_data import STRUCTURE_KEYS, pool_window_problems

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
    if is_integer_tensor(spec) and "value_range" not in spec and high is not None \
            and not any(key in spec for key in STRUCTURE_KEYS):
        spec["value_range"] = [low, max(low, high)]


def _set_structure(spec: Any, key: str, value: Dict[str, Any]) -> None:
    """Give an integer tensor a structure that decides its values (dropping a recorded range
    and layout: the values are made, contiguous)."""
    if is_integer_tensor(spec):
        for other in ("value_range", "distribution", "stride", "storage_offset"):
            spec.pop(other, None)
        spec[key] = value


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


def _ints(spec: Any) -> Optional[List[int]]:
    """The integers of an ``int[]`` argument (a list of int specs), or None."""
    values = [_value(item) for item in (_value(spec) or [])] if isinstance(_value(spec), list) \
        else None
    if values is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return values


def _per_dim(values: Optional[List[int]], dims: int, default: Optional[List[int]]):
    if not values:
        values = default
    if values is not None and len(values) == 1:
        values = values * dims
    return values if values is not None and len(values) == dims else None


def _pool_window(dims: int) -> Callable[[Named], None]:
    """Max-pool indices inside each output's window (from kernel, stride, padding, dilation);
    where the arguments don't describe valid windows, the input's plane as a range."""
    plane = _spatial("self", "indices", dims)

    def rule(named: Named) -> None:
        shape, index_shape = _shape(named.get("self")), _shape(named.get("indices"))
        kernel = _per_dim(_ints(named.get("kernel_size")), dims, None)
        window = {"input": shape[-dims:] if shape and len(shape) >= dims else None,
                  "kernel": kernel,
                  "stride": _per_dim(_ints(named.get("stride")), dims, kernel),
                  "padding": _per_dim(_ints(named.get("padding")), dims, [0]),
                  "dilation": _per_dim(_ints(named.get("dilation")), dims, [1])}
        if index_shape is None or pool_window_problems(window, index_shape):
            plane(named)
        else:
            _set_structure(named.get("indices"), "pool_window", window)
    return rule


def _adaptive_window(dims: int) -> Callable[[Named], None]:
    """Adaptive max-pool indices inside each output's adaptive window."""
    plane = _spatial("self", "indices", dims)

    def rule(named: Named) -> None:
        shape, index_shape = _shape(named.get("self")), _shape(named.get("indices"))
        window = {"input": shape[-dims:] if shape and len(shape) >= dims else None,
                  "adaptive": True}
        if index_shape is None or pool_window_problems(window, index_shape):
            plane(named)
        else:
            _set_structure(named.get("indices"), "pool_window", window)
    return rule


def _bags(spec: Any, indices: int, bags: int, form: str) -> None:
    _set_structure(spec, "bags", {"indices": indices, "bags": bags, "as": form})


def _offsets(spec: Any, indices: int, bags: Optional[int], include_last: Any) -> Optional[str]:
    """Offsets of ``indices`` indices: ``bags`` bags, or (None) as many as the shape says."""
    shape = _shape(spec)
    if shape is None or not is_integer_tensor(spec):
        return None
    if len(shape) != 1:
        return f"offsets of shape {shape} (1-d expected)"
    with_end = include_last is True or (bags is not None and shape[0] == bags + 1)
    count = shape[0] - 1 if with_end else shape[0]
    if count < 0 or (count == 0 and indices > 0):
        return f"{indices} indices in {shape[0]} offsets: no bag to hold them"
    _bags(spec, indices, count, "offsets_with_end" if with_end else "offsets")
    return None


def _embedding_bag(named: Named) -> Optional[str]:
    """``embedding_bag`` forward: indices in the table's rows, offsets a ``bags`` view with the
    recorded number of indices per bag (on average)."""
    table = _shape(named.get("weight"))
    indices = named.get("indices")
    _set_range(indices, table[0] - 1 if table else None)
    index_shape = _shape(indices)
    if index_shape is None or len(index_shape) != 1:
        return None  # 2-d indices: fixed-size bags, offsets unused
    return _offsets(named.get("offsets"), index_shape[0],
                    None, _value(named.get("include_last_offset")))


def _embedding_bag_grad(named: Named) -> Optional[str]:
    """The backward ops of ``embedding_bag``: bags from ``grad`` (one row per bag) and the
    indices; rows from ``num_weights`` (or the weight); offsets, offset2bag and bag sizes all
    views of the same bags."""
    grad, index_shape = _shape(named.get("grad")), _shape(named.get("indices"))
    rows = _value(named.get("num_weights"))
    if not isinstance(rows, int):
        table = _shape(named.get("weight"))
        rows = table[0] if table else None
    _set_range(named.get("indices"), rows - 1 if isinstance(rows, int) else None)
    maximum = _shape(named.get("maximum_indices"))
    if maximum and prod(maximum) > 0:  # max mode: the row holding each bag's maximum
        _set_range(named.get("maximum_indices"), rows - 1 if isinstance(rows, int) else None)
    if not grad or index_shape is None or len(index_shape) != 1:
        return None
    bags, total = grad[0], index_shape[0]
    if "offsets" in named:
        reason = _offsets(named.get("offsets"), total, bags, None)
        if reason:
            return reason
    if _shape(named.get("offset2bag")) == [total] and total > 0:
        _bags(named.get("offset2bag"), total, bags, "offset2bag")
    if _shape(named.get("bag_size")) == [bags]:
        _bags(named.get("bag_size"), total, bags, "bag_size")
    return None


def _refuse(reason: str) -> Callable[[Named], str]:
    return lambda named: reason


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
    "max_pool2d_with_indices_backward": _pool_window(2),
    "max_pool3d_with_indices_backward": _pool_window(3),
    "adaptive_max_pool2d_backward": _adaptive_window(2),
    "adaptive_max_pool3d_backward": _adaptive_window(3),
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
    "embedding_bag": _embedding_bag,
    "_embedding_bag": _embedding_bag,
    "_embedding_bag_forward_only": _embedding_bag,
    "_embedding_bag_backward": _embedding_bag_grad,
    "_embedding_bag_dense_backward": _embedding_bag_grad,
    "_embedding_bag_sparse_backward": _embedding_bag_grad,
    "_embedding_bag_per_sample_weights_backward": _embedding_bag_grad,
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
    if rule is None and base.startswith(TBE_PREFIXES):  # fbgemm's table-batched embeddings
        rule = tbe_rule
    return rule(named) if rule is not None else None

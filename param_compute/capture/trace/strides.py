"""Stride recovery for execution traces that record none (schemas before 1.1.1).

Such a trace records each tensor's id, shape and storage offset but not its layout, so a
transposed or permuted input would replay contiguous. The layout follows from the trace's own
dataflow: every operator is run again, in trace order, on meta tensors (no data, no compute)
keyed by the trace's tensor ids; a tensor first seen as an input is taken as contiguous, and
each output keeps the strides the meta kernel gives it (``t``, ``transpose``, ``permute``,
``expand``, ``as_strided``... produce exactly the recorded views). The strides of each input
at the moment of each captured call are kept; recorded strides, where a trace has them, always
win (``execution_trace.node_call``).

The trace is data: only the pure tensor ops of ``meta_ops``' allow-list run (every device
argument forced to meta); any other op that would have to run is left out, its outputs taken as
contiguous, and counted by name in the summary (``not_replayed``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Set

from param_compute.capture.meta_ops import meta_operator, on_meta
from param_compute.capture.schema_args import is_view_op, schema_arguments, split_name
from param_compute.capture.trace.walk import TraceTree, attr
from param_compute.capture.values import (ET_DTYPES, SCALAR_TYPES, contiguous_stride,
                                          is_contiguous, split_types)
from param_compute.dtypes import DTYPE_NAMES

_SKIP_NAMESPACES = frozenset({"c10d", "_c10d_functional", "profiler", "record_function"})
#: Ops whose arguments name an output layout.
_LAYOUT_OPS = frozenset({"empty_strided", "new_empty_strided", "as_strided", "as_strided_",
                         "contiguous", "clone", "to", "_to_copy", "empty_like"})


def _inputs(node: Dict[str, Any]):
    inputs = node.get("inputs")
    if isinstance(inputs, dict):
        values = inputs.get("values") or []
        return values, inputs.get("shapes") or [], inputs.get("types") or []
    values = inputs or []
    return values, node.get("input_shapes") or [], node.get("input_types") or []


def _outputs(node: Dict[str, Any]):
    outputs = node.get("outputs")
    if isinstance(outputs, dict):
        return outputs.get("values") or [], outputs.get("shapes") or []
    return outputs or [], node.get("output_shapes") or []


def _tensor_id(value: Any) -> Optional[int]:
    """The trace's id of a recorded tensor value (``[id, storage, offset, ...]``), or None."""
    if isinstance(value, list) and value and type(value[0]) is int:
        return value[0]
    return None


class _MetaReplay:
    def __init__(self, allow_namespaces: Sequence[str] = ()):
        import torch

        self.torch = torch
        self.allow_namespaces = tuple(allow_namespaces)
        self.tensors: Dict[Any, Any] = {}  # trace tensor id -> meta tensor
        self.not_replayed: Counter = Counter()  # why an op was left out -> its calls

    def tensor(self, type_name: str, value: Any, shape: Any):
        torch = self.torch
        element = type_name[len("Tensor("):-1]
        tensor_id = _tensor_id(value)
        if element.startswith("nullptr") or tensor_id is None or len(value) < 3:
            return None
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            return None
        known = self.tensors.get(tensor_id)
        if known is not None and list(known.shape) == shape:
            return known
        dtype = getattr(torch, DTYPE_NAMES.get(ET_DTYPES.get(element, "float"), "float32"))
        fresh = torch.empty_strided(shape, contiguous_stride(shape), dtype=dtype, device="meta")
        self.tensors[tensor_id] = fresh
        return fresh

    def value(self, type_name: str, value: Any, shape: Any, enum: Optional[str]):
        torch = self.torch
        if type_name.startswith("Tensor("):
            return self.tensor(type_name, value, shape)
        if type_name.startswith("GenericList["):
            types = split_types(type_name[len("GenericList["):-1])
            values = value if isinstance(value, list) else []
            shapes = (shape if isinstance(shape, list) else []) + [None] * len(values)
            return [self.value(t, v, s, None) for t, v, s in zip(types, values, shapes)]
        if value == "<None>" or type_name in ("None", "Tensor"):
            return None
        if type_name == "Int" and enum == "dtype":
            return getattr(torch, DTYPE_NAMES.get(SCALAR_TYPES.get(value, "float"), "float32"))
        if type_name == "Int" and enum in ("layout", "memory_format"):
            return None
        if type_name == "Device":
            return torch.device("meta")
        if type_name == "Double" and isinstance(value, str):
            return float(value)
        return value

    def needs_run(self, node: Dict[str, Any], schema: str) -> bool:
        """Whether an op can give an output a layout other than contiguous: a view, an op
        naming strides or a memory format, or any op with a non-contiguous input (elementwise
        ops keep their input's layout). Others are not run (meta kernels cost ~1 ms each):
        their outputs are taken as contiguous when next seen."""
        if is_view_op(schema) or split_name(schema)[1] in _LAYOUT_OPS:
            return True
        values, shapes, types = _inputs(node)
        for index, (type_name, value) in enumerate(zip(types, values)):
            if type_name.startswith("Tensor("):
                known = self.tensors.get(_tensor_id(value))
                if known is not None and not known.is_contiguous():
                    return True
            elif type_name == "Int" and value not in (None, 0, 1) and index < len(
                    schema_arguments(schema)) and \
                    schema_arguments(schema)[index].enum_kind == "memory_format":
                return True
        return False

    def run(self, node: Dict[str, Any]) -> None:
        torch = self.torch
        schema = attr(node, "op_schema")
        namespace, base, overload = split_name(schema)
        if namespace in _SKIP_NAMESPACES:
            return
        values, shapes, types = _inputs(node)
        arguments = schema_arguments(schema)
        args, kwargs = [], {}
        for index, (arg, value) in enumerate(zip(arguments, values)):
            if index >= len(types):
                return
            item = self.value(types[index], value, shapes[index] if index < len(shapes)
                              else None, arg.enum_kind)
            if arg.name == "pin_memory":
                item = None
            if arg.kwarg_only:
                kwargs[arg.name] = item
            else:
                args.append(item)
        if not self.needs_run(node, schema):
            self.forget_outputs(node)
            return
        function, why = meta_operator(namespace, base, overload, self.allow_namespaces)
        if function is None:
            self.not_replayed[why] += 1
            self.forget_outputs(node)
            return
        on_meta(function, args, kwargs)
        self.forget_outputs(node)  # a failing call leaves no stale tensor under these ids
        result = function(*args, **kwargs)
        results = result if isinstance(result, (list, tuple)) else [result]
        out_values, out_shapes = _outputs(node)
        flat = []
        for item in results:
            flat.extend(item if isinstance(item, (list, tuple)) else [item])
        tensors = [t for t in flat if isinstance(t, torch.Tensor) and t.is_meta]
        recorded = [(v, s) for v, s in zip(out_values, out_shapes)
                    if isinstance(v, list) and len(v) >= 3 and isinstance(v[0], int)]
        for tensor, (value, shape) in zip(tensors, recorded):
            if list(tensor.shape) == shape:
                self.tensors[value[0]] = tensor

    def forget_outputs(self, node: Dict[str, Any]) -> None:
        """Drop whatever earlier tensors had this node's output ids (taken as contiguous when
        next seen)."""
        for value in _outputs(node)[0]:
            self.tensors.pop(_tensor_id(value), None)

    def strides_now(self, node: Dict[str, Any]) -> Dict[int, Any]:
        """input index -> the current strides of each tensor input (lists: per item)."""
        values, shapes, types = _inputs(node)
        out: Dict[int, Any] = {}
        for index, (type_name, value) in enumerate(zip(types, values)):
            shape = shapes[index] if index < len(shapes) else None
            if type_name.startswith("Tensor("):
                known = self.tensors.get(_tensor_id(value))
                if known is not None and list(known.shape) == shape:
                    out[index] = list(known.stride())
            elif type_name.startswith("GenericList[") and isinstance(value, list):
                items = []
                for item_index, item in enumerate(value):
                    known = self.tensors.get(_tensor_id(item))
                    item_shape = shape[item_index] if isinstance(shape, list) and \
                        item_index < len(shape) else None
                    items.append(list(known.stride()) if known is not None
                                 and list(known.shape) == item_shape else None)
                if any(s is not None for s in items):
                    out[index] = items
        return out


def _strided(stride: Any, shape: Any) -> bool:
    return isinstance(stride, list) and isinstance(shape, list) and len(stride) == len(shape) \
        and not is_contiguous(shape, stride)


def recover_strides(tree: TraceTree, captured: Set[Any],
                    allow_namespaces: Sequence[str] = ()) -> Dict[Any, Any]:
    """node id -> {input index -> strides} for the ``captured`` nodes, and ``"summary"``:
    ``{recovered_calls, recovered_inputs, meta_failures, not_replayed}`` (calls and inputs given
    a non-contiguous layout; operators the meta replay could not run, and why not for each op
    left out as not allowed (``meta_ops``): the outputs of both stay contiguous)."""
    replay = _MetaReplay(allow_namespaces)
    out: Dict[Any, Any] = {}
    calls = inputs = failures = 0
    for node in sorted(tree.nodes, key=lambda n: n["id"] if isinstance(n["id"], int) else 0):
        if not attr(node, "op_schema"):
            continue
        if node["id"] in captured:
            now = replay.strides_now(node)
            _, shapes, _ = _inputs(node)
            strided = 0
            for index, stride in now.items():
                shape = shapes[index] if index < len(shapes) else None
                if stride and isinstance(stride[0], list) or (stride and stride[0] is None):
                    strided += sum(1 for i, s in enumerate(stride) if s is not None and
                                   _strided(s, shape[i] if isinstance(shape, list) and
                                            i < len(shape) else None))
                else:
                    strided += _strided(stride, shape)
            if strided:
                calls += 1
                inputs += strided
            out[node["id"]] = now
        try:
            replay.run(node)
        except Exception:  # no meta kernel, or an argument it would not take: stays unknown
            failures += 1
    out["summary"] = {"recovered_calls": calls, "recovered_inputs": inputs,
                      "meta_failures": failures,
                      "not_replayed": dict(replay.not_replayed.most_common())}
    return out


def layouts_agree(recovered: List[int], recorded: List[int], shape: List[int]) -> bool:
    """Same layout as torch counts it: strides of size-1 dims don't matter."""
    return len(recovered) == len(recorded) == len(shape) and all(
        size == 1 or a == b for a, b, size in zip(recovered, recorded, shape))

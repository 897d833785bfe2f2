"""Execution traces (``torch.profiler.ExecutionTraceObserver``, Chakra schema 1.x) -> a workload.

An execution trace is ``{"schema", "pid", "nodes": [...]}``; each node has an ``id``, its parent's
id in ``ctrl_deps``, a ``name``, ``inputs``/``outputs`` as ``{values, shapes, types, strides}``
and ``attrs`` (``op_schema`` among them; empty for record-function ranges). A tensor value is
``[tensor_id, storage_id, offset, numel, itemsize, device]`` and its type ``Tensor(float)``;
lists are ``GenericList[Int,Int]`` with per-item values, shapes and strides; ``None`` is
``"<None>"``; ``ScalarType``/``Layout``/``MemoryFormat`` arguments are recorded as ``Int``.
(Older traces, schema 1.0.x, keep ``inputs`` as a list beside ``input_shapes``/``input_types``
and the parent in ``parent``: read too.)

Each operator call is captured once, at the level the dispatcher runs it: a composite wrapper
(``aten::linear`` over ``aten::t`` and ``aten::addmm``) is not replayed, its children are; any
other operator is replayed whole and its internal calls are not replayed again (see
``replayed_operator_nodes``).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .schema_args import SchemaArg, is_composite_wrapper, schema_arguments, split_name
from .values import float_spec, tensor_spec
from .workload import CapturedWorkload, Unreplayable

#: Tensor element type names in traces -> spec dtype names.
ET_DTYPES = {
    "float": "float", "double": "double", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "int": "int", "long int": "long", "long": "long", "signed char": "int8",
    "unsigned char": "uint8", "short int": "int16", "short": "int16", "bool": "bool",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128",
}
#: c10 enum values as traces record them.
SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int", 4: "long", 5: "float16",
                6: "float", 7: "double", 9: "complex64", 10: "complex128", 11: "bool",
                15: "bfloat16"}
LAYOUTS = {0: "strided", 1: "sparse_coo", 2: "sparse_csr", 4: "sparse_csc", 5: "sparse_bsr",
           6: "sparse_bsc"}
MEMORY_FORMATS = {0: "contiguous_format", 1: "preserve_format", 2: "channels_last",
                  3: "channels_last_3d"}
_ENUMS = {"dtype": SCALAR_TYPES, "layout": LAYOUTS, "memory_format": MEMORY_FORMATS}
NONE_VALUE = "<None>"


def read_execution_trace(path) -> Dict[str, Any]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as stream:
        trace = json.load(stream)
    if not isinstance(trace, dict) or not isinstance(trace.get("nodes"), list):
        raise ValueError(f"{path}: not an execution trace (no \"nodes\" list)")
    return trace


def _attr(node: Dict[str, Any], name: str) -> Any:
    for attr in node.get("attrs") or []:
        if isinstance(attr, dict) and attr.get("name") == name:
            return attr.get("value")
    return node.get(name)


def _parent(node: Dict[str, Any]) -> Any:
    return node.get("ctrl_deps", node.get("parent"))


def _inputs(node: Dict[str, Any]) -> Tuple[list, list, list, list]:
    """(values, shapes, types, strides) of a node's inputs, either trace layout."""
    inputs = node.get("inputs")
    if isinstance(inputs, dict):
        values = inputs.get("values") or []
        return (values, inputs.get("shapes") or [None] * len(values),
                inputs.get("types") or [], inputs.get("strides") or [None] * len(values))
    values = inputs or []
    return (values, node.get("input_shapes") or [None] * len(values),
            node.get("input_types") or [], node.get("input_strides") or [None] * len(values))


def replayed_operator_nodes(trace: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The operator calls a replay runs, each once, in id (start) order.

    Walking down from the roots, an operator node is taken whole (with everything it calls
    internally: ``aten::mm``'s own ``resolve_conj`` and output ``empty`` are part of its time)
    unless it is a pure composite wrapper (CompositeImplicitAutograd, e.g. ``aten::linear``)
    with operators below it: then those operators are taken instead. That is the level a
    ``TorchDispatchMode`` sees, so both capture paths fold ops alike, and no work is replayed
    twice. (Leaves alone would drop the GEMM of every ``aten::mm``.)
    """
    nodes = [n for n in trace["nodes"] if isinstance(n, dict) and "id" in n]
    by_id = {n["id"]: n for n in nodes}
    children: Dict[Any, List[Dict[str, Any]]] = {}
    roots = []
    for node in nodes:
        parent = _parent(node)
        if parent in by_id and parent != node["id"]:
            children.setdefault(parent, []).append(node)
        else:
            roots.append(node)
    has_operator_below = set()
    for node in nodes:
        if not _attr(node, "op_schema"):
            continue
        parent = _parent(node)
        while parent in by_id and parent not in has_operator_below:  # marked: so are ancestors
            has_operator_below.add(parent)
            parent = _parent(by_id[parent])
    taken, seen = [], set()
    stack = sorted(roots, key=lambda n: n["id"], reverse=True)
    while stack:
        node = stack.pop()
        if node["id"] in seen:
            continue
        seen.add(node["id"])
        schema = _attr(node, "op_schema")
        if schema and not (node["id"] in has_operator_below and is_composite_wrapper(schema)):
            taken.append(node)
            continue
        stack.extend(sorted(children.get(node["id"], []), key=lambda n: n["id"], reverse=True))
    return sorted(taken, key=lambda n: n["id"])


def _split_types(text: str) -> List[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char in "[(<":
            depth += 1
        elif char in "])>":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def _at(items: Any, index: int) -> Any:
    return items[index] if isinstance(items, list) and index < len(items) else None


def trace_value_spec(type_name: str, value: Any, shape: Any, stride: Any,
                     arg: Optional[SchemaArg] = None) -> Dict[str, Any]:
    """The data spec of one recorded input value."""
    if type_name.startswith("Tensor(") and type_name.endswith(")"):
        element = type_name[len("Tensor("):-1]
        if element.startswith("nullptr"):
            # An undefined tensor: Python passes it as None, for optional and (as some
            # backward kernels take, e.g. an absent attention bias) plain Tensor arguments.
            return {"type": "none"}
        dtype = ET_DTYPES.get(element)
        if dtype is None:
            raise Unreplayable(f"a tensor of element type {element!r} (no spec dtype)")
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            raise Unreplayable("a tensor without a recorded shape")
        device = value[5] if isinstance(value, list) and len(value) > 5 else "cpu"
        offset = value[2] if isinstance(value, list) and len(value) > 2 \
            and isinstance(value[2], int) else 0
        stride = stride if isinstance(stride, list) and all(isinstance(s, int) for s in stride) \
            else None
        return tensor_spec(dtype, shape, stride, str(device), offset)
    if type_name == "Tensor":
        return {"type": "none"}  # an undefined tensor recorded without an element type
    if type_name.startswith("GenericList[") and type_name.endswith("]"):
        item_types = _split_types(type_name[len("GenericList["):-1])
        values = value if isinstance(value, list) else []
        if len(item_types) != len(values):
            raise Unreplayable(f"a list whose recorded types and values disagree ({type_name})")
        return {"type": "genericlist",
                "value": [trace_value_spec(t, v, _at(shape, i), _at(stride, i))
                          for i, (t, v) in enumerate(zip(item_types, values))]}
    if type_name == "None" or value == NONE_VALUE:
        return {"type": "none"}
    kind = arg.enum_kind if arg is not None else None
    if type_name in ("Int", "ScalarType", "Layout", "MemoryFormat") and kind:
        name = _ENUMS[kind].get(value)
        if name is None:
            raise Unreplayable(f"{kind} value {value!r} has no spec name")
        return {"type": kind, "value": name}
    if type_name == "Int":
        return {"type": "int", "value": int(value)}
    if type_name == "Double":
        if isinstance(value, str):  # some writers spell non-finite values as strings
            value = float(value)
        return float_spec(float(value))
    if type_name == "Bool":
        return {"type": "bool", "value": bool(value)}
    if type_name == "String":
        return {"type": "str", "value": str(value)}
    if type_name == "Device":
        return {"type": "device", "value": str(value)}
    raise Unreplayable(f"an argument of recorded type {type_name!r}")


def node_call(node: Dict[str, Any]) -> Tuple[str, List[Dict[str, Any]], Dict[str, Any]]:
    """(schema, positional arg specs, keyword-only arg specs) of one operator node."""
    schema = _attr(node, "op_schema")
    values, shapes, types, strides = _inputs(node)
    arguments = schema_arguments(schema)
    if len(values) > len(arguments) or len(types) != len(values):
        raise Unreplayable(f"the trace records {len(values)} inputs for a schema of "
                           f"{len(arguments)} arguments")
    args, kwargs = [], {}
    for index, (arg, value) in enumerate(zip(arguments, values)):
        spec = trace_value_spec(types[index], value, _at(shapes, index), _at(strides, index), arg)
        if arg.kwarg_only:
            if spec["type"] == "none" and arg.default == "None":
                continue  # the default anyway; every keyword costs the replayed call time
            kwargs[arg.name] = spec
        else:
            args.append(spec)
    return schema, args, kwargs


def _op_label(node: Dict[str, Any]) -> str:
    schema = _attr(node, "op_schema")
    try:
        namespace, base, overload = split_name(schema)
        return f"{namespace}::{base}" + ("" if overload == "default" else f".{overload}")
    except ValueError:
        return str(node.get("name"))


def capture_execution_trace(trace, skip_views: bool = False,
                            source: Optional[str] = None) -> CapturedWorkload:
    """A workload from an execution trace (a path or the parsed JSON)."""
    if not isinstance(trace, dict):
        source = source or str(trace)
        trace = read_execution_trace(trace)
    workload = CapturedWorkload(source or "execution trace", skip_views)
    for node in replayed_operator_nodes(trace):
        try:
            schema, args, kwargs = node_call(node)
        except Exception as exc:  # one odd node must not end the conversion
            workload.skip(_op_label(node), str(exc) if isinstance(exc, Unreplayable) else
                          f"unreadable node: {type(exc).__name__}: {exc}")
            continue
        workload.add(schema, args, kwargs)
    return workload

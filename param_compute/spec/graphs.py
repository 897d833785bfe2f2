"""Captured graphs in a spec (``__graphs__``): their format, and the checks that need no torch.

A compiled region of a captured step (``torch.compile``: the forward or backward aten graph
Inductor compiled) is kept as data under the spec's ``__graphs__`` key, and replayed as one
call by the operator ``graph::NAME`` (resolved by the engine, ``operators.graphs``), whose
input configs are the graph's input tensors. Nothing in a graph names code: every node is an
operator named by its exact overload (``aten::addmm.default``) or ``getitem``, and its
arguments are constants and references to inputs or earlier nodes.

Format (``version`` 1)::

    "__graphs__": {
      "NAME": {"version": 1,
               "region": "0/0",                  # the compiled region it came from (text)
               "pass": "forward",                # forward, backward or inference
               "inputs": [{"name": "primals_1", "dtype": "float32",
                           "shape": [512, 512], "stride": [512, 1]}, ...],
               "nodes": [{"name": "addmm", "op": "aten::addmm.default",
                          "args": [{"ref": "primals_2"}, {"ref": "primals_3"}, ...],
                          "kwargs": {}}, ...],
               "outputs": [{"ref": "addmm"}, null, ...],
               "compile": {"static_inputs": [0, 1], "options": {"max_autotune": false}},
               "eager": {"forward": BODY, "backward": BODY, "user_outputs": 1}}}

An argument is JSON (null, a boolean, an integer, a finite number, text, a list of arguments)
or an object of one key: ``{"ref": NAME}`` (an input or an earlier node), ``{"dtype":
"float32"}``, ``{"device": "run"}`` (the device the graph replays on) or ``{"device":
"cpu"}``, ``{"layout": "strided"}``, ``{"memory_format": "contiguous_format"}``, ``{"float":
"inf"}`` (``-inf``, ``nan``). ``getitem`` takes a node and an index (an item of a node that
returns several tensors). ``compile.options`` may set only the Inductor options named in
``COMPILE_OPTIONS``, each to a boolean.

``eager`` (optional) says how the region runs without compiling (``--eager-regions``): a
forward graph holds the region's eager forward and backward ``BODY`` (``{inputs, nodes,
outputs}``, as above: the aten ops PyTorch runs for it eagerly, its tensors saved as eager
autograd saves them) and ``user_outputs``, how many leading outputs of both forwards are the
region's own (the rest are saved for its backward); a backward graph names its ``tangents``
(the input positions of the gradients it is given).

This module checks the form: names, sizes, argument encodings, and that every reference is
defined before it is used (so a graph has no cycle). Which operators a graph may run, their
arity and the memory its shapes need are checked with torch (``operators.graphs``).
Torch-free.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from param_compute.dtypes import DTYPE_NAMES, LAYOUT_NAMES, MEMORY_FORMAT_NAMES, NON_FINITE_FLOATS
from param_compute.formatting import printable

GRAPHS_KEY = "__graphs__"
VERSION = 1
#: The operator name prefix of a graph's replay (``graph::NAME``).
GRAPH_PREFIX = "graph::"
PASSES = ("forward", "backward", "inference")
#: Bounds on an untrusted spec's graphs.
MAX_GRAPHS = 10_000
MAX_NODES = 200_000
MAX_INPUTS = 100_000
MAX_DIMS = 16
MAX_DIM = 2**62
MAX_NAME = 128
#: The Inductor options a graph may ask for at its replay's compile (booleans only).
COMPILE_OPTIONS = ("max_autotune", "max_autotune_pointwise", "max_autotune_gemm",
                   "coordinate_descent_tuning", "epilogue_fusion", "triton.cudagraphs",
                   "cpp_wrapper")
GRAPH_KEYS = ("version", "region", "pass", "inputs", "nodes", "outputs", "compile", "eager")
#: One-key objects an argument may be.
TAGS = ("ref", "dtype", "device", "layout", "memory_format", "float")
GETITEM = "getitem"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_OP = re.compile(r"[a-z_][a-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*\Z")
_DEVICE = re.compile(r"(cpu|cuda(:[0-9]{1,4})?|run)\Z")

#: (path below the spec's root, message, hint)
GraphProblem = Tuple[tuple, str, Optional[str]]


def graph_name(op_name: str) -> Optional[str]:
    """``graph::NAME`` -> ``NAME`` (a graph of the spec's ``__graphs__``); None for any other
    operator name."""
    if not isinstance(op_name, str) or not op_name.startswith(GRAPH_PREFIX):
        return None
    name = op_name[len(GRAPH_PREFIX):]
    return name if is_name(name) else None


def is_name(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME and bool(_NAME.match(value))


def refs(value: Any) -> Iterator[str]:
    """The names an argument refers to (``{"ref": NAME}``, in lists too)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("ref"), str):
                yield item["ref"]
        elif isinstance(item, list):
            stack.extend(item)


def _label(node: Any, index: int) -> str:
    name = node.get("name") if isinstance(node, dict) else None
    return f"node {index} ({printable(name, 60)})" if isinstance(name, str) else f"node {index}"


def _argument_problem(value: Any, depth: int = 0) -> Optional[str]:
    """What is wrong with an argument's encoding (references are checked apart), or None."""
    if value is None or isinstance(value, (bool, int, str)):
        return None
    if isinstance(value, float):
        return None if value == value and value not in (float("inf"), float("-inf")) \
            else 'a non-finite number is written {"float": "inf"}'
    if isinstance(value, list):
        if depth > 4:
            return "lists nest at most 4 deep"
        for item in value:
            problem = _argument_problem(item, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in TAGS:
            return f"an object argument has one key of {', '.join(TAGS)}"
        tag, text = next(iter(value.items()))
        if not isinstance(text, str):
            return f"{tag} is text"
        allowed = {"dtype": DTYPE_NAMES, "layout": LAYOUT_NAMES,
                   "memory_format": MEMORY_FORMAT_NAMES, "float": NON_FINITE_FLOATS}.get(tag)
        if allowed is not None and text not in allowed:
            return f"{tag} {printable(text, 40)!s} is none of {', '.join(sorted(allowed))}"
        if tag == "device" and not _DEVICE.match(text):
            return f"device {printable(text, 40)} is not run, cpu, cuda or cuda:N"
        if tag == "ref" and not is_name(text):
            return f"ref {printable(text, 40)} is not a name"
        return None
    return f"an argument of type {type(value).__name__}"


def _input_problems(inputs: Any, where: tuple) -> List[GraphProblem]:
    if not isinstance(inputs, list) or len(inputs) > MAX_INPUTS:
        return [(where, f"inputs is a list of at most {MAX_INPUTS} tensors", None)]
    out: List[GraphProblem] = []
    for index, item in enumerate(inputs):
        at = where + (index,)
        if not isinstance(item, dict) or set(item) - {"name", "dtype", "shape", "stride"}:
            out.append((at, "an input is {name, dtype, shape, stride}", None))
            continue
        if not is_name(item.get("name")):
            out.append((at + ("name",), "an input's name is an identifier", None))
        if item.get("dtype") not in DTYPE_NAMES:
            out.append((at + ("dtype",), f"unknown dtype {printable(item.get('dtype'), 40)}",
                        None))
        shape, stride = item.get("shape"), item.get("stride")
        if not _dims(shape):
            out.append((at + ("shape",), f"a shape is a list of at most {MAX_DIMS} sizes "
                        f"from 0 to 2^62", None))
        elif stride is not None and (not _dims(stride, signed=True)
                                     or len(stride) != len(shape)):
            out.append((at + ("stride",), "a stride has one integer per dim", None))
    return out


def _dims(value: Any, signed: bool = False) -> bool:
    return isinstance(value, list) and len(value) <= MAX_DIMS and all(
        isinstance(d, int) and not isinstance(d, bool) and (signed or d >= 0)
        and abs(d) < MAX_DIM for d in value)


def graph_problems(name: Any, graph: Any) -> List[GraphProblem]:
    """Every problem of one graph's form, each at its path below the spec's root (an empty
    list: well formed). A reference to a node defined later, or never, is one (no cycles)."""
    where: tuple = (GRAPHS_KEY, name)
    if not is_name(name):
        return [(where, f"a graph's name is an identifier of at most {MAX_NAME} characters",
                 None)]
    if not isinstance(graph, dict):
        return [(where, "a graph is an object", None)]
    out: List[GraphProblem] = [(where + (key,), f"unknown key {printable(key, 40)}",
                                f"a graph has {', '.join(GRAPH_KEYS)}")
                               for key in graph if key not in GRAPH_KEYS]
    if graph.get("version") != VERSION:
        out.append((where + ("version",), f"unsupported version "
                    f"{printable(graph.get('version'), 20)} (this param_compute reads "
                    f"version {VERSION})", None))
    if graph.get("pass") not in PASSES:
        out.append((where + ("pass",), f"pass is one of {', '.join(PASSES)}", None))
    if "region" in graph and not (isinstance(graph["region"], str)
                                  and len(graph["region"]) <= MAX_NAME):
        out.append((where + ("region",), "region is text", None))
    out += _compile_problems(graph.get("compile"), where + ("compile",),
                             len(graph.get("inputs") or []))
    out += body_problems(graph, where)
    if graph.get("eager") is not None and not out:
        out += _eager_problems(graph, where + ("eager",))
    return out


def body_problems(body: Dict[str, Any], where: tuple) -> List[GraphProblem]:
    """The problems of a graph's body: its inputs, its nodes (every reference defined before
    it is used), its outputs."""
    out = _input_problems(body.get("inputs"), where + ("inputs",))
    nodes = body.get("nodes")
    if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
        return out + [(where + ("nodes",), f"nodes is a list of at most {MAX_NODES} nodes",
                       None)]
    defined = {item.get("name"): -1 for item in body.get("inputs") or []
               if isinstance(item, dict) and is_name(item.get("name"))}
    later = {node.get("name"): index for index, node in enumerate(nodes)
             if isinstance(node, dict) and isinstance(node.get("name"), str)}
    for index, node in enumerate(nodes):
        out += _node_problems(node, index, where + ("nodes", index), defined, later)
        if len(out) > 50:
            return out
    outputs = body.get("outputs")
    if not isinstance(outputs, list) or len(outputs) > MAX_INPUTS:
        out.append((where + ("outputs",), "outputs is a list of references or nulls", None))
    else:
        for index, value in enumerate(outputs):
            if value is not None and not (isinstance(value, dict) and set(value) == {"ref"}):
                out.append((where + ("outputs", index), "an output is {\"ref\": NAME} or null",
                            None))
            elif value is not None and value["ref"] not in defined:
                out.append((where + ("outputs", index), f"output {index} refers to "
                            f"{printable(value['ref'], 60)}, which no input or node defines",
                            None))
    return out


def _count(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit


def _eager_problems(graph: Dict[str, Any], where: tuple) -> List[GraphProblem]:
    """``eager``: how ``--eager-regions`` runs the region as PyTorch runs it without
    compiling. A forward (or inference) graph holds the eager ``forward`` and ``backward``
    bodies (as AOT autograd traced the region without Inductor's decompositions, partitioned
    as eager autograd saves its tensors) and ``user_outputs``, how many of its outputs (and
    of the eager forward's) are the region's own, the rest saved for the backward pass; a
    backward graph names its ``tangents`` (input positions: the gradients it is given)."""
    value = graph["eager"]
    allowed = ("tangents",) if graph.get("pass") == "backward" else \
        ("forward", "backward", "user_outputs")
    if not isinstance(value, dict) or set(value) - set(allowed):
        return [(where, f"eager is an object of {', '.join(allowed)}", None)]
    if graph.get("pass") == "backward":
        tangents = value.get("tangents")
        inputs = len(graph["inputs"])
        if not isinstance(tangents, list) or not all(_count(i, inputs - 1) for i in tangents):
            return [(where + ("tangents",), "tangents lists input positions", None)]
        return []
    out: List[GraphProblem] = []
    for key in ("forward", "backward"):
        body = value.get(key)
        if body is None and key == "backward":
            continue
        if not isinstance(body, dict) or set(body) - {"inputs", "nodes", "outputs"}:
            out.append((where + (key,), f"eager.{key} is {{inputs, nodes, outputs}}", None))
            continue
        out += body_problems(body, where + (key,))
    if out:
        return out
    forward = value["forward"]
    if len(forward["inputs"]) != len(graph["inputs"]):
        out.append((where + ("forward", "inputs"), f"the eager forward takes "
                    f"{len(forward['inputs'])} inputs, the graph {len(graph['inputs'])}", None))
    users = value.get("user_outputs")
    if not _count(users, min(len(forward["outputs"]), len(graph["outputs"]))):
        out.append((where + ("user_outputs",), "user_outputs counts outputs of both forwards",
                    None))
    return out


def _compile_problems(value: Any, where: tuple, inputs: int) -> List[GraphProblem]:
    if value is None:
        return []
    if not isinstance(value, dict) or set(value) - {"static_inputs", "options"}:
        return [(where, "compile is {static_inputs, options}", None)]
    out: List[GraphProblem] = []
    static = value.get("static_inputs", [])
    if not isinstance(static, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < inputs for i in static):
        out.append((where + ("static_inputs",), "static_inputs lists input positions", None))
    options = value.get("options", {})
    if not isinstance(options, dict):
        return out + [(where + ("options",), "options is an object", None)]
    for key, setting in options.items():
        if key not in COMPILE_OPTIONS:
            out.append((where + ("options", str(key)[:40]), f"{printable(key, 40)} is not an "
                        "Inductor option a graph may set",
                        f"allowed: {', '.join(COMPILE_OPTIONS)}"))
        elif not isinstance(setting, bool):
            out.append((where + ("options", key), f"{key} is true or false", None))
    return out


def _node_problems(node: Any, index: int, where: tuple, defined: Dict[str, int],
                   later: Dict[str, int]) -> List[GraphProblem]:
    label = _label(node, index)
    if not isinstance(node, dict) or set(node) - {"name", "op", "args", "kwargs"}:
        return [(where, f"{label}: a node is {{name, op, args, kwargs}}", None)]
    out: List[GraphProblem] = []
    name, op = node.get("name"), node.get("op")
    if not is_name(name):
        out.append((where + ("name",), f"{label}: a node's name is an identifier", None))
    elif name in defined:
        out.append((where + ("name",), f"{label}: the name is defined twice", None))
    if not (op == GETITEM or (isinstance(op, str) and _OP.match(op))):
        out.append((where + ("op",), f"{label}: op {printable(op, 80)} is neither "
                    "NAMESPACE::NAME.OVERLOAD nor getitem", None))
    args, kwargs = node.get("args", []), node.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        out.append((where, f"{label}: args is a list and kwargs an object", None))
        args, kwargs = [], {}
    for key in kwargs:
        if not is_name(key):
            out.append((where + ("kwargs",), f"{label}: keyword {printable(key, 40)} is not "
                        "a name", None))
    for place, value in [(("args", i), v) for i, v in enumerate(args)] + \
            [(("kwargs", k), v) for k, v in kwargs.items() if is_name(k)]:
        problem = _argument_problem(value)
        if problem:
            out.append((where + place, f"{label}: {problem}", None))
            continue
        for ref in refs(value):
            if ref in defined:
                continue
            at = later.get(ref)
            why = (f"{printable(ref, 60)}, which is defined after it (a cycle or a forward "
                   "reference)" if at is not None and at >= index
                   else f"{printable(ref, 60)}, which no input or earlier node defines")
            out.append((where + place, f"{label}: refers to {why}", None))
    if op == GETITEM and not (len(args) == 2 and isinstance(args[0], dict)
                              and set(args[0]) == {"ref"} and isinstance(args[1], int)
                              and not isinstance(args[1], bool) and not kwargs):
        out.append((where, f"{label}: getitem takes a node and an index", None))
    if is_name(name) and name not in defined:
        defined[name] = index
    return out


def graph_input_problems(graph: Dict[str, Any], asl: Any) -> List[Tuple[tuple, str]]:
    """(path below the arg-spec-list, message) where an input config of ``graph::NAME``
    disagrees with the graph's inputs: one tensor per input, of its shape and dtype."""
    inputs = graph.get("inputs") or []
    if not isinstance(asl, dict):
        return []
    args = asl.get("args") or []
    out: List[Tuple[tuple, str]] = []
    if asl.get("kwargs"):
        out.append((("kwargs",), "a graph takes its inputs positionally"))
    if len(args) != len(inputs):
        return out + [(("args",), f"{len(args)} arguments for a graph of {len(inputs)} "
                       "inputs")]
    for index, (spec, expected) in enumerate(zip(args, inputs)):
        if not isinstance(spec, dict) or not isinstance(expected, dict):
            continue
        if spec.get("type") != "tensor":
            out.append((("args", index), f"input {index} ({expected.get('name')}) is a tensor"))
            continue
        if spec.get("shape") != expected.get("shape"):
            out.append((("args", index, "shape"), f"input {index} ({expected.get('name')}) "
                        f"has shape {expected.get('shape')} in the graph"))
        if DTYPE_NAMES.get(spec.get("dtype")) != DTYPE_NAMES.get(expected.get("dtype")):
            out.append((("args", index, "dtype"), f"input {index} ({expected.get('name')}) "
                        f"is {expected.get('dtype')} in the graph"))
    return out


def graphs_of(raw: Any) -> Dict[str, Any]:
    """A spec's ``__graphs__`` (an empty dict where it has none or it is not an object)."""
    value = raw.get(GRAPHS_KEY) if isinstance(raw, dict) else None
    return value if isinstance(value, dict) else {}


def section_problems(value: Any) -> List[GraphProblem]:
    """Every problem of a spec's ``__graphs__`` value (form only)."""
    if not isinstance(value, dict):
        return [((GRAPHS_KEY,), f"{GRAPHS_KEY} is an object: graph name -> graph", None)]
    if len(value) > MAX_GRAPHS:
        return [((GRAPHS_KEY,), f"{len(value)} graphs, over the limit of {MAX_GRAPHS}", None)]
    out: List[GraphProblem] = []
    for name, graph in value.items():
        out += graph_problems(name, graph)
    return out


def node_label(graph: Dict[str, Any], index: int) -> str:
    nodes = graph.get("nodes") or []
    return _label(nodes[index], index) if 0 <= index < len(nodes) else f"node {index}"


def graph_ops(graph: Dict[str, Any]) -> Sequence[str]:
    """The distinct operator names a (well-formed) graph's nodes run, ``getitem`` left out."""
    return sorted({node["op"] for node in graph.get("nodes") or [] if node["op"] != GETITEM})

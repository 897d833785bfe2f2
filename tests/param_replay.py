"""What PARAM's replay does with an ``aten::`` config, written here to test ``--param-form``.

PARAM (train/compute/python, TorchScriptOp and its default data generator) turns the schema's
argument and return lists into a TorchScript graph: it splits each list at every comma, drops
the ``*`` marker, keeps the first word of each item as its type (``int[2]`` -> ``int[]``, any
``Tensor...`` -> ``Tensor``) and calls the schema's op on all graph inputs. It then calls the
graph with the config's args and kwargs made by its generator: floating tensors from
``torch.rand``, integer tensors from ``randint(-10, 10)``, 0-dim tensors from a uniform scalar,
and only the types tensor, float/double, int/long, none, bool, device, str, genericlist, tuple.
"""

from __future__ import annotations

import random
import re
from typing import Any, Dict, List, Set, Tuple

import torch

_FLOATS = {"float": torch.float32, "double": torch.float64, "float16": torch.float16,
           "bfloat16": torch.bfloat16}
_INTEGERS = {"uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
             "int": torch.int32, "long": torch.int64}


#: PARAM's draws are unseeded; these are seeded so that a test run is repeatable.
_RANDOM = random.Random(0)
_GENERATOR = torch.Generator().manual_seed(0)


def param_value(spec: Dict[str, Any]) -> Any:
    kind = spec["type"]
    if kind == "tensor":
        dtype, shape = spec["dtype"], spec["shape"]
        if not shape:
            return torch.tensor(_RANDOM.uniform(-10.0, 10.0),
                                dtype={**_FLOATS, **_INTEGERS, "bool": torch.bool}[dtype])
        if dtype in _FLOATS:
            return torch.rand(*shape, generator=_GENERATOR).to(_FLOATS[dtype])
        if dtype in _INTEGERS:
            return torch.randint(-10, 10, tuple(shape), generator=_GENERATOR,
                                 dtype=_INTEGERS[dtype])
        if dtype == "bool":
            return torch.rand(*shape, generator=_GENERATOR) < 0.5
        raise KeyError(dtype)
    if kind in ("float", "double", "int", "long"):
        return spec["value"]
    if kind == "none":
        return None
    if kind == "bool":
        return spec["value"]
    if kind == "device":
        return torch.device(spec["value"])
    if kind == "str":
        return spec.get("value", "")
    if kind == "genericlist":
        return [param_value(item) for item in spec["value"]]
    if kind == "tuple":
        return tuple(param_value(item) for item in spec["value"])
    raise KeyError(kind)


def _graph_types(text: str) -> List[str]:
    items = [item.strip().split(" ")[0] for item in text.strip("() ").split(",")
             if "*" not in item]
    items = [re.sub(r"\[[0-9]\]", "[]", item) for item in items]
    return ["Tensor" if "Tensor" in item else item for item in items]


def schema_graph_function(name: str, schema: str):
    _, signature = schema.split("(", 1)
    arguments, returns = signature.split("->", 1)
    inputs, outputs = _graph_types(arguments), _graph_types(returns)
    registers = iter(range(len(inputs) + len(outputs) + 1))
    graph_inputs = [(f"%{next(registers)}", kind) for kind in inputs]
    graph_outputs = [(f"%{next(registers)}", kind) for kind in outputs]
    lines = [f"{', '.join(f'{r} : {k}' for r, k in graph_outputs)} = "
             f"{torch._C.parse_schema(schema).name}({', '.join(r for r, _ in graph_inputs)})"]
    result = graph_outputs[-1][0]
    if len(graph_outputs) > 1:
        result = f"%{next(registers)}"
        lines.append(f"{result} : ({', '.join(k for _, k in graph_outputs)}) = "
                     f"prim::TupleConstruct({', '.join(r for r, _ in graph_outputs)})")
    body = "\n  ".join(lines)
    text = (f"graph({', '.join(f'{r} : {k}' for r, k in graph_inputs)}):\n  {body}\n"
            f"  return ({result})\n")
    unit = torch._C.CompilationUnit()
    return unit.create_function(name, torch._C.parse_ir(text))


def param_replay(spec: Dict[str, Any], skip: Set[Tuple[str, str, int]] = frozenset()
                 ) -> Tuple[int, List[Tuple[str, str, int, str]]]:
    """(configs PARAM runs, [(op, schema, input index, error)] for those it doesn't).

    ``skip``: (op, schema, input index) of configs not to run. Out-of-range indices can do
    worse than raise: max_pool2d_with_indices_backward corrupts the heap and aborts."""
    ran, failed = 0, []
    for op, entry in spec.items():
        for config in entry["config"]:
            schema = config["build"][0]["args"][0]["value"]
            for index, arg_spec_list in enumerate(config["input"]):
                if (op, schema, index) in skip:
                    continue
                try:
                    function = schema_graph_function(op, schema)
                    args = [param_value(a) for a in arg_spec_list.get("args", [])]
                    kwargs = {k: param_value(a)
                              for k, a in arg_spec_list.get("kwargs", {}).items()}
                    with torch.no_grad():
                        function(*args, **kwargs)
                    ran += 1
                except Exception as exc:  # what PARAM would report for this config
                    failed.append((op, schema, index, f"{type(exc).__name__}: {exc}"))
    return ran, failed

"""Which calls of a traced step read values the trace does not record: an optimizer's state.

On a CPU the time of floating-point arithmetic depends on its values: subnormal operands take
a slow path (Adam's ``exp_avg_sq`` of parameters whose gradients have stopped decays into
subnormals, and a ``sqrt`` over it runs several times slower than over ordinary values). A
trace records shapes, not values, so a replay from it generates ordinary values and runs those
calls at their fast speed. The calls this module names are those inside an optimizer's step
(a ``Optimizer.step#NAME.step`` record-function node above them) that read a floating tensor
first seen there: not a parameter (the forward pass read it before), not a gradient (the
backward pass produced it), but the optimizer's own state, kept from step to step, and the
same tensor wherever the step reads it again. What the capture does with them (the report's
``values_unknown``, the step file's original, ``--subnormal-state``) is ``capture.workload``'s
and the trace capture's; why a replay's time differs is the ledger's.
"""

from __future__ import annotations

from typing import Any, Dict, Hashable, List, Optional, Sequence

from param_compute.capture.trace.step import _at, _input_names, _io, _keys
from param_compute.capture.trace.walk import TraceTree
from param_compute.capture.values import split_types

#: The record-function name prefix of an optimizer's step (``torch.optim.Optimizer``).
OPTIMIZER_PREFIX = "Optimizer.step#"
#: Element types of a trace's tensors that subnormals apply to.
FLOAT_TYPES = ("float", "double", "c10::Half", "c10::BFloat16", "Half", "BFloat16")


def _floating(type_name: str) -> bool:
    inner = type_name[type_name.find("(") + 1:type_name.rfind(")")]
    return inner in FLOAT_TYPES


def _float_inputs(node: Dict[str, Any]) -> List[tuple]:
    """(argument path, exact key, layout key) of each floating tensor input of ``node`` with
    at least one dim (a 0-dim tensor is a step count or a scalar, not state whose values
    decide a kernel's speed), a tensor list's items included (``_foreach_*`` optimizers)."""
    values, shapes, types, strides = _io(node, "inputs")
    names = _input_names(node)
    out = []
    for index, value in enumerate(values):
        type_name = str(_at(types, index) or "")
        head = names[index] if index < len(names) else index
        if type_name.startswith("Tensor(") and "nullptr" not in type_name:
            keys = _keys(value, _at(shapes, index), _at(strides, index))
            if keys and _floating(type_name) and _at(shapes, index):
                out.append(([head],) + keys)
        elif type_name.startswith("GenericList[") and isinstance(value, list):
            items = split_types(type_name[len("GenericList["):-1])
            for j, (item_type, item) in enumerate(zip(items, value)):
                if item_type.startswith("Tensor(") and "nullptr" not in item_type:
                    keys = _keys(item, _at(_at(shapes, index), j), _at(_at(strides, index), j))
                    if keys and _floating(item_type) and _at(_at(shapes, index), j):
                        out.append(([head, j],) + keys)
    return out


def _outputs(node: Dict[str, Any]) -> List[Hashable]:
    values, shapes, _, strides = _io(node, "outputs")
    keys: List[Hashable] = []
    for index, value in enumerate(values):
        items = value if isinstance(value, list) and value and isinstance(value[0], list) \
            else [value]
        for j, item in enumerate(items):
            found = _keys(item, _at(shapes, index) if len(items) == 1
                          else _at(_at(shapes, index), j),
                          _at(strides, index) if len(items) == 1 else _at(_at(strides, index), j))
            if found:
                keys.extend(found)
    return keys


def optimizer_of(tree: TraceTree, node: Dict[str, Any], cache: Dict[Any, Optional[str]]
                 ) -> Optional[str]:
    """The name of the optimizer step above ``node`` (``Adam.step``), or None."""
    chain, current, found = [], node.get("id"), None
    while current in tree.by_id and len(chain) <= len(tree.nodes):
        if current in cache:
            found = cache[current]
            break
        chain.append(current)
        name = str(tree.by_id[current].get("name", ""))
        if name.startswith(OPTIMIZER_PREFIX):
            found = name[len(OPTIMIZER_PREFIX):] or "optimizer"
            break
        parent = tree.parent_of(tree.by_id[current])
        if parent == current:
            break
        current = parent
    for node_id in chain:
        cache[node_id] = found
    return found


def state_inputs(tree: TraceTree, nodes: Sequence[Dict[str, Any]]
                 ) -> Dict[Any, Dict[str, Any]]:
    """node id -> ``{"optimizer": NAME, "paths": [argument path, ...], "tensors": [(state
    tensor, elements), ...]}`` (a tensor per path, named by its first key) for each of
    ``nodes`` (the replay-level calls, any order) inside an optimizer step that reads the
    optimizer's state: a floating tensor first seen inside an optimizer step, or one seen so
    before."""
    seen: set = set()
    state: Dict[Hashable, Hashable] = {}  # either key of a state tensor -> its name
    cache: Dict[Any, Optional[str]] = {}
    out: Dict[Any, Dict[str, Any]] = {}
    ordered = sorted(nodes, key=lambda n: n["id"] if isinstance(n.get("id"), int) else 0)
    for node in ordered:
        try:
            inputs, outputs = _float_inputs(node), _outputs(node)
        except Exception:  # an odd node's arguments are not worth ending the capture
            continue
        optimizer = optimizer_of(tree, node, cache)
        if optimizer is not None:
            paths, tensors = [], []
            for path, exact, layout in inputs:
                if exact in state or layout in state or (exact not in seen
                                                         and layout not in seen):
                    name = state.get(exact, state.get(layout, exact))
                    state[exact] = state[layout] = name
                    paths.append(path)
                    tensors.append((name, _elements(exact)))
            if paths:
                out[node["id"]] = {"optimizer": optimizer, "paths": paths, "tensors": tensors}
        for _, exact, layout in inputs:
            seen.update((exact, layout))
        seen.update(outputs)
    return out


def _elements(key: Hashable) -> int:
    """A state tensor's element count, from its exact key (``step._keys``: numel 4th)."""
    numel = key[4] if isinstance(key, tuple) and len(key) > 4 else None
    return numel if isinstance(numel, int) and not isinstance(numel, bool) and numel > 0 else 1


def subnormal_tensors(found: Dict[Any, Dict[str, Any]], fraction: float) -> set:
    """The state tensors to make subnormal so that ``fraction`` of the state's elements are:
    whole tensors, the last ones the step first reads, back to where the share is within half
    a tensor of ``fraction``. Whole tensors and a run of them, because state decays parameter
    by parameter (a parameter whose gradients stopped, an expert no token reaches, has both of
    its moments subnormal, and an optimizer reads a parameter's moments together), and
    because subnormals scattered over a tensor slow down every vector they fall in: a CPU
    ``sqrt`` over 1M floats of which 48% were subnormal at random places took 2.4x as long as
    one whose first half was."""
    order: Dict[Hashable, int] = {}
    for node_id in sorted(found, key=lambda i: i if isinstance(i, int) else 0):
        for name, elements in found[node_id].get("tensors", []):
            order.setdefault(name, elements)
    goal = fraction * sum(order.values())
    chosen, taken = set(), 0
    for name, elements in reversed(list(order.items())):
        if taken + elements / 2 > goal:
            break
        chosen.add(name)
        taken += elements
    return chosen


def give_profile(args: List[Any], kwargs: Dict[str, Any], paths: Sequence[List[Any]],
                 profile: Dict[str, float]) -> int:
    """Give each floating tensor spec at ``paths`` (in a call's ``args``/``kwargs`` as
    ``node_call`` made them) the ``value_profile`` ``profile``; how many it gave."""
    given = 0
    for path in paths:
        head = path[0]
        if isinstance(head, int):
            spec = args[head] if head < len(args) else None
        else:
            spec = kwargs.get(head)
        if len(path) > 1 and isinstance(spec, dict) and spec.get("type") in (
                "genericlist", "tensorlist", "list"):
            items = spec.get("value")
            spec = items[path[1]] if isinstance(items, list) and path[1] < len(items) else None
        if isinstance(spec, dict) and spec.get("type") == "tensor":
            spec["value_profile"] = dict(profile)
            given += 1
    return given

"""An execution trace's step dataflow: each node's tensor inputs and outputs, keyed for the
``StepRecorder``.

A trace names each tensor value ``[tensor_id, storage_id, offset, numel, itemsize, device]``.
The exact key is the tensor id with its layout; the layout key is the storage, offset, shape,
strides and element size (a saved tensor the backward pass unpacks is a new tensor id over the
same storage). Input paths follow the captured call's arguments: a schema's keyword-only
argument by name, any other by its position.
"""

from __future__ import annotations

from typing import Any, Dict, Hashable, Iterator, List, Optional, Sequence, Tuple

from param_compute.capture.schema_args import schema_arguments
from param_compute.capture.collectives import replay_path

#: ``record_trace_step``'s config for a trace's record of where a collective was waited.
WAITED = object()
from param_compute.capture.step.dataflow import StepRecorder, TensorSlot
from param_compute.capture.trace.walk import attr
from param_compute.capture.values import split_types


def _io(node: Dict[str, Any], side: str) -> Tuple[list, list, list, list]:
    """(values, shapes, types, strides) of a node's inputs or outputs, either trace layout."""
    entry = node.get(side)
    if isinstance(entry, dict):
        values = entry.get("values") or []
        return (values, entry.get("shapes") or [], entry.get("types") or [],
                entry.get("strides") or [])
    prefix = side[:-1]  # input / output
    return (entry if isinstance(entry, list) else [], node.get(f"{prefix}_shapes") or [],
            node.get(f"{prefix}_types") or [], node.get(f"{prefix}_strides") or [])


def _at(items: Any, index: int) -> Any:
    return items[index] if isinstance(items, list) and index < len(items) else None


def _plain(value: Any) -> Hashable:
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    return value if isinstance(value, (int, str, float, type(None))) else str(value)


def _keys(value: Any, shape: Any, stride: Any) -> Optional[Tuple[Hashable, Hashable]]:
    if not isinstance(value, list) or len(value) < 4:
        return None
    tensor_id, storage_id, offset, numel = value[:4]
    itemsize = value[4] if len(value) > 4 else None
    device = value[5] if len(value) > 5 else None
    layout = ("L", _plain(storage_id), _plain(offset), _plain(numel), _plain(shape),
              _plain(stride), _plain(itemsize), _plain(device))
    return ("T", _plain(tensor_id)) + layout[1:], layout


def _slots(values: list, shapes: list, types: list, strides: list,
           names: Sequence[Any]) -> Iterator[TensorSlot]:
    for index, value in enumerate(values):
        type_name = str(_at(types, index) or "")
        head = names[index] if index < len(names) else index
        if type_name.startswith("Tensor("):
            if "nullptr" in type_name:
                continue
            keys = _keys(value, _at(shapes, index), _at(strides, index))
            if keys:
                yield [head], keys[0], keys[1]
        elif type_name.startswith("GenericList[") and isinstance(value, list):
            items = split_types(type_name[len("GenericList["):-1])
            for j, (item_type, item) in enumerate(zip(items, value)):
                if item_type.startswith("Tensor(") and "nullptr" not in item_type:
                    keys = _keys(item, _at(_at(shapes, index), j), _at(_at(strides, index), j))
                    if keys:
                        yield [head, j], keys[0], keys[1]


def _input_names(node: Dict[str, Any]) -> List[Any]:
    """Each recorded input's path head: its position, or its name if keyword-only."""
    schema = attr(node, "op_schema")
    if not schema:
        return []
    try:
        arguments = schema_arguments(schema)
    except Exception:  # an unreadable schema: positions only
        return []
    return [a.name if a.kwarg_only else i for i, a in enumerate(arguments)]


def node_slots(node: Dict[str, Any]) -> Tuple[List[TensorSlot], List[TensorSlot]]:
    """(tensor inputs, tensor outputs) of one trace node."""
    inputs = list(_slots(*_io(node, "inputs"), _input_names(node)))
    outputs = list(_slots(*_io(node, "outputs"), []))
    return inputs, outputs


def record_trace_step(recorder: StepRecorder, calls: Sequence[Tuple[Any, ...]],
                      timeline: Any = None) -> None:
    """Feed ``(node, config or None, original CPU µs, a collective's {async, comm_us, base}
    or None)`` in the step's order to ``recorder`` (a collective's inputs at their places in
    the replayed call, ``capture.collectives.replay_path``);
    with ``timeline`` (``kineto.HostTimeline``) each captured call's host gap too, and the
    step's host time: as in a live capture, a call not captured adds its gap and its own host
    time to the next captured call's gap (or, after the last, to the tail)."""
    pending = 0.0
    for node, config, original, collective in calls:
        if config is WAITED:  # the trace's record of a collective's work waited here
            recorder.waited(collective["wait"])
            continue
        try:
            inputs, outputs = node_slots(node)
        except Exception:  # an odd node's dataflow is not worth ending the capture
            inputs, outputs = [], []
        if collective:
            moved = [(replay_path(collective["base"], path), exact, layout)
                     for path, exact, layout in inputs]
            inputs = [(path, exact, layout) for path, exact, layout in moved if path]
        host = timeline.of(node) if timeline is not None else None
        gap = None
        if host is not None:
            if config is None:
                pending += host[0] + host[1]
            else:
                gap, pending = pending + host[0], 0.0
        recorder.call(config, inputs, outputs, original, gap_us=gap,
                      asynchronous=bool(collective and collective["async"]),
                      comm_us=collective["comm_us"] if collective else None,
                      seq=collective.get("seq") if collective else None)
    if timeline is not None:
        recorder.real_host_us = timeline.real_host_us
        recorder.real_host_from = "profiled"  # an upper bound: see ``kineto``
        recorder.tail_gap_us = pending + timeline.tail_us

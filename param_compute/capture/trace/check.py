"""A structural check of a trace's nodes and a Kineto trace's events before anything uses them.

Every field capture reads is held to the JSON type it must have: an execution-trace node is an
object with an integer ``id`` (unique), a string ``name``, an integer parent link (``ctrl_deps``
or ``parent``), ``attrs`` a list of ``{name, value}`` objects (``op_schema`` a string), and
``inputs``/``outputs`` in either trace layout (lists of values, shapes and strings for types);
a Kineto event is an object, and a complete event (``ph: "X"``) has a string ``name``, numeric
``ts`` and ``dur``, ``args`` an object. Problems are collected (at most ``MAX_PROBLEMS``) and
raised together as one ``TraceError`` naming the file, the node (id and name) or event (index
and name), the field and what is wrong; exit status 2 on the command line. Values whose meaning
only the replay knows (an ``Int`` argument recorded as text) are not refused here: the call is
left out with that reason.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

from param_compute.capture.accounting import TraceError
from param_compute.formatting import printable

MAX_PROBLEMS = 20
_ATTR_TYPES = {"op_schema": (str,), "kernel_backend": (str,), "kernel_file": (str,),
               "rf_id": (int, str), "tensor_range": (str, dict)}


def json_kind(value: Any) -> str:
    """``value``'s JSON type, as a message says it (with a short sample of scalars)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{'true' if value else 'false'} (a boolean)"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return f"a string ('{printable(value, 40)}')"
    if isinstance(value, int):
        return f"an integer ({printable(str(value), 40)})"
    if isinstance(value, float):
        return f"a number ({value!r})"
    return type(value).__name__


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    if _integer(value):
        return abs(value) < 2 ** 63  # times in µs; a float holds these (10**400 it would not)
    return isinstance(value, float) and math.isfinite(value)


class _Problems:
    def __init__(self, source: Any):
        self.source = source
        self.items: List[str] = []

    def add(self, where: str, message: str) -> None:
        if len(self.items) < MAX_PROBLEMS:
            self.items.append(f"{where}: {message}")
        elif len(self.items) == MAX_PROBLEMS:
            self.items.append(f"stopped after {MAX_PROBLEMS} problems")

    def raise_any(self) -> None:
        if self.items:
            raise TraceError(self.source, self.items)


def _node_label(index: int, node: Dict[str, Any]) -> str:
    node_id = node.get("id")
    name = node.get("name")
    label = f"node {node_id}" if _integer(node_id) else f"nodes[{index}]"
    return label + (f" ({printable(name, 60)})" if isinstance(name, str) and name else "")


def _check_list(problems: _Problems, where: str, owner: Dict[str, Any], key: str,
                strings: bool = False, label: Optional[str] = None) -> None:
    value = owner.get(key)
    label = label or key
    if value is None:
        return
    if not isinstance(value, list):
        problems.add(where, f"{label} is {json_kind(value)}, not an array")
    elif strings:
        for position, item in enumerate(value):
            if not isinstance(item, str):
                problems.add(where, f"{label}[{position}] is {json_kind(item)}, not a string "
                                    "(a recorded type such as 'Tensor(float)')")
                break


def _check_io(problems: _Problems, where: str, node: Dict[str, Any], side: str) -> None:
    value = node.get(side)
    prefix = side[:-1] if side.endswith("s") else side  # inputs -> input_shapes...
    if value is None:
        return
    if isinstance(value, dict):
        for key in ("values", "shapes", "strides"):
            _check_list(problems, where, value, key, label=f"{side}.{key}")
        _check_list(problems, where, value, "types", strings=True, label=f"{side}.types")
    elif isinstance(value, list):
        for key in ("shapes", "strides"):
            _check_list(problems, where, node, f"{prefix}_{key}")
        _check_list(problems, where, node, f"{prefix}_types", strings=True)
    else:
        problems.add(where, f"{side} is {json_kind(value)}, not an object or an array")


def check_execution_trace(trace: Dict[str, Any], source: Any) -> None:
    """``TraceError`` listing what is wrong with ``trace``'s nodes, if anything."""
    problems = _Problems(source)
    nodes = trace.get("nodes") if isinstance(trace, dict) else None
    if not isinstance(nodes, list):
        raise TraceError(source, ["not an execution trace (no \"nodes\" list)"])
    first_index: Dict[int, int] = {}
    for index, node in enumerate(nodes):
        if not isinstance(node, dict):
            problems.add(f"nodes[{index}]", f"is {json_kind(node)}, not an object")
            continue
        where = _node_label(index, node)
        node_id = node.get("id")
        if not _integer(node_id):
            problems.add(where, "no id" if node_id is None else
                         f"id is {json_kind(node_id)}, not an integer")
        elif node_id in first_index:
            problems.add(where, f"id {node_id} is also the id of nodes[{first_index[node_id]}]; "
                                "node ids are unique")
        else:
            first_index[node_id] = index
        name = node.get("name")
        if name is not None and not isinstance(name, str):
            problems.add(where, f"name is {json_kind(name)}, not a string")
        for key in ("ctrl_deps", "parent"):
            parent = node.get(key)
            if parent is not None and not _integer(parent):
                problems.add(where, f"{key} (the parent's id) is {json_kind(parent)}, not an "
                                    "integer")
        _check_attrs(problems, where, node.get("attrs"))
        for key, kinds in _ATTR_TYPES.items():  # the same fields outside attrs (older traces)
            value = node.get(key)
            if value is not None and not (isinstance(value, kinds)
                                          and not isinstance(value, bool)):
                problems.add(where, f"{key} is {json_kind(value)}, not "
                                    f"{_kinds_text(kinds)}")
        _check_io(problems, where, node, "inputs")
        _check_io(problems, where, node, "outputs")
        if len(problems.items) > MAX_PROBLEMS:
            break
    problems.raise_any()


def _kinds_text(kinds) -> str:
    names = {str: "a string", int: "an integer", dict: "an object"}
    return " or ".join(names[k] for k in kinds)


def _check_attrs(problems: _Problems, where: str, attrs: Any) -> None:
    if attrs is None:
        return
    if not isinstance(attrs, list):
        problems.add(where, f"attrs is {json_kind(attrs)}, not an array")
        return
    for position, item in enumerate(attrs):
        if not isinstance(item, dict):
            problems.add(where, f"attrs[{position}] is {json_kind(item)}, not an object")
            continue
        name = item.get("name")
        if not isinstance(name, str):
            problems.add(where, f"attrs[{position}].name is {json_kind(name)}, not a string")
            continue
        kinds = _ATTR_TYPES.get(name)
        value = item.get("value")
        if kinds and value is not None and not (isinstance(value, kinds)
                                                and not isinstance(value, bool)):
            problems.add(where, f"attribute {printable(name, 40)} is {json_kind(value)}, not "
                                f"{_kinds_text(kinds)}")


def _event_label(index: int, event: Dict[str, Any]) -> str:
    name = event.get("name")
    return f"traceEvents[{index}]" + (f" ({printable(name, 60)})" if isinstance(name, str) else "")


def check_kineto_trace(trace: Dict[str, Any], source: Any) -> None:
    """``TraceError`` listing what is wrong with the Kineto events capture reads, if anything."""
    problems = _Problems(source)
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise TraceError(source, ["not a Kineto trace (no \"traceEvents\" list)"])
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            problems.add(f"traceEvents[{index}]", f"is {json_kind(event)}, not an object")
            continue
        phase = event.get("ph")
        if phase is not None and not isinstance(phase, str):
            problems.add(_event_label(index, event), f"ph is {json_kind(phase)}, not a string")
        if phase != "X":
            continue
        where = _event_label(index, event)
        problem = _complete_event_problem(event)
        if problem:
            problems.add(where, problem)
        if len(problems.items) > MAX_PROBLEMS:
            break
    problems.raise_any()


def _complete_event_problem(event: Dict[str, Any]) -> Optional[str]:
    for key in ("name", "cat"):
        value = event.get(key)
        if value is not None and not isinstance(value, str):
            return f"{key} is {json_kind(value)}, not a string"
    if "ts" not in event:
        return "no ts (start time)"
    for key in ("ts", "dur"):
        value = event.get(key)
        if key in event and not _number(value):
            return f"{key} is {json_kind(value)}, not a finite number (µs)"
    if "dur" in event and event["dur"] < 0:
        return f"dur is negative ({event['dur']!r})"
    for key in ("pid", "tid"):
        value = event.get(key)
        if value is not None and not (_integer(value) or isinstance(value, str)):
            return f"{key} is {json_kind(value)}, not an integer or a string"
    args = event.get("args")
    if args is None:
        return None
    if not isinstance(args, dict):
        return f"args is {json_kind(args)}, not an object"
    for key in ("correlation", "Record function id"):
        value = args.get(key)
        if value is not None and not _integer(value):
            return f"args.{key} is {json_kind(value)}, not an integer"
    dims = args.get("Input Dims")
    if dims is not None and not isinstance(dims, list):
        return f"args.Input Dims is {json_kind(dims)}, not an array"
    return None

"""Where a step's fed tensors sit among a call's arguments, and how they are put there.

The step replay (``step_replay``) binds each call once: its arguments generated from the
config, then every input an earlier call feeds replaced by a ``Slot`` placeholder at its
argument path (``step_file``: ``[i]``, ``[i, j]``, ``["name"]``, ``["name", j]``), found again
after the operator bound them (``locate``) so that each step only fills and clears them. An
output path (``[k]`` or ``[k, j]``) picks a tensor out of what a call returned (``output``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence


class Slot:
    """A placeholder for a fed tensor while a call's arguments are bound."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def get_path(value: Any, path: Sequence[Any]) -> Any:
    for part in path:
        value = value[part]
    return value


def set_path(container: Any, path: Sequence[Any], value: Any) -> None:
    for part in path[:-1]:
        container = container[part]
    container[path[-1]] = value


def arg_value(args: List[Any], kwargs: Dict[str, Any], path: Sequence[Any]) -> Any:
    head = path[0]
    root = args[head] if isinstance(head, int) else kwargs[head]
    return get_path(root, path[1:])


def set_arg(args: List[Any], kwargs: Dict[str, Any], path: Sequence[Any], value: Any) -> None:
    if len(path) == 1:
        if isinstance(path[0], int):
            args[path[0]] = value
        else:
            kwargs[path[0]] = value
        return
    container = args[path[0]] if isinstance(path[0], int) else kwargs[path[0]]
    set_path(container, path[1:], value)


def tensor_spec(config_input: Dict[str, Any], path: Sequence[Any]) -> Optional[Dict[str, Any]]:
    """The data spec of the tensor at ``path`` in a config's input."""
    head = path[0]
    spec = (config_input.get("args") or [None] * (head + 1))[head] if isinstance(head, int) \
        else (config_input.get("kwargs") or {}).get(head)
    for part in path[1:]:
        if not isinstance(spec, dict) or spec.get("type") not in ("genericlist", "tuple"):
            return None
        items = spec.get("value") or []
        spec = items[part] if part < len(items) else None
    return spec if isinstance(spec, dict) and spec.get("type") == "tensor" else None


def locate(bound_args: List[Any], bound_kwargs: Dict[str, Any]):
    """(container, key, slot) of every placeholder in bound arguments (one list level deep)."""
    found = []
    for container, keys in ((bound_args, range(len(bound_args))), (bound_kwargs,
                                                                   list(bound_kwargs))):
        for key in keys:
            value = container[key]
            if isinstance(value, Slot):
                found.append((container, key, value.index))
            elif isinstance(value, list):
                found.extend((value, j, item.index) for j, item in enumerate(value)
                             if isinstance(item, Slot))
    return found


def output(result: Any, path: Sequence[int]) -> Any:
    outputs = result if isinstance(result, tuple) else (result,)
    value = outputs[path[0]] if path[0] < len(outputs) else None
    if len(path) == 2:
        value = value[path[1]] if isinstance(value, (list, tuple)) and path[1] < len(value) \
            else None
    return value

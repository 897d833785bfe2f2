"""A run option's value checked: its JSON against its field's type (``RunOptions.from_json``),
and ``--host-gaps`` against the run it is given to (``RunOptions.check``)."""

from __future__ import annotations

import typing
from typing import Any, Optional, Union

from param_compute.errors import OptionsError
from param_compute.measure.timing import ExecMode


def typed_value(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against a field's type (ints accepted for floats, exec modes by name)."""
    allowed = typing.get_args(hint) if typing.get_origin(hint) is Union else (hint,)
    for kind in allowed:
        if kind is type(None) and value is None:
            return None
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, str):
            return value
        if kind is ExecMode and value in {m.value for m in ExecMode}:
            return ExecMode(value)
        if typing.get_origin(kind) is tuple and isinstance(value, list) \
                and all(isinstance(item, str) for item in value):
            return tuple(value)
    names = [("null" if k is type(None) else
              "one of " + ", ".join(m.value for m in ExecMode) if k is ExecMode else
              {bool: "true/false", int: "an integer", float: "a number",
               str: "text"}.get(k, "a list of text" if typing.get_origin(k) is tuple
                                else getattr(k, "__name__", str(k)))) for k in allowed]
    return _fail(where, " or ".join(names), value)


def host_gaps_refusal(mode: Any, replay_step: bool) -> Optional[str]:
    """Why ``--host-gaps`` cannot be ``mode`` here (None: it can): one of auto, on, off, and
    on or off only with ``--replay-step`` (the only replay that keeps them), never ignored."""
    if mode not in ("auto", "on", "off"):
        return f"--host-gaps must be auto, on or off, got {mode!r}"
    if mode != "auto" and not replay_step:
        return (f"--host-gaps {mode} applies to the step replay: add --replay-step (or --step "
                "FILE)")
    return None


def _fail(where: str, expected: str, value: Any) -> Any:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    raise OptionsError(f"{where}: expected {expected}, got {shown}")

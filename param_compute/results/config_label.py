"""A config in a few characters, for every table a person reads: ``64×4096·4096×512 bf16``.

Tensors print as their shape (``×`` between dimensions, ``[]`` for a 0-d tensor), arguments are
joined by ``·``, keyword arguments as ``name=value``, lists and tuples in brackets; the dtype is
said once at the end when every tensor has the same one, else after each tensor (``8×8:i64``).
Build arguments (a module's constructor) come first, in parentheses. Scalars are shortened
(``0.0001``, ``1e+06``; long strings cut). Torch-free: it reads the record's expanded config.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from param_compute.dtypes import DTYPE_NAMES
from param_compute.spec.walker import CONTAINER_TYPES

#: torch dtype name -> the short form tables print.
SHORT_DTYPES = {
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int32": "i32",
    "int64": "i64", "int8": "i8", "int16": "i16", "uint8": "u8", "bool": "bool",
    "complex64": "c64", "complex128": "c128",
}

#: A string value longer than this is cut (an aten schema string, a file path).
MAX_STRING = 16
#: Nested lists deeper than this print as ``…``.
MAX_DEPTH = 4


def short_dtype(name: Any) -> str:
    text = str(name).removeprefix("torch.")
    return SHORT_DTYPES.get(DTYPE_NAMES.get(text, text), text)


def config_label(config: Any, width: Optional[int] = None) -> str:
    """The compact label of a record's ``config`` (``{"build": ..., "input": ...}``), cut to
    ``width`` characters with ``…`` when given."""
    if not isinstance(config, dict):
        return ""
    dtypes: List[str] = []
    inputs = _asl(config.get("input"), dtypes)
    build = config.get("build")
    built = _asl(build[0] if isinstance(build, list) and build else build, dtypes)
    mixed = len(set(dtypes)) > 1
    if mixed:  # each tensor says its own dtype
        dtypes = []
        inputs = _asl(config.get("input"), dtypes, each=True)
        built = _asl(build[0] if isinstance(build, list) and build else build, dtypes,
                     each=True)
    label = f"({built}) {inputs}" if built else inputs
    if dtypes and not mixed:
        label += f" {dtypes[0]}"
    return cut(label.strip(), width)


def cut(text: str, width: Optional[int]) -> str:
    if width is None or len(text) <= width:
        return text
    return text[:max(width - 1, 0)] + "…"


def _is_schema(spec: Any) -> bool:
    """An aten op's schema string given as its build argument: it names the op, no config."""
    return isinstance(spec, dict) and isinstance(spec.get("value"), str) and "->" in spec["value"]


def _asl(asl: Any, dtypes: List[str], each: bool = False) -> str:
    if not isinstance(asl, dict):
        return ""
    parts = []
    args = asl.get("args")
    if isinstance(args, list):
        parts += [_value(spec, dtypes, each, 0) for spec in args if not _is_schema(spec)]
    kwargs = asl.get("kwargs")
    if isinstance(kwargs, dict):
        for key, spec in kwargs.items():
            if isinstance(spec, dict) and spec.get("value", "") is None:
                continue  # an explicit None keyword says nothing about the config
            parts.append(f"{key}={_value(spec, dtypes, each, 0)}")
    return "·".join(parts)


def _value(spec: Any, dtypes: List[str], each: bool, depth: int) -> str:
    if not isinstance(spec, dict):
        return _scalar(spec)
    kind = spec.get("type")
    if kind == "tensor":
        shape = spec.get("shape")
        text = "×".join(str(d) for d in shape) if isinstance(shape, list) and shape else "[]"
        dtype = short_dtype(spec.get("dtype", "float32"))
        dtypes.append(dtype)
        return f"{text}:{dtype}" if each else text
    if kind in CONTAINER_TYPES:
        items = spec.get("value")
        if depth >= MAX_DEPTH or not isinstance(items, list):
            return "…"
        inner = ",".join(_value(item, dtypes, each, depth + 1) for item in items)
        return f"[{inner}]" if kind == "genericlist" else f"({inner})"
    if kind == "dtype":
        return short_dtype(spec.get("value"))
    return _scalar(spec.get("value"))


def _scalar(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ",".join(_scalar(v) for v in value[:8]) + (",…" if len(value) > 8 else "") \
            + "]"
    if isinstance(value, str):
        return cut(value, MAX_STRING)
    return cut(str(value), MAX_STRING)


def record_label(record: Dict[str, Any], width: Optional[int] = None) -> str:
    """The label of a record as read from a results file (its ``config``)."""
    return config_label(record.get("config"), width)

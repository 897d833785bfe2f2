"""How values from a spec are quoted in problem messages: typed and short."""

from __future__ import annotations

import json
from typing import Any

from param_compute.dtypes import DTYPE_NAMES
from param_compute.errors import did_you_mean


def json_type(value: Any) -> str:
    """The JSON Schema type name of a parsed JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def short(value: Any, limit: int = 60) -> str:
    """A value as a short snippet of JSON (a string as its repr), at a cost bounded by ``limit``
    whatever the size of the value."""
    if isinstance(value, str):
        text = repr(value[:limit])
    else:
        text = ""
        encoder = json.JSONEncoder(default=lambda o: f"<{type(o).__name__}>")
        try:
            for chunk in encoder.iterencode(value):  # lazy: stops as soon as there is enough
                text += chunk
                if len(text) > limit:
                    break
        except (ValueError, TypeError, RecursionError):
            text = text or f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def dtype_hint(value: Any) -> str:
    """What to suggest for an unknown dtype name."""
    if isinstance(value, str):
        # "bfloat" means bfloat16 rather than float: prefer a name the value begins.
        prefixed = [name for name in DTYPE_NAMES if value and name.startswith(value)]
        if prefixed:
            return f"did you mean {prefixed[0]!r}?"
        close = did_you_mean(value, DTYPE_NAMES)
        if close:
            return close
    return f"known: {', '.join(DTYPE_NAMES)}"

"""Reading aten schema strings: argument names, declared types, views.

``torch._C.FunctionSchema`` reports ``ScalarType``, ``Layout`` and ``MemoryFormat`` arguments as
plain ``int`` (and an execution trace records their values as ints), so the declared type is read
from the schema text itself. Everything here is cached per schema string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class SchemaArg:
    name: str
    type_text: str  # as declared, alias annotations removed: "Tensor?[]", "ScalarType?", "int[2]"
    kwarg_only: bool
    default: Optional[str] = None  # the default as written ("None", "1", "[0, 1]"), if any

    @property
    def enum_kind(self) -> Optional[str]:
        """``dtype``, ``layout`` or ``memory_format`` for an enum-valued argument, else None."""
        base = self.type_text.rstrip("?")
        return {"ScalarType": "dtype", "Layout": "layout",
                "MemoryFormat": "memory_format"}.get(base)

    @property
    def is_list(self) -> bool:
        return "[" in self.type_text


def _split_top_level(text: str) -> List[str]:
    parts, depth, quote, current = [], 0, None, []
    for char in text:
        if quote:
            current.append(char)
            if char == quote:
                quote = None
            continue
        if char in "\"'":
            quote = char
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    if "".join(current).strip():
        parts.append("".join(current))
    return [p.strip() for p in parts]


def _arguments_text(schema: str) -> Tuple[str, str]:
    """(the text between the argument parentheses, the text after ``->``)."""
    start = schema.index("(")
    depth = 0
    for index in range(start, len(schema)):
        if schema[index] == "(":
            depth += 1
        elif schema[index] == ")":
            depth -= 1
            if depth == 0:
                rest = schema[index + 1:]
                returns = rest.split("->", 1)[1].strip() if "->" in rest else ""
                return schema[start + 1:index], returns
    raise ValueError(f"unbalanced parentheses in schema {schema!r}")


_ALIAS = re.compile(r"\([^)]*\)")


@lru_cache(maxsize=4096)
def schema_arguments(schema: str) -> Tuple[SchemaArg, ...]:
    """The declared arguments of a schema string, in order."""
    arguments, kwarg_only = [], False
    text, _ = _arguments_text(schema)
    for part in _split_top_level(text):
        if part == "*":
            kwarg_only = True
            continue
        declaration, _, default = part.partition("=")
        type_text, name = declaration.strip().rsplit(" ", 1)
        arguments.append(SchemaArg(name, _ALIAS.sub("", type_text).replace(" ", ""), kwarg_only,
                                   default.strip() or None))
    return tuple(arguments)


def qualified_name(schema: str) -> str:
    """``aten::add.Tensor`` from ``aten::add.Tensor(Tensor self, ...) -> Tensor``."""
    return schema.split("(", 1)[0].strip()


def split_name(schema: str) -> Tuple[str, str, str]:
    """(namespace, base name, overload) of a schema string; overload ``default`` when absent."""
    qualified = qualified_name(schema)
    namespace, _, rest = qualified.partition("::")
    base, _, overload = rest.partition(".")
    return namespace, base, overload or "default"


#: Ops that only make or drop an alias whatever their schema says.
VIEW_LIKE = frozenset({"_unsafe_view", "lift_fresh", "lift", "alias", "detach", "detach_",
                       "_reshape_alias", "view_as_real", "view_as_complex", "_conj",
                       "_neg_view", "resolve_conj", "resolve_neg", "contiguous"})


@lru_cache(maxsize=4096)
def is_composite_wrapper(schema: str) -> bool:
    """True for a CompositeImplicitAutograd op (``aten::linear``, ``matmul``, ``dropout``,
    ``reshape``...): all its work is in the ops it calls, which the dispatcher sees."""
    import torch

    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(qualified_name(schema),
                                                              "CompositeImplicitAutograd")
    except RuntimeError:  # an op this build does not have
        return False


@lru_cache(maxsize=4096)
def is_view_op(schema: str) -> bool:
    """True for view/alias bookkeeping: an op returning an alias of an input it does not write
    (``aten::view``, ``transpose``, ``as_strided``, ``split``...) or one of ``VIEW_LIKE``."""
    _, base, _ = split_name(schema)
    if base in VIEW_LIKE:
        return True
    _, returns = _arguments_text(schema)
    annotations = re.findall(r"Tensor\(([^)]*)\)", returns)
    return bool(annotations) and all("!" not in a for a in annotations)

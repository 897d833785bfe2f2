"""The parts of ``ns::name.overload`` operator names (torch-free: a dry run needs them too)."""

from __future__ import annotations

from typing import Optional

#: Namespaces of torch's own compute operators outside aten, registered when torch's module
#: that defines them is imported (``operators.resolution.NAMESPACE_LIBRARIES``): captured and
#: run like aten's, with no ``--allow-namespace`` (FSDP2's ``fsdp::all_gather_copy_in``,
#: ``fsdp::split_with_sizes_copy``, ``fsdp::chunk_cat`` are the step's compute).
TORCH_NAMESPACES = frozenset({"fsdp"})


def aten_overload_name(op_name: str, schema: Optional[str]) -> str:
    """The overload an ``aten::`` spec means: from its schema string, else from the op name.

    ``aten::add`` with schema ``aten::add.Tensor(...)`` -> ``Tensor``; ``aten::matmul(...)`` ->
    ``default``; ``aten::add.Scalar`` with no schema -> ``Scalar``.
    """
    qualified = op_name
    if schema:
        qualified = schema.split("(", 1)[0].strip()
    base = qualified.split("::", 1)[1] if "::" in qualified else qualified
    return base.split(".", 1)[1] if "." in base else "default"


def aten_base_name(op_name: str) -> str:
    base = op_name.split("::", 1)[1] if "::" in op_name else op_name
    return base.split(".", 1)[0]


def op_namespace(op_name: str) -> str:
    """``aten`` for ``aten::add``, ``fbgemm`` for ``fbgemm::jagged_to_padded_dense``."""
    return op_name.split("::", 1)[0] if "::" in op_name else "aten"

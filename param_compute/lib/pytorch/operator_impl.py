"""PARAM's ``lib.pytorch.operator_impl``: its operator classes, as the engine's own adapters.

``CallableOp(torch.mm)`` is the engine's callable adapter, ``UnaryOp("add_")`` its in-place
method adapter (no backward pass), ``BuildableOp(torch.nn.Linear)`` its module adapter and
``TorchScriptOp("aten::add")`` its ``aten::`` adapter (``build`` takes the schema string, as
PARAM's). Each keeps PARAM's attribute names (``func``, ``func_name``, ``constructor``,
``fwd_out``) for scripts that read them.
"""

from __future__ import annotations

from typing import Any, Callable

from param_compute.operators.adapters import (AtenOperator, CallableOperator,
                                              InplaceMethodOperator, ModuleOperator)


class _KeepsOutput:
    """``forward`` called directly (not through the timed loop) keeps its output in
    ``fwd_out``, as PARAM's operators do; ``create_grad``/``backward`` use it."""

    @property
    def fwd_out(self) -> Any:
        return self.__dict__.get("_last_output")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        output = super().forward(*args, **kwargs)
        self.remember_output(output)
        return output


class CallableOp(_KeepsOutput, CallableOperator):
    """An operator called as ``func(*args, **kwargs)``."""

    def __init__(self, func: Callable[..., Any]):
        super().__init__(func)
        self.func = func


class UnaryOp(InplaceMethodOperator):
    """An in-place Tensor method called on the first argument: ``args[0].func_name(*rest)``."""

    def __init__(self, func_name: str):
        super().__init__(func_name)
        self.func_name = func_name


class BuildableOp(_KeepsOutput, ModuleOperator):
    """An operator built first (``constructor(*build_args)``, moved to the device), then called."""

    def __init__(self, constructor: Callable[..., Any]):
        super().__init__(constructor)
        self.constructor = constructor

    @property
    def func(self) -> Any:
        return self.module


class TorchScriptOp(_KeepsOutput, AtenOperator):
    """An ``aten::`` operator; ``build(op_schema)`` picks the overload the schema names."""

    def __init__(self, func_name: str):
        super().__init__(func_name)
        self.func_name = func_name

    @property
    def func(self) -> Any:
        return self.function

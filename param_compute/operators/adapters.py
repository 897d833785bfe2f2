"""Operator adapters for torch callables: functions, in-place Tensor methods, nn.Modules, aten ops.

Each adapter is an ``OperatorInterface`` whose ``bind_forward`` returns the cheapest possible
zero-argument callable (a ``functools.partial`` of the underlying function), so the timed loop
pays for the operator call and nothing else.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from param_compute.operators.meta import call_output_bytes, module_bytes, torch_owned
from param_compute.operators.names import aten_base_name, aten_overload_name, op_namespace
from param_compute.plugins.interfaces import OperatorInterface


class CallableOperator(OperatorInterface):
    """A plain torch function such as ``torch.add`` or ``torch.nn.functional.gelu``."""

    def __init__(self, function: Callable[..., Any]):
        self.function = function

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def bind_forward(self, args: List[Any], kwargs: Dict[str, Any]) -> Callable[[], Any]:
        return functools.partial(self.function, *args, **kwargs)

    def estimate_output_bytes(self, *args: Any, **kwargs: Any) -> Optional[int]:
        """The memory guard's hook: the outputs' storage, from a call on meta arguments
        (``torch.ones(size=[12000, 12000])`` -> 576 MB); None for a function not torch's own."""
        return call_output_bytes(self.function, args, kwargs) if torch_owned(self.function) \
            else None


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value)
    return value


class InplaceMethodOperator(OperatorInterface):
    """PARAM's in-place names: ``torch.add_`` runs ``Tensor.add_`` on the first argument.

    In-place updates of a leaf that requires grad are illegal in autograd, and recording them
    would grow a graph without bound over the iterations; the arguments are therefore detached
    once at bind time (sharing storage, outside the timed region). In-place ops have no backward.
    """

    supports_backward = False

    def __init__(self, method_name: str):
        self.method_name = method_name
        self.method = getattr(torch.Tensor, method_name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.method(*args, **kwargs)

    def bind_forward(self, args: List[Any], kwargs: Dict[str, Any]) -> Callable[[], Any]:
        args = [_detached(a) for a in args]
        kwargs = {k: _detached(v) for k, v in kwargs.items()}
        return functools.partial(self.method, *args, **kwargs)


class ModuleOperator(OperatorInterface):
    """A ``torch.nn.Module`` class, built from the build args and moved to the run device."""

    def __init__(self, module_class: type):
        self.module_class = module_class
        self.module: Optional[torch.nn.Module] = None

    def build(self, *args: Any, **kwargs: Any) -> None:
        self.module = self.module_class(*args, **kwargs).to(self.device)

    def estimate_build_bytes(self, *args: Any, **kwargs: Any) -> int:
        """The memory guard's hook: the module built on the meta device, its parameters and
        buffers counted (``nn.Linear(40000, 40000)`` -> 6.4 GB), nothing allocated."""
        return module_bytes(self.module_class, args, kwargs)

    def _built(self) -> torch.nn.Module:
        if self.module is None:  # a module spec with no build entry: default construction
            self.build()
        return self.module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._built()(*args, **kwargs)

    def bind_forward(self, args: List[Any], kwargs: Dict[str, Any]) -> Callable[[], Any]:
        return functools.partial(self._built(), *args, **kwargs)

    def cleanup(self) -> None:
        super().cleanup()
        self.module = None


class AtenOperator(OperatorInterface):
    """An ``aten::`` operator run through ``torch.ops.aten.<name>.<overload>`` directly.

    The build args carry the schema string (PARAM's ``aten_ops.json`` form); the overload named
    there is the one called. Without build args the op name itself may carry the overload.
    Like PARAM, specs may pass keyword-only schema arguments positionally (``aten::add.Tensor``
    with ``alpha`` as a third arg): extra positional args are bound to the keyword-only
    parameters in schema order, once, at bind time. Keyword arguments that are None where the
    schema's default is None are dropped then too: the call means the same and costs less
    (PARAM's form writes every argument out).
    """

    def __init__(self, op_name: str):
        self.op_name = op_name
        self.function: Optional[Callable[..., Any]] = None
        self.positional_count = 0
        self.keyword_only: List[str] = []
        self.none_by_default: frozenset = frozenset()

    def build(self, schema: Optional[str] = None, *args: Any, **kwargs: Any) -> None:
        namespace = getattr(torch.ops, op_namespace(self.op_name))
        packet = getattr(namespace, aten_base_name(self.op_name))
        self.function = getattr(packet, aten_overload_name(self.op_name, schema))
        arguments = self.function._schema.arguments
        self.positional_count = sum(1 for a in arguments if not a.kwarg_only)
        self.keyword_only = [a.name for a in arguments if a.kwarg_only]
        self.none_by_default = frozenset(a.name for a in arguments if a.kwarg_only
                                         and a.has_default_value() and a.default_value is None)

    def _bound(self, args: Sequence[Any], kwargs: Dict[str, Any]):
        if self.function is None:
            self.build()
        extra = list(args[self.positional_count:])
        if len(extra) > len(self.keyword_only):
            most = self.positional_count + len(self.keyword_only)
            raise TypeError(f"{self.op_name} takes at most {most} arguments, {len(args)} given")
        merged = dict(zip(self.keyword_only, extra))
        merged.update(kwargs)
        merged = {name: value for name, value in merged.items()
                  if not (value is None and name in self.none_by_default)}
        return list(args[:self.positional_count]), merged

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self._bound(args, kwargs)
        return self.function(*args, **kwargs)

    def bind_forward(self, args: List[Any], kwargs: Dict[str, Any]) -> Callable[[], Any]:
        args, kwargs = self._bound(args, kwargs)
        return functools.partial(self.function, *args, **kwargs)

    def estimate_build_bytes(self, *args: Any, **kwargs: Any) -> int:
        """The memory guard's build hook: building resolves the overload the schema names
        (for ``estimate_output_bytes``) and allocates nothing."""
        self.build(*args, **kwargs)
        return 0

    def estimate_output_bytes(self, *args: Any, **kwargs: Any) -> int:
        """The memory guard's hook: the outputs' storage, from a call on meta arguments
        (``aten::ones`` of ``[12000, 12000]`` -> 576 MB); None outside the aten namespace (a
        backend's kernel may read the data a meta tensor does not have)."""
        if op_namespace(self.op_name) != "aten":
            return None
        args, kwargs = self._bound(args, kwargs)
        return call_output_bytes(self.function, args, kwargs)

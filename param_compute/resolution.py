"""Operator-name resolution: what a spec's operator name may run, and nothing else.

In order: registered workloads; callables of torch's operator namespaces by dotted name
(``torch.X``, ``torch.nn.functional.X``, ``torch.special.X``, ``torch.linalg.X``, ``torch.fft.X``),
``torch.nn`` Module classes, PARAM's in-place names (``torch.add_`` -> ``Tensor.add_``); then
``aten::name(.overload)`` through ``torch.ops.aten``. A spec is data: names are looked up as
attributes one level below an allowed namespace, never imported or evaluated; private and dunder
names and functions touching files, processes or code loading are refused.
"""

from __future__ import annotations

import inspect
import re
import types
from functools import partial
from typing import Callable, Dict, List, Optional

import torch

from .errors import did_you_mean
from .interfaces import OperatorInterface
from .registry import Registries
from .torch_operators import (AtenOperator, CallableOperator, InplaceMethodOperator,
                              ModuleOperator, aten_base_name, aten_overload_name)
from .validation import Resolution

FUNCTION_NAMESPACES = {
    "torch": torch,
    "torch.nn.functional": torch.nn.functional,
    "torch.special": torch.special,
    "torch.linalg": torch.linalg,
    "torch.fft": torch.fft,
}

# Functions of the allowed namespaces that read or write files, load code, or change process-wide
# state: refused whatever else the spec says.
REFUSED_TORCH_NAMES = frozenset({
    "load", "save", "from_file", "compile", "export", "set_default_device", "set_default_dtype",
    "set_default_tensor_type", "manual_seed", "seed", "initial_seed", "set_rng_state",
    "get_rng_state", "set_num_threads", "set_num_interop_threads", "use_deterministic_algorithms",
    "set_deterministic_debug_mode", "set_printoptions", "set_grad_enabled", "set_flush_denormal",
    "set_warn_always", "set_float32_matmul_precision", "set_anomaly_enabled",
    "set_autocast_enabled", "cond", "vmap", "load_library", "register_package",
    "import_ir_module", "import_ir_module_from_buffer", "get_file_path",
    "prepare_multiprocessing_environment", "fork", "wait", "init_num_threads",
    "clear_autocast_cache", "autocast_increment_nesting", "autocast_decrement_nesting",
})
#: Setters of process-wide state (torch.set_autocast_dtype, ...) are refused as a family; the one
#: exception is ``torch.set_`` itself, PARAM's in-place name for ``Tensor.set_``.
REFUSED_TORCH_PREFIXES = ("set_",)
REFUSED_ATEN_NAMES = frozenset({"save", "load", "from_file", "_save_for_lite_interpreter"})

_ATEN_NAME = re.compile(r"^aten::([A-Za-z_][A-Za-z0-9_]*)(\.[A-Za-z0-9_]+)?$")
ALLOWED_FORMS = ("registered workloads, torch.X, torch.nn.functional.X, torch.special.X, "
                 "torch.linalg.X, torch.fft.X, torch.nn.<Module>, aten::name[.overload]")


def _refusal(reason: str, hint: Optional[str] = None) -> Resolution:
    return Resolution(False, reason=reason, hint=hint)


def _public_names(namespace) -> List[str]:
    return [n for n in dir(namespace) if not n.startswith("_")]


class OperatorResolver:
    """Resolves operator names against the registries and torch, caching per name."""

    def __init__(self, registries: Registries):
        self.registries = registries
        self._factories: Dict[str, Callable[[], OperatorInterface]] = {}
        self._resolutions: Dict[str, Resolution] = {}

    def __call__(self, name: str) -> Resolution:
        if name not in self._resolutions:
            self._resolutions[name] = self._resolve(name)
        return self._resolutions[name]

    def factory(self, name: str) -> Callable[[], OperatorInterface]:
        """A factory of fresh operator objects for a name that resolved."""
        resolution = self(name)
        if not resolution.ok:
            raise KeyError(f"operator {name!r} does not resolve: {resolution.reason}")
        return self._factories[name]

    def _ok(self, name: str, kind: str, factory: Callable[[], OperatorInterface]) -> Resolution:
        self._factories[name] = factory
        return Resolution(True, kind=kind)

    def _resolve(self, name: str) -> Resolution:
        regs = self.registries
        if name in regs.operators:
            return self._ok(name, "workload", regs.operators[name])
        if name in regs.unavailable_operators:
            return _refusal(f"operator {name!r} is unavailable: {regs.unavailable_operators[name]}")
        if name.startswith("aten::"):
            return self._resolve_aten(name)
        if name == "torch" or name.startswith("torch."):
            return self._resolve_torch(name)
        failed = "".join(f"; workload {module} failed to load ({why})"
                         for module, why in regs.failed_workloads.items())
        return _refusal(f"unknown operator {name!r}{failed}",
                        did_you_mean(name, list(regs.operators)) or f"operators are {ALLOWED_FORMS}")

    def _resolve_aten(self, name: str) -> Resolution:
        match = _ATEN_NAME.match(name)
        if not match:
            return _refusal(f"malformed aten operator name {name!r}", "write aten::name or "
                            "aten::name.overload, e.g. aten::add.Tensor")
        base = match.group(1)
        if base.startswith("_") or base in REFUSED_ATEN_NAMES:
            return _refusal(f"operator {name!r} is refused: it is private or touches files")
        try:
            packet = getattr(torch.ops.aten, base)
        except (AttributeError, RuntimeError):
            return _refusal(f"unknown aten operator {name!r}",
                            did_you_mean(base, dir(torch.ops.aten)))
        if match.group(2):
            overload = match.group(2)[1:]
            if overload not in packet.overloads():
                return _refusal(f"aten::{base} has no overload {overload!r}",
                                f"overloads: {', '.join(packet.overloads())}")
        return self._ok(name, "aten", partial(AtenOperator, name))

    def _resolve_torch(self, name: str) -> Resolution:
        parts = name.split(".")
        private = [p for p in parts if p.startswith("_") or not p]
        if private:
            return _refusal(f"operator {name!r} is refused: private and dunder attributes are "
                            "not reachable from a spec")
        namespace_name, attr = ".".join(parts[:-1]), parts[-1]
        if namespace_name == "torch.nn":
            module_class = getattr(torch.nn, attr, None)
            if inspect.isclass(module_class) and issubclass(module_class, torch.nn.Module):
                return self._ok(name, "module", partial(ModuleOperator, module_class))
            module_classes = [n for n in _public_names(torch.nn)
                              if inspect.isclass(getattr(torch.nn, n))
                              and issubclass(getattr(torch.nn, n), torch.nn.Module)]
            return _refusal(f"{name!r} is not a torch.nn Module class",
                            did_you_mean(attr, module_classes) or "name a Module class such as "
                            "torch.nn.Linear; functions are in torch.nn.functional")
        namespace = FUNCTION_NAMESPACES.get(namespace_name)
        if namespace is None:
            return _refusal(f"{namespace_name!r} is not an operator namespace",
                            f"operators are {ALLOWED_FORMS}")
        if attr in REFUSED_TORCH_NAMES or (attr.startswith(REFUSED_TORCH_PREFIXES)
                                           and attr != "set_"):
            return _refusal(f"operator {name!r} is refused: it reads or writes files, loads code "
                            "or changes process-wide state")
        if namespace is torch and attr.endswith("_") and callable(getattr(torch.Tensor, attr,
                                                                          None)):
            # PARAM's in-place names: torch.add_ means Tensor.add_ (torch.relu_ and a few others
            # also exist as functions; either way the op is in-place).
            return self._ok(name, "inplace", partial(InplaceMethodOperator, attr))
        target = getattr(namespace, attr, None)
        if target is None:
            return _refusal(f"unknown operator {name!r}: {namespace_name} has no {attr!r}",
                            did_you_mean(attr, _public_names(namespace)))
        if isinstance(target, types.ModuleType) or inspect.isclass(target) or not callable(target):
            return _refusal(f"{name!r} is not an operator function",
                            "name a function; modules and classes are not operators")
        return self._ok(name, "function", partial(CallableOperator, target))


def check_aten_schema(op_name: str, schema: object) -> Optional[str]:
    """What is wrong with an aten schema string given in build args, or None."""
    if not isinstance(schema, str):
        return f"an aten schema is a string, got {type(schema).__name__}"
    try:
        parsed = torch._C.parse_schema(schema)
    except RuntimeError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else "parse error"
        return f"aten schema does not parse: {first_line}"
    base = aten_base_name(op_name)
    if parsed.name != f"aten::{base}":
        return f"schema is for {parsed.name}, not aten::{base}"
    overload = aten_overload_name(op_name, schema)
    packet = getattr(torch.ops.aten, base, None)
    if packet is not None and overload not in packet.overloads():
        return f"aten::{base} has no overload {overload!r}"
    return None

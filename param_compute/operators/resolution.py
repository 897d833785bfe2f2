"""Operator-name resolution: what a spec's operator name may run, and nothing else.

In order: registered workloads; callables of torch's operator namespaces by dotted name
(``torch.X``, ``torch.nn.functional.X``, ``torch.special.X``, ``torch.linalg.X``, ``torch.fft.X``),
``torch.nn`` Module classes, PARAM's in-place names (``torch.add_`` -> ``Tensor.add_``); then
``aten::name(.overload)`` through ``torch.ops.aten``; ``graph::NAME``, a captured graph the engine
binds to the spec's ``__graphs__`` (``operators.graphs``). A spec is data: names are looked up in the
dict of an allowed namespace (statically: no module ``__getattr__`` runs, so nothing is imported
or called by a lookup), never imported or evaluated; private and dunder names are unreachable.

Functions that touch files, the network or processes, load code, or change process-wide state are
refused whatever path reaches them: by name (``REFUSED_TORCH_NAMES``), by identity (an alias or
re-export of a refused function, or of any function defined in a refused module, is refused under
every name), and by where they are defined (``REFUSED_MODULES``; anything not defined in torch).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import sys
import types
from functools import lru_cache, partial
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from param_compute.errors import did_you_mean
from param_compute.plugins.interfaces import OperatorInterface
from param_compute.plugins.registry import Registries
from param_compute.operators.adapters import (AtenOperator, CallableOperator, InplaceMethodOperator,
                                              ModuleOperator)
from param_compute.operators.collectives import FRIENDLY_PREFIX, kind_of, known_names
from param_compute.operators.names import (TORCH_NAMESPACES, aten_base_name, aten_overload_name,
                                           op_namespace)
from param_compute.spec.graphs import GRAPH_PREFIX, graph_name
from param_compute.spec.model import Resolution

FUNCTION_NAMESPACES = {
    "torch": torch,
    "torch.nn.functional": torch.nn.functional,
    "torch.special": torch.special,
    "torch.linalg": torch.linalg,
    "torch.fft": torch.fft,
}

# Functions of ``torch`` that read or write files, load code, or change process-wide state: refused
# whatever else the spec says (and so is the same object under any other name).
REFUSED_TORCH_NAMES = frozenset({
    "get_device_module",  # getattr(torch, a string): imports torch's lazy modules
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
#: aten operators refused: file access, printing, process-wide caches. Other internal (``_``)
#: aten operators resolve: they are what execution traces and captures record
#: (``aten::_softmax``, ``aten::_unsafe_view``...); dunder names never do.
REFUSED_ATEN_NAMES = frozenset({"save", "load", "from_file", "_save_for_lite_interpreter",
                                "_print", "_cufft_clear_plan_cache",
                                "_cufft_set_plan_cache_max_size",
                                # process-wide state, printing, futures
                                "manual_seed", "seed", "initial_seed", "set_grad_enabled", "warn",
                                "wait"})
#: PARAM in-place names (``torch.X_`` -> ``Tensor.X_``) refused: ``share_memory_`` moves the
#: storage into shared memory (a file in /dev/shm or a file descriptor passed between processes).
REFUSED_INPLACE_NAMES = frozenset({"share_memory_"})
#: Modules (and their submodules) whose functions and classes are refused under any name: files,
#: network, processes, code loading and compilation, process-wide state (seeds, print options),
#: higher-order functions that take Python callables. Anything defined outside ``torch`` is
#: refused too (``os``, ``subprocess``, ``io``, ``pickle``, ``importlib``, ``builtins``...).
REFUSED_MODULES = (
    "torch.serialization", "torch.hub", "torch.jit", "torch._jit_internal", "torch.package",
    "torch.utils.cpp_extension", "torch.utils.file_baton", "torch.utils.data",
    "torch.utils.tensorboard", "torch.utils.model_zoo", "torch.multiprocessing",
    "torch.distributed", "torch._utils_internal", "torch._utils", "torch.random",
    "torch._tensor_str", "torch.func", "torch._functorch", "torch._higher_order_ops",
    "torch.compiler", "torch._dynamo", "torch._inductor", "torch.export", "torch._export",
    "torch.onnx", "torch.library", "torch._library", "torch.profiler", "torch.autograd.profiler",
    "torch.backends", "torch.overrides", "torch.testing", "torch.fx", "torch._C._distributed_c10d",
    "torch._C._distributed_rpc", "torch._C._distributed_autograd",
    "torch._classes", "torch.classes", "torch.cuda", "torch.mps", "torch.xpu", "torch.mtia",
)
#: Modules outside torch scanned for functions refused by identity (the module rule refuses
#: whatever they define anyway; identity also catches a torch name bound to one of them).
_REFUSED_OUTSIDE_TORCH = (
    "builtins", "os", "posix", "nt", "subprocess", "io", "_io", "pickle", "_pickle", "marshal",
    "importlib", "runpy", "shutil", "socket", "ssl", "ctypes", "sys", "pathlib", "tempfile",
    "urllib", "http", "ftplib", "multiprocessing", "signal", "pty", "code", "codeop",
    "webbrowser", "zipimport", "shelve", "dbm",
)
_FUNCTION_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                   types.MethodDescriptorType, types.WrapperDescriptorType,
                   types.MethodWrapperType, types.ClassMethodDescriptorType, functools.partial,
                   type(functools.lru_cache()(len)))

_ATEN_NAME = re.compile(r"^aten::([A-Za-z_][A-Za-z0-9_]*)(\.[A-Za-z0-9_]+)?$")
#: ``ns::op[.overload]`` of another operator namespace (resolved only where the run allows it).
_NS_NAME = re.compile(r"^([a-z_][a-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)(\.[A-Za-z0-9_]+)?$")
ALLOWED_FORMS = ("registered workloads, torch.X, torch.nn.functional.X, torch.special.X, "
                 "torch.linalg.X, torch.fft.X, torch.nn.<Module>, aten::name[.overload], "
                 "graph::NAME")


def _refusal(reason: str, hint: Optional[str] = None) -> Resolution:
    return Resolution(False, reason=reason, hint=hint)


def _public_names(namespace) -> List[str]:
    return [n for n in vars(namespace) if not n.startswith("_")]


def _in_modules(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _is_function(obj: Any) -> bool:
    # By type only: isinstance() may ask a proxy object for __class__ and run its code.
    return issubclass(type(obj), _FUNCTION_TYPES)


def _defined_in(obj: Any) -> Optional[str]:
    module = getattr(obj, "__module__", None)
    return module if isinstance(module, str) else None


def _unwrapped(obj: Any) -> List[Any]:
    """``obj`` and what it wraps (``functools.wraps``' ``__wrapped__``, a partial's ``func``)."""
    chain = [obj]
    for _ in range(8):
        inner = (obj.func if isinstance(obj, functools.partial)
                 else getattr(obj, "__wrapped__", None) if _is_function(obj) else None)
        if inner is None or any(inner is seen for seen in chain):
            break
        chain.append(inner)
        obj = inner
    return chain


@functools.lru_cache(maxsize=None)
def _refused_module_name(module_name: str, outside_torch: bool = False) -> bool:
    """Whether a module of this name is refused (with ``outside_torch``: or is not torch's, so a
    function defined there is refused however it is reached). A pure function of its arguments:
    asked once per module per process, not per toolchain or per function."""
    return (_in_modules(module_name, REFUSED_MODULES)
            or _in_modules(module_name, _REFUSED_OUTSIDE_TORCH)
            or (outside_torch and not _in_modules(module_name, ("torch",))))


def refused_objects() -> Dict[int, Tuple[Any, str]]:
    """``id -> (object, name)`` of every function refused by identity: what a refused name binds
    in ``torch``, and each function that a refused module (already imported: an
    object of a module never imported cannot be reached) defines."""
    refused: Dict[int, Tuple[Any, str]] = {}
    for name in REFUSED_TORCH_NAMES:
        obj = vars(torch).get(name)
        if obj is not None and (_is_function(obj) or inspect.isclass(obj)):
            refused[id(obj)] = (obj, f"torch.{name}")
    for module_name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or not _refused_module_name(module_name):
            continue
        for name, obj in list(vars(module).items()):
            if not _is_function(obj):
                continue
            if _refused_module_name(_defined_in(obj) or module_name, True):
                refused.setdefault(id(obj), (obj, f"{module_name}.{name}"))
    return refused


def module_refusal(obj: Any) -> Optional[str]:
    """Why a callable reached from an allowed namespace is refused by where it is defined."""
    module = _defined_in(obj)
    if module is None or not _in_modules(module, ("torch",)):
        return f"it is defined outside torch (in {module or 'an unknown module'})"
    if _in_modules(module, REFUSED_MODULES):
        return (f"it is defined in {module} (files, processes, code loading or process-wide "
                "state)")
    return None


class OperatorResolver:
    """Resolves operator names against the registries and torch, caching per name."""

    def __init__(self, registries: Registries):
        self.registries = registries
        self.allow_namespaces: frozenset = frozenset()  # besides aten, set by the run only
        self._factories: Dict[str, Callable[[], OperatorInterface]] = {}
        self._resolutions: Dict[str, Resolution] = {}
        self._refused = refused_objects()

    def refusal(self, name: str, target: Any) -> Optional[Resolution]:
        """A refusal if ``target`` (or what it wraps) is a refused function under another name, or
        is defined where nothing is allowed; None if it may run."""
        for obj in _unwrapped(target):
            known = self._refused.get(id(obj))
            if known is not None and known[0] is obj:
                return _refusal(f"operator {name!r} is refused: it is {known[1]}",
                                "functions touching files, the network or processes, loading "
                                "code or changing process-wide state are not reachable from a "
                                "spec under any name")
            why = module_refusal(obj)
            if why:
                return _refusal(f"operator {name!r} is refused: {why}")
        return None

    def allow(self, namespaces) -> None:
        """Let ``ns::op`` names of these namespaces resolve (``--allow-namespace``): a run's
        choice, never a spec's."""
        self.allow_namespaces = frozenset(namespaces)
        for name in [n for n in self._resolutions if _NS_NAME.match(n)]:
            del self._resolutions[name]

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
        collective = self._resolve_collective(name)
        if collective is not None:
            return collective
        if name.startswith("aten::"):
            return self._resolve_aten(name)
        if name.startswith(GRAPH_PREFIX):
            return self._resolve_graph(name)
        if name == "torch" or name.startswith("torch."):
            return self._resolve_torch(name)
        if _NS_NAME.match(name):
            return self._resolve_namespace(name)
        failed = "".join(f"; workload {module} failed to load ({why})"
                         for module, why in regs.failed_workloads.items())
        return _refusal(f"unknown operator {name!r}{failed}",
                        did_you_mean(name, list(regs.operators))
                        or f"operators are {ALLOWED_FORMS}")

    def _resolve_collective(self, name: str) -> Optional[Resolution]:
        """A collective (``c10d::allreduce_``, ``torch.distributed.all_reduce``, ...): a row of
        ``operators.collectives``' fixed table, run by ``CollectiveOperator``; another name in
        those namespaces is refused naming the known ones; None for any other name."""
        kind = kind_of(name)
        if kind is not None:
            from param_compute.operators.collective_ops import CollectiveOperator

            return self._ok(name, "collective", partial(CollectiveOperator, kind.name))
        if name.startswith(("c10d::", "_c10d_functional::", FRIENDLY_PREFIX)):
            shown = known_names()
            return _refusal(f"{name!r} is no collective param_compute replays",
                            did_you_mean(name, list(shown)) or "collectives: "
                            + ", ".join(shown))
        return None

    def _resolve_aten(self, name: str) -> Resolution:
        _, refusal = aten_packet(name)
        if refusal is not None:
            return refusal
        return self._ok(name, "aten", partial(AtenOperator, name))

    def _resolve_graph(self, name: str) -> Resolution:
        """``graph::NAME``: a captured graph of the spec's ``__graphs__``, replayed as one
        call; the engine binds it to its graph (``operators.graphs``), never the name."""
        if graph_name(name) is None:
            return _refusal(f"malformed graph operator name {name!r}",
                            "write graph::NAME, NAME a graph of the spec's __graphs__")
        return self._ok(name, "graph", partial(_unbound_graph, name))

    def _resolve_namespace(self, name: str) -> Resolution:
        """``ns::op[.overload]`` of a namespace besides aten (``fbgemm::...``): only where the
        run allows that namespace, through ``torch.ops.ns`` (its library loaded first)."""
        match = _NS_NAME.match(name)
        namespace, base, overload = match.group(1), match.group(2), match.group(3)
        if namespace not in self.allow_namespaces and namespace not in TORCH_NAMESPACES:
            return _refusal(f"operator {name!r} is in namespace {namespace}::, which only the "
                            f"run can allow: pass --allow-namespace {namespace}",
                            "a spec cannot allow a namespace itself")
        if base.startswith("__"):
            return _refusal(f"operator {name!r} is refused: dunder names are not reachable")
        problem = load_namespace(namespace)
        try:
            packet = getattr(getattr(torch.ops, namespace), base)
            overloads = packet.overloads()
        except (AttributeError, RuntimeError):
            return _refusal(f"unknown operator {name!r}" + (f" ({problem})" if problem else ""))
        if overload and overload[1:] not in overloads:
            return _refusal(f"{namespace}::{base} has no overload {overload[1:]!r}",
                            f"overloads: {', '.join(overloads)}")
        return self._ok(name, "aten", partial(AtenOperator, name))

    def _resolve_torch(self, name: str) -> Resolution:
        parts = name.split(".")
        if len(parts) < 2:
            return _refusal(f"{name!r} is a namespace, not an operator",
                            f"operators are {ALLOWED_FORMS}")
        if not all(p.isascii() and p.isidentifier() for p in parts):
            return _refusal(f"operator name {name!r} is not a dotted name",
                            "write torch.X, torch.nn.functional.X, ... (letters, digits, _)")
        private = [p for p in parts if p.startswith("_")]
        if private:
            return _refusal(f"operator {name!r} is refused: private and dunder attributes are "
                            "not reachable from a spec")
        namespace_name, attr = ".".join(parts[:-1]), parts[-1]
        if namespace_name == "torch.nn":
            module_class = vars(torch.nn).get(attr)
            if inspect.isclass(module_class) and issubclass(module_class, torch.nn.Module):
                refused = self.refusal(name, module_class)
                if refused:
                    return refused
                return self._ok(name, "module", partial(ModuleOperator, module_class))
            module_classes = [n for n, v in vars(torch.nn).items()
                              if not n.startswith("_") and inspect.isclass(v)
                              and issubclass(v, torch.nn.Module)]
            return _refusal(f"{name!r} is not a torch.nn Module class",
                            did_you_mean(attr, module_classes) or "name a Module class such as "
                            "torch.nn.Linear; functions are in torch.nn.functional")
        namespace = FUNCTION_NAMESPACES.get(namespace_name)
        if namespace is None:
            return _refusal(f"{namespace_name!r} is not an operator namespace",
                            f"operators are {ALLOWED_FORMS}")
        # Names are refused in torch's own namespace (torch.cond, torch.load...): elsewhere the
        # same name may be an operator (torch.linalg.cond); identity refuses aliases there.
        if (namespace is torch and attr in REFUSED_TORCH_NAMES) or (
                attr.startswith(REFUSED_TORCH_PREFIXES) and attr != "set_"):
            return _refusal(f"operator {name!r} is refused: it reads or writes files, loads code "
                            "or changes process-wide state")
        if attr in REFUSED_INPLACE_NAMES:
            return _refusal(f"operator {name!r} is refused: it moves memory between processes")
        if namespace is torch and attr.endswith("_") and callable(getattr(torch.Tensor, attr,
                                                                          None)):
            # PARAM's in-place names: torch.add_ means Tensor.add_ (torch.relu_ and a few others
            # also exist as functions; either way the op is in-place).
            return self._ok(name, "inplace", partial(InplaceMethodOperator, attr))
        # Static lookup: getattr would run torch's module __getattr__, which imports its lazy
        # submodules (torch.onnx, torch._dynamo...) and calls deprecated attributes' functions.
        target = vars(namespace).get(attr)
        if target is None and namespace is torch and attr in getattr(torch, "_lazy_modules", ()):
            # A submodule torch imports on first access: the same answer whether it has been
            # imported yet or not.
            target = types.ModuleType(f"torch.{attr}")
        if target is None:
            return _refusal(f"unknown operator {name!r}: {namespace_name} has no {attr!r}",
                            did_you_mean(attr, _public_names(namespace)))
        if isinstance(target, types.ModuleType) or inspect.isclass(target) or not callable(target):
            return _refusal(f"{name!r} is not an operator function",
                            "name a function; modules and classes are not operators")
        refused = self.refusal(name, target)
        if refused:
            return refused
        return self._ok(name, "function", partial(CallableOperator, target))


def aten_packet(name: str) -> Tuple[Any, Optional[Resolution]]:
    """(the ``OpOverloadPacket`` of ``aten::name[.overload]``, None), or (None, the refusal):
    the rules every spec's aten name is held to (malformed, refused, unknown, no such
    overload), looked up by exact name."""
    match = _ATEN_NAME.match(name)
    if not match:
        return None, _refusal(f"malformed aten operator name {name!r}", "write aten::name or "
                              "aten::name.overload, e.g. aten::add.Tensor")
    base = match.group(1)
    if base.startswith("__") or base in REFUSED_ATEN_NAMES:
        return None, _refusal(f"operator {name!r} is refused: dunder names, file access and "
                              "process-wide state are not reachable from a spec")
    try:
        packet = getattr(torch.ops.aten, base)
    except (AttributeError, RuntimeError):
        packet = None
    # The namespace object has attributes of its own (name, _dir, ...): only operators count.
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        attributes = vars(torch.ops.aten)
        known = [n for n in dir(torch.ops.aten) if not n.startswith("__") and (
            n not in attributes or isinstance(attributes[n], torch._ops.OpOverloadPacket))]
        return None, _refusal(f"unknown aten operator {name!r}", did_you_mean(base, known))
    if match.group(2):
        overload = match.group(2)[1:]
        if overload not in packet.overloads():
            return None, _refusal(f"aten::{base} has no overload {overload!r}",
                                  f"overloads: {', '.join(packet.overloads())}")
    return packet, None


def _unbound_graph(name: str) -> OperatorInterface:
    """A ``graph::NAME`` asked for outside a spec holding its graph (the engine binds each
    one to its spec's ``__graphs__``: ``operators.graphs.graph_factory``)."""
    raise KeyError(f"operator {name!r} replays a graph of a spec's __graphs__; this run has "
                   "none by that name")


#: Namespaces whose operators a library registers when imported.
NAMESPACE_LIBRARIES = {"fbgemm": "fbgemm_gpu", "fsdp": "torch.distributed.fsdp",
                       "torchvision": "torchvision",
                       "torchaudio": "torchaudio", "torchrec": "torchrec"}


@lru_cache(maxsize=64)
def load_namespace(namespace: str) -> Optional[str]:
    """Import the library registering ``namespace``'s operators, if one is known; why it did
    not load, else None."""
    module = NAMESPACE_LIBRARIES.get(namespace)
    if module is None:
        return None
    try:
        importlib.import_module(module)
    except Exception as exc:  # a missing or broken library: its ops are then unknown
        return f"{module} did not load: {type(exc).__name__}: {exc}"
    return None


def check_aten_schema(op_name: str, schema: object) -> Optional[str]:
    """What is wrong with an aten schema string given in build args, or None."""
    if not isinstance(schema, str):
        return f"an aten schema is a string, got {type(schema).__name__}"
    try:
        parsed = torch._C.parse_schema(schema)
    except (RuntimeError, TypeError, ValueError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else "parse error"
        return f"aten schema does not parse: {first_line}"
    base = aten_base_name(op_name)
    namespace = op_namespace(op_name)
    if parsed.name != f"{namespace}::{base}":
        return f"schema is for {parsed.name}, not {namespace}::{base}"
    overload = aten_overload_name(op_name, schema)
    packet = getattr(getattr(torch.ops, namespace), base, None)
    if packet is not None and overload not in packet.overloads():
        return f"{namespace}::{base} has no overload {overload!r}"
    return None

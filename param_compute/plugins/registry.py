"""Plugin registries: the tables a toolchain resolves names in, and the ``register_*`` calls.

Registries hold *factories*, never operator objects: the engine creates a fresh operator per build
config, so no mutable state is shared between runs. Each toolchain owns its ``Registries``; while
it loads plugins (``filling``), module-level ``register_*`` calls go to its tables, and
``recording`` keeps a copy of them so a module Python imported once can be replayed into a later
toolchain. Calls made outside any loading (a script registering its own operators before
``param_compute.run``) are kept process-wide and given to every toolchain started afterwards.

A name registered twice is an error, except a built-in one (registered while the loader fills
the built-ins): a plugin registering it replaces the built-in entry, and the loader warns.
Iterators and data generators may declare the extra spec keys they read (``spec_keys``, a
dict key -> what it means); validation then accepts those keys where they can read them. A
plugin's iterator or generator that declares nothing (PARAM's never do) may read any key where
it reads: validation accepts unknown keys there, with one warning naming them.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import sys
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from param_compute.plugins.interfaces import OperatorInterface

log = logging.getLogger("param_compute")

OperatorFactory = Callable[[], OperatorInterface]
#: One ``register_*`` call: the kind of table and the call's arguments, as given.
Registration = Tuple[str, tuple]


@dataclass
class Registries:
    operators: Dict[str, OperatorFactory] = field(default_factory=dict)
    config_iterators: Dict[str, type] = field(default_factory=dict)
    data_generators: Dict[str, Callable[[], Any]] = field(default_factory=dict)
    # Operator name -> why it is unavailable (its workload could not load an optional dependency).
    unavailable_operators: Dict[str, str] = field(default_factory=dict)
    # Workload module -> why it failed to import.
    failed_workloads: Dict[str, str] = field(default_factory=dict)
    #: The ``--workloads-dir`` folders loaded into these tables, in order.
    workloads_dirs: List[Path] = field(default_factory=list)
    #: True while the loader registers the built-ins; (kind, name) of each built-in entry.
    loading_builtins: bool = False
    builtin_names: Set[Tuple[str, str]] = field(default_factory=set)
    #: (kind, name) of the built-in entries replaced since the loader last looked.
    replaced: List[Tuple[str, str]] = field(default_factory=list)

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the tables back as they are now (a failed plugin's
        registrations undone); the tables stay the same objects."""
        saved = {name: copy.copy(getattr(self, name)) for name in _ROLLED_BACK}

        def rollback() -> None:
            for name, before in saved.items():
                table = getattr(self, name)
                table.clear()
                (table.extend if isinstance(table, list) else table.update)(before)

        return rollback

    def _readers(self, operator: Any, where: Tuple[Any, ...]) -> List[Tuple[str, str, Any]]:
        """(table, name, entry) of each plugin that reads the object at ``where`` inside an
        operator entry (a JSON path ending at the object holding the keys).

        An iterator reads its config entry (build iterators get it whole) and its section's
        arg-spec-lists; a data generator reads its section's arg-spec-lists and their data
        specs (at any depth)."""
        if not isinstance(operator, dict) or len(where) < 2 or where[0] != "config":
            return []
        if len(where) == 2:
            holders = [("config_iterators", "build_iterator"),
                       ("config_iterators", "input_iterator")]
        elif where[2] not in ("build", "input"):
            return []
        else:
            holders = [("data_generators", f"{where[2]}_data_generator")]
            if len(where) == 4:
                holders.append(("config_iterators", f"{where[2]}_iterator"))
        readers = []
        for table, key in holders:
            name = operator.get(key)
            name = _DEFAULTS[key] if name is None else name
            if isinstance(name, str):
                readers.append((table, name, getattr(self, table).get(name)))
        return readers

    def declared_keys(self, operator: Any, where: Tuple[Any, ...]) -> Dict[str, str]:
        """The extra keys the plugins an operator entry names declare at ``where``: key -> what
        it means (iterator keys in config entries and arg-spec-lists, generator keys in
        arg-spec-lists and data specs)."""
        declared: Dict[str, str] = {}
        for _table, name, entry in self._readers(operator, where):
            for spec_key, meaning in declared_spec_keys(entry).items():
                declared.setdefault(spec_key, f"{meaning} (read by {name})")
        return declared

    def undeclared_readers(self, operator: Any, where: Tuple[Any, ...]) -> List[str]:
        """The registered plugin iterators and data generators (not built-in ones) that read
        the object at ``where`` without declaring the keys they read (no ``spec_keys``), as
        PARAM's plugins never do: any key there may be theirs."""
        kinds = {"config_iterators": "config iterator", "data_generators": "data generator"}
        return [name for table, name, entry in self._readers(operator, where)
                if entry is not None and getattr(entry, "spec_keys", None) is None
                and (kinds[table], name) not in self.builtin_names]

    def declares_key(self, operator: Any, path: Tuple[Any, ...]) -> bool:
        """True if ``path[-1]`` is a key the plugins of ``operator`` declare at ``path[:-1]``."""
        return bool(path) and path[-1] in self.declared_keys(operator, tuple(path[:-1]))


#: The tables a plugin's registrations change (``Registries.checkpoint``).
_ROLLED_BACK = ("operators", "config_iterators", "data_generators", "unavailable_operators",
                "builtin_names", "replaced")

_DEFAULTS = {"build_iterator": "DefaultConfigIterator", "input_iterator": "DefaultConfigIterator",
             "build_data_generator": "PyTorch:DefaultDataGenerator",
             "input_data_generator": "PyTorch:DefaultDataGenerator"}


def declared_spec_keys(entry: Any) -> Dict[str, str]:
    """An iterator's or generator's ``spec_keys`` (key -> what it means), checked."""
    keys = getattr(entry, "spec_keys", None)
    if not isinstance(keys, dict):
        return {}
    return {key: str(meaning) for key, meaning in keys.items() if isinstance(key, str) and key}


#: The registries a toolchain is filling right now (None: no toolchain is loading plugins).
_TARGET: ContextVar[Optional[Registries]] = ContextVar("param_compute_registries", default=None)
#: Where the registrations of the plugin source being imported are copied (None: not recording).
_RECORDING: ContextVar[Optional[List[Registration]]] = ContextVar("param_compute_recording",
                                                                  default=None)
#: Registrations made outside any toolchain's loading, checked for duplicates among themselves.
_PROCESS_TABLES = Registries()
_PROCESS_LOG: List[Registration] = []
#: ids of the logged registrations a built-in workload module made (imported by a script, as
#: PARAM's ``load_modules(workloads.pytorch)`` does): built-in entries in every toolchain.
_BUILTIN_LOGGED: Set[int] = set()
_BUILTIN_PACKAGE = "param_compute.workloads"


def describe_entries(table: Dict[str, Any]) -> List[str]:
    """Each entry's name, sorted, with the extra spec keys it declares (for ``--list-ops``)."""
    described = []
    for name in sorted(table):
        keys = declared_spec_keys(table[name])
        reads = "; ".join(f"{key}: {meaning}" for key, meaning in keys.items())
        described.append(f"{name} (reads {reads})" if keys else name)
    return described


def _operator_factory(name: str, operator: Any) -> OperatorFactory:
    if inspect.isclass(operator):
        if not issubclass(operator, OperatorInterface):
            raise TypeError(f"operator {name!r}: {operator.__name__} does not derive from "
                            "param_compute.OperatorInterface")
        return operator
    if isinstance(operator, OperatorInterface):
        # PARAM registers ready-made operator objects; copy the prototype for every build so
        # that no state leaks from one run into the next.
        prototype = operator
        return lambda: copy.deepcopy(prototype)
    if callable(operator):
        return operator
    raise TypeError(f"operator {name!r}: expected an OperatorInterface subclass, instance or "
                    f"factory, got {type(operator).__name__}")


def _check_new(regs: Registries, kind: str, table: Dict[str, Any], name: str) -> None:
    """Refuse a bad or duplicate name; a built-in entry may be replaced (noted in
    ``regs.replaced`` for the loader's warning), once."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} name must be a non-empty string, got {name!r}")
    if name in table:
        if (kind, name) in regs.builtin_names and not regs.loading_builtins:
            regs.builtin_names.discard((kind, name))
            regs.replaced.append((kind, name))
            return
        raise ValueError(f"duplicate {kind} registration: {name!r} is already registered")
    if regs.loading_builtins:
        regs.builtin_names.add((kind, name))


def _add_operator(regs: Registries, name: str, operator: Any) -> None:
    factory = _operator_factory(name, operator)
    _check_new(regs, "operator", regs.operators, name)
    regs.operators[name] = factory
    regs.unavailable_operators.pop(name, None)


def _add_config_iterator(regs: Registries, name: str, iterator_class: type) -> None:
    _check_new(regs, "config iterator", regs.config_iterators, name)
    regs.config_iterators[name] = iterator_class


def _add_data_generator(regs: Registries, name: str, generator_class: Callable[[], Any]) -> None:
    _check_new(regs, "data generator", regs.data_generators, name)
    regs.data_generators[name] = generator_class


def _add_unavailable(regs: Registries, names: Tuple[str, ...], reason: str) -> None:
    for name in names:
        if name not in regs.operators:
            regs.unavailable_operators[name] = reason
    log.warning("workload operators unavailable: %s (%s)", ", ".join(names), reason)


_APPLY = {"operator": _add_operator, "config iterator": _add_config_iterator,
          "data generator": _add_data_generator, "unavailable": _add_unavailable}


def _from_builtin_module() -> bool:
    """True if the ``register_*`` call being made comes from a built-in workload module."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name == _BUILTIN_PACKAGE or name.startswith(_BUILTIN_PACKAGE + ".")


def _register(kind: str, *args: Any) -> None:
    target = _TARGET.get()
    if target is None:
        builtin = _from_builtin_module()
        _PROCESS_TABLES.loading_builtins = builtin
        try:
            _APPLY[kind](_PROCESS_TABLES, *args)
        finally:
            _PROCESS_TABLES.loading_builtins = False
            _PROCESS_TABLES.replaced.clear()
        registration = (kind, args)
        _PROCESS_LOG.append(registration)
        if builtin:
            _BUILTIN_LOGGED.add(id(registration))
    else:
        _APPLY[kind](target, *args)
    recording = _RECORDING.get()
    if recording is not None:
        recording.append((kind, args))


def register_operator(name: str, operator: Any) -> None:
    """Register an operator class (or factory, or PARAM-style prototype object) under ``name``."""
    _register("operator", name, operator)


def register_operators(operators: Dict[str, Any]) -> None:
    for name, operator in operators.items():
        register_operator(name, operator)


def register_config_iterator(name: str, iterator_class: type) -> None:
    _register("config iterator", name, iterator_class)


def register_data_generator(name: str, generator_class: Callable[[], Any]) -> None:
    """Register a data generator class (or a factory returning a generator) under ``name``."""
    _register("data generator", name, generator_class)


def register_unavailable_operators(names: Iterable[str], reason: str) -> None:
    """Declare operators a workload would provide but cannot (an optional dependency is missing).

    A spec using one then fails validation with ``reason`` instead of "unknown operator".
    """
    _register("unavailable", tuple(names), reason)


def replay(registrations: Iterable[Registration], registries: Registries) -> None:
    """Apply recorded ``register_*`` calls to ``registries``, in their order."""
    for kind, args in registrations:
        _APPLY[kind](registries, *args)


def process_registrations(builtin: Optional[bool] = None) -> List[Registration]:
    """The registrations made outside any toolchain's loading, in order (``builtin``: only
    those of built-in workload modules, or only the others)."""
    return [registration for registration in _PROCESS_LOG
            if builtin is None or (id(registration) in _BUILTIN_LOGGED) == builtin]


@contextlib.contextmanager
def filling(registries: Registries) -> Iterator[Registries]:
    """Send the ``register_*`` calls made inside the block (by this thread) to ``registries``."""
    token = _TARGET.set(registries)
    try:
        yield registries
    finally:
        _TARGET.reset(token)


@contextlib.contextmanager
def recording() -> Iterator[List[Registration]]:
    """Copy the ``register_*`` calls made inside the block into the list it yields."""
    registrations: List[Registration] = []
    token = _RECORDING.set(registrations)
    try:
        yield registrations
    finally:
        _RECORDING.reset(token)

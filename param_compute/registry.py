"""Registries of operators, config iterators and data generators, filled once at start-up.

Registries hold *factories*, never operator objects: the engine creates a fresh operator per build
config, so no mutable state is shared between runs. ``load_plugins`` fills them from, in order:
the built-in iterators and generator, the built-in workloads (``param_compute.workloads``), the
``param_compute.workloads`` entry-point group, and every ``.py`` file of each ``--workloads-dir``.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import logging
import pkgutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional

from .interfaces import OperatorInterface

log = logging.getLogger("param_compute")

OperatorFactory = Callable[[], OperatorInterface]


@dataclass
class Registries:
    operators: Dict[str, OperatorFactory] = field(default_factory=dict)
    config_iterators: Dict[str, type] = field(default_factory=dict)
    data_generators: Dict[str, type] = field(default_factory=dict)
    # Operator name -> why it is unavailable (its workload could not load an optional dependency).
    unavailable_operators: Dict[str, str] = field(default_factory=dict)
    # Workload module -> why it failed to import.
    failed_workloads: Dict[str, str] = field(default_factory=dict)
    loaded_sources: set = field(default_factory=set)


REGISTRIES = Registries()


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


def _check_new(kind: str, table: Dict[str, Any], name: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} name must be a non-empty string, got {name!r}")
    if name in table:
        raise ValueError(f"duplicate {kind} registration: {name!r} is already registered")


def register_operator(name: str, operator: Any) -> None:
    """Register an operator class (or factory, or PARAM-style prototype object) under ``name``."""
    _check_new("operator", REGISTRIES.operators, name)
    REGISTRIES.operators[name] = _operator_factory(name, operator)
    REGISTRIES.unavailable_operators.pop(name, None)


def register_operators(operators: Dict[str, Any]) -> None:
    for name, operator in operators.items():
        register_operator(name, operator)


def register_config_iterator(name: str, iterator_class: type) -> None:
    _check_new("config iterator", REGISTRIES.config_iterators, name)
    REGISTRIES.config_iterators[name] = iterator_class


def register_data_generator(name: str, generator_class: type) -> None:
    _check_new("data generator", REGISTRIES.data_generators, name)
    REGISTRIES.data_generators[name] = generator_class


def register_unavailable_operators(names: Iterable[str], reason: str) -> None:
    """Declare operators a workload would provide but cannot (an optional dependency is missing).

    A spec using one then fails validation with ``reason`` instead of "unknown operator".
    """
    for name in names:
        if name not in REGISTRIES.operators:
            REGISTRIES.unavailable_operators[name] = reason
    log.warning("workload operators unavailable: %s (%s)", ", ".join(names), reason)


def _import_module_guarded(module_name: str, importer: Callable[[], Any]) -> None:
    try:
        importer()
    except ImportError as exc:  # a missing optional dependency: skip the module, say so once
        missing = getattr(exc, "name", None) or str(exc)
        REGISTRIES.failed_workloads[module_name] = f"missing module {missing!r}: {exc}"
        log.warning("workload module %s skipped: missing module %r", module_name, missing)
    except Exception as exc:  # a broken plugin must not take the engine down
        REGISTRIES.failed_workloads[module_name] = f"{type(exc).__name__}: {exc}"
        log.warning("workload module %s skipped: %s: %s", module_name, type(exc).__name__, exc)
        log.debug("workload import failure", exc_info=True)


def _builtin_workloads_package():
    """``param_compute.workloads``; from a source checkout run without ``pip install``, the
    repository's ``workloads/`` folder beside the package, registered under that name."""
    try:
        return importlib.import_module("param_compute.workloads")
    except ModuleNotFoundError:
        folder = Path(__file__).resolve().parent.parent / "workloads"
        spec = importlib.util.spec_from_file_location(
            "param_compute.workloads", folder / "__init__.py",
            submodule_search_locations=[str(folder)])
        if spec is None:
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module


def _load_builtin_workloads() -> None:
    builtin = _builtin_workloads_package()
    for info in pkgutil.walk_packages(builtin.__path__, prefix=builtin.__name__ + "."):
        if info.ispkg:
            continue
        _import_module_guarded(info.name, lambda n=info.name: importlib.import_module(n))


def _load_entry_points() -> None:
    try:
        from importlib.metadata import entry_points
    except ImportError:  # pragma: no cover - Python < 3.8
        return
    eps = entry_points()
    group = (eps.select(group="param_compute.workloads") if hasattr(eps, "select")
             else eps.get("param_compute.workloads", []))
    for ep in group:
        _import_module_guarded(f"entry point {ep.name}", ep.load)


def load_workloads_dir(directory: Path) -> None:
    """Import every ``.py`` file in ``directory`` (sorted, not recursive) as a workload module."""
    directory = Path(directory).resolve()
    key = f"dir:{directory}"
    if key in REGISTRIES.loaded_sources:
        return
    REGISTRIES.loaded_sources.add(key)
    for path in sorted(directory.glob("*.py")):
        module_name = f"param_compute_user_workloads.{directory.name}.{path.stem}"

        def importer(path: Path = path, module_name: str = module_name) -> None:
            spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(module_name, None)
                raise

        _import_module_guarded(str(path), importer)


def load_plugins(workloads_dirs: Optional[List[Path]] = None) -> Registries:
    """Fill the registries (idempotent: each source is loaded at most once per process)."""
    if "builtin" not in REGISTRIES.loaded_sources:
        REGISTRIES.loaded_sources.add("builtin")
        from . import expansion  # registers the built-in config iterators

        expansion.register_builtin_iterators()
        from . import data_generation  # registers PyTorch:DefaultDataGenerator

        data_generation.register_builtin_generators()
        _load_builtin_workloads()
        _load_entry_points()
    for directory in workloads_dirs or []:
        load_workloads_dir(directory)
    return REGISTRIES

"""Plugin loading: fill one toolchain's registries from built-ins, entry points and folders.

In order: the built-in config iterators and data generators (the toolchain gives them), the
built-in workloads (``param_compute.workloads``), the registrations a script made before
(outside any toolchain), the ``param_compute.workloads`` entry-point group, and every ``.py``
file of each ``--workloads-dir``. Python imports a module once per process: the first
toolchain to load a source records its ``register_*`` calls, and every later toolchain replays
them into its own registries. A source that failed is not recorded, so the next toolchain tries
it again.

Folders, and entry-point modules written PARAM's way (``from ...lib.operator import ...``),
are imported in PARAM's package layout (``param_layout``). A source registering a built-in name
replaces the built-in entry; one warning per source names what it replaced.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import logging
import pkgutil
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from param_compute.plugins.param_layout import folder_package, import_file, init_folder_package
from param_compute.plugins.registry import (Registration, Registries, filling,
                                            process_registrations, recording,
                                            register_config_iterator, register_data_generator,
                                            replay)
from param_compute.process.signals import Interrupted

log = logging.getLogger("param_compute")

#: Source (module, entry point or file) -> the registrations its import made, for replay.
_SOURCES: Dict[str, List[Registration]] = {}
#: (source, replaced names) already warned about: said once per process, not per toolchain.
_WARNED: Set[Tuple[str, Tuple[str, ...]]] = set()


def _guarded(registries: Registries, source: str, action: Callable[[], Any]) -> bool:
    """Run one plugin source's import (or replay); False if it failed. A failed source is
    reported (named, with why) and none of its registrations stay: those it made before it
    failed are rolled back. Only a real interrupt passes through: a plugin raising
    ``SystemExit`` (or another ``BaseException``) at import is a failed plugin, never the end
    of the run."""
    rollback = registries.checkpoint()
    try:
        action()
        return True
    except ImportError as exc:  # a missing optional dependency: skip the module, say so once
        rollback()
        missing = getattr(exc, "name", None) or str(exc)
        registries.failed_workloads[source] = f"missing module {missing!r}: {exc}"
        log.warning("workload module %s skipped: missing module %r", source, missing)
    except (KeyboardInterrupt, Interrupted):
        rollback()
        raise
    except BaseException as exc:  # noqa: BLE001 - a broken plugin must not take the engine down
        rollback()
        why = (f"{type(exc).__name__}: {exc}" if isinstance(exc, Exception)
               else f"raised {type(exc).__name__}({exc}) at import")
        registries.failed_workloads[source] = why
        log.warning("workload module %s skipped: %s", source, why)
        log.debug("workload import failure", exc_info=True)
    return False


def _warn_replaced(registries: Registries, source: str) -> None:
    """One warning for the built-in entries ``source`` replaced (once per process)."""
    replaced, registries.replaced[:] = list(registries.replaced), []
    if not replaced:
        return
    names = tuple(f"{name} ({kind})" if kind != "operator" else name for kind, name in replaced)
    if (source, names) not in _WARNED:
        _WARNED.add((source, names))
        log.warning("workload %s replaces built-in %s: %s", source,
                    "entry" if len(names) == 1 else f"entries ({len(names)})", ", ".join(names))


def _load_source(registries: Registries, source: str, importer: Callable[[], Any]) -> None:
    """Import one plugin source into ``registries``, or replay what its first import did."""
    recorded = _SOURCES.get(source)
    if recorded is not None:
        _guarded(registries, source, lambda: replay(recorded, registries))
    else:
        with recording() as registrations:
            ok = _guarded(registries, source, importer)
        if ok:
            _SOURCES[source] = registrations
    _warn_replaced(registries, source)


def _builtin_workloads_package():
    """``param_compute.workloads``; from a source checkout run without ``pip install``, the
    repository's ``workloads/`` folder beside the package, registered under that name."""
    try:
        return importlib.import_module("param_compute.workloads")
    except ModuleNotFoundError:
        folder = Path(__file__).resolve().parents[2] / "workloads"
        spec = importlib.util.spec_from_file_location(
            "param_compute.workloads", folder / "__init__.py",
            submodule_search_locations=[str(folder)])
        if spec is None:
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module


def _load_builtin_workloads(registries: Registries) -> None:
    builtin = _builtin_workloads_package()
    for info in pkgutil.walk_packages(builtin.__path__, prefix=builtin.__name__ + "."):
        if not info.ispkg:
            _load_source(registries, info.name, lambda n=info.name: importlib.import_module(n))


def _load_entry_points(registries: Registries) -> None:
    from importlib.metadata import entry_points

    eps = entry_points()
    group = (eps.select(group="param_compute.workloads") if hasattr(eps, "select")
             else eps.get("param_compute.workloads", []))
    for ep in group:
        _load_source(registries, f"entry point {ep.name} ({ep.value})", _entry_point_importer(ep))


def param_style_file(module_name: str) -> Optional[Path]:
    """The source file of module ``module_name`` when it imports PARAM's library relatively
    (``from ...lib.x import ...``) and that import does not resolve where the module is
    installed; else None. Reads the source, never runs the module."""
    try:
        spec = importlib.util.find_spec(module_name)
    except Exception:  # its package fails to import: the ordinary import will say why
        return None
    if spec is None or not (spec.origin or "").endswith(".py"):
        return None
    path = Path(spec.origin)
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.ImportFrom) and node.level > 0
                and (node.module or "").split(".")[0] == "lib"):
            try:
                target = importlib.util.resolve_name("." * node.level + node.module, spec.parent)
                return None if importlib.util.find_spec(target) is not None else path
            except (ImportError, ValueError):  # beyond the top-level package, or no such module
                return path
    return None


def _entry_point_importer(ep) -> Callable[[], None]:
    """Load an entry point; a module written PARAM's way is imported in PARAM's layout (its
    folder as the workloads package), as a ``--workloads-dir`` file is."""
    def importer() -> None:
        path = param_style_file(ep.module)
        if path is None:
            ep.load()
            return
        directory = path.parent.resolve()
        import_file(directory, folder_package(directory), path)

    return importer


def load_workloads_dir(registries: Registries, directory: Path) -> None:
    """Import every ``.py`` file in ``directory`` (sorted, not recursive) as a workload module,
    in PARAM's layout: the folder is a package (its ``__init__.py`` runs first when it has
    one), so its files import each other in any order. Each folder is its own package, so
    equally named files of two folders are two modules."""
    directory = Path(directory).resolve()
    if directory in registries.workloads_dirs:
        return
    registries.workloads_dirs.append(directory)
    package = folder_package(directory)
    if (directory / "__init__.py").is_file():
        _load_source(registries, str(directory / "__init__.py"),
                     lambda: init_folder_package(directory, package))
    else:
        init_folder_package(directory, package)
    for path in sorted(directory.glob("*.py")):
        if path.name != "__init__.py":
            _load_source(registries, str(path),
                         lambda p=path: import_file(directory, package, p))


def load_plugins(registries: Registries, workloads_dirs: Sequence[Path] = (),
                 iterators: Mapping[str, type] = MappingProxyType({}),
                 data_generators: Mapping[str, Callable[[], Any]] = MappingProxyType({}),
                 builtin_workloads: bool = True) -> Registries:
    """Fill ``registries`` from every plugin source, in order, starting with the built-in
    ``iterators`` and ``data_generators`` the caller (the toolchain) gives. Without
    ``builtin_workloads`` their modules are not imported (a dry run whose spec names none of
    their entries validates without torch)."""
    with filling(registries):
        registries.loading_builtins = True
        try:
            for name, iterator in iterators.items():
                register_config_iterator(name, iterator)
            for name, generator in data_generators.items():
                register_data_generator(name, generator)
            if builtin_workloads:
                _load_builtin_workloads(registries)
                _guarded(registries, "built-in workloads imported before start-up",
                         lambda: replay(process_registrations(builtin=True), registries))
        finally:
            registries.loading_builtins = False
        source = "registrations made before start-up"
        _guarded(registries, source,
                 lambda: replay(process_registrations(builtin=False), registries))
        _warn_replaced(registries, source)
        _load_entry_points(registries)
        for directory in workloads_dirs:
            load_workloads_dir(registries, directory)
    return registries

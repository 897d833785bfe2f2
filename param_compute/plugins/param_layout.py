"""PARAM's package layout for plugin folders: each one a package whose ``...lib`` is ours.

PARAM keeps its workload modules at ``<root>.workloads.pytorch.<name>`` and they import the
library relatively (``from ...lib.operator import register_operators``). A plugin folder is
imported at that very place: the folder is the package ``<root>.workloads.pytorch`` of a
synthetic ``<root>`` (``param_compute_user_workloads.d<digest of the folder's path>``), and
``<root>.lib`` (with every module below it) *is* ``param_compute.lib`` (the same module
objects, given by an import finder, never a second copy). So PARAM's files load unchanged,
and the files of one folder import each other (``from .helpers import x``) in any order.
While a folder's files are being imported, a plain ``import helpers`` of a file of that folder
gives the same module as ``from .helpers import ...``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import zlib
from pathlib import Path
from types import ModuleType
from typing import Iterator, List, Optional, Tuple

TOP = "param_compute_user_workloads"
#: Where PARAM keeps workload modules under its root package.
WORKLOADS = "workloads.pytorch"
LIBRARY = "param_compute.lib"

#: (folder, package) pairs whose files are being imported right now (innermost last).
_ACTIVE: List[Tuple[Path, str]] = []
_LOCK = threading.Lock()


def root_package(directory: Path) -> str:
    """The synthetic PARAM root package of a (resolved) plugin folder."""
    return f"{TOP}.d{zlib.crc32(str(directory).encode()):08x}"


class _AliasLoader(importlib.abc.Loader):
    """Gives an existing module under a second name (the module keeps its own spec)."""

    def __init__(self, target: ModuleType):
        self.target = target
        self.target_spec = getattr(target, "__spec__", None)

    def create_module(self, spec):
        return self.target

    def exec_module(self, module: ModuleType) -> None:
        # module_from_spec gave the module the alias's spec: it keeps its own.
        module.__spec__ = self.target_spec


class _Finder(importlib.abc.MetaPathFinder):
    """Resolves ``<root>.lib[.x]`` to ``param_compute.lib[.x]``, and a plain import of a file
    of the folder being loaded to that file's module in the folder's package."""

    def find_spec(self, fullname: str, path=None, target=None):
        alias = _alias_target(fullname)
        if alias is None:
            return None
        module = importlib.import_module(alias)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module),
                                              is_package=hasattr(module, "__path__"))


def _alias_target(fullname: str) -> Optional[str]:
    if fullname.startswith(TOP + "."):
        parts = fullname.split(".")
        if len(parts) >= 3 and parts[2] == "lib":
            return ".".join([LIBRARY] + parts[3:])
        return None
    if "." in fullname or not _ACTIVE or fullname in sys.stdlib_module_names:
        return None
    directory, package = _ACTIVE[-1]
    if (directory / f"{fullname}.py").is_file() or (directory / fullname / "__init__.py").is_file():
        return f"{package}.{fullname}"
    return None


_FINDER = _Finder()


def _install_finder() -> None:
    with _LOCK:
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def _synthetic_package(name: str, locations: List[str]) -> ModuleType:
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = list(locations)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
    return module


def folder_package(directory: Path) -> str:
    """Make ``directory`` the package ``<root>.workloads.pytorch`` and return its name.

    The root and ``<root>.workloads`` are empty packages; the folder's package is empty too
    unless the folder has an ``__init__.py``, which ``init_folder_package`` runs."""
    _install_finder()
    finder = sys.path_importer_cache.get(str(directory))
    if finder is not None:  # files added since Python last listed the folder are seen
        finder.invalidate_caches()
    root = root_package(directory)
    _synthetic_package(TOP, [])
    _synthetic_package(root, [])
    _synthetic_package(f"{root}.workloads", [])
    return f"{root}.{WORKLOADS}"


def init_folder_package(directory: Path, package: str) -> None:
    """Import the folder's package: its ``__init__.py`` when it has one (run once), else an
    empty package whose modules are the folder's files."""
    if package in sys.modules:
        return
    init = directory / "__init__.py"
    if init.is_file():
        spec = importlib.util.spec_from_file_location(
            package, init, submodule_search_locations=[str(directory)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[package] = module
        try:
            with loading_folder(directory, package):
                spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(package, None)
            raise
        setattr(sys.modules[package.rpartition(".")[0]], package.rpartition(".")[2], module)
    else:
        _synthetic_package(package, [str(directory)])


@contextlib.contextmanager
def loading_folder(directory: Path, package: str) -> Iterator[None]:
    """Inside the block, a plain import of a file of ``directory`` is its module in ``package``."""
    _ACTIVE.append((directory, package))
    try:
        yield
    finally:
        _ACTIVE.pop()


def import_file(directory: Path, package: str, path: Path) -> ModuleType:
    """The module of ``path`` (a file of ``directory``), imported once per process."""
    if package not in sys.modules:
        _synthetic_package(package, [str(directory)])  # its __init__.py failed: files still load
    with loading_folder(directory, package):
        return importlib.import_module(f"{package}.{path.stem}")

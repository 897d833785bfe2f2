"""An index of the operator names torch resolves, so that a dry run validates without torch.

Validating a spec needs to know whether ``torch.add`` or ``aten::addmm.out`` name operators, and
importing torch to look costs most of a dry run. The index answers instead: every name under
the forms the resolver accepts (``torch.X``, ``torch.nn.functional.X``, ``torch.special.X``,
``torch.linalg.X``, ``torch.fft.X``, ``torch.nn.<Module>``, PARAM's in-place ``torch.X_``,
``aten::name[.overload]``) that resolved, with its kind; every aten schema string (a captured
spec's build schema is checked by looking it up); and the names the built-in workloads register
(a spec naming one loads them, with torch).

It is written at first use (a dry run that finds none builds it, importing torch once) to the
user's cache directory (``$PARAM_COMPUTE_NAME_INDEX_DIR``, else ``$PARAM_COMPUTE_CACHE_DIR``,
else ``$XDG_CACHE_HOME/param_compute``, else ``~/.cache/param_compute``), keyed by torch's
version (read from its package metadata, never by importing it) and by this package's resolver
and built-in workload sources: another torch, or other rules, make another index, and older
ones are removed. An index that cannot be read (damaged, foreign, too large) counts as missing.
Only dry runs, which run nothing, trust it: a measured run resolves every name with torch.

:class:`IndexedResolver` answers from the index and hands anything it does not know (other
namespaces, names that do not resolve, whose messages need torch's names) to the full resolver.
Torch-free at import.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, List, Optional

from param_compute.files import MISSING, FileRefused, read_bounded, write_new
from param_compute.operators.names import aten_base_name, op_namespace
from param_compute.spec.model import Resolution

log = logging.getLogger("param_compute")

INDEX_FORMAT = "param_compute.operator_names/1"
PREFIX = "operator_names-"
#: An index file larger than this is not read (torch 2.x's is about 1 MB).
MAX_INDEX_BYTES = 64 * 2**20
_PACKAGE = Path(__file__).resolve().parents[1]
#: Sources whose rules decide what the index holds: another version of them, another index.
_RULE_SOURCES = ("operators/resolution.py", "operators/name_index.py", "operators/names.py",
                 "operators/collectives.py")
_BUILTIN_KINDS = ("operators", "unavailable_operators", "config_iterators", "data_generators")


def torch_version() -> Optional[str]:
    """Installed torch's version from its package metadata (torch is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def index_dir() -> Path:
    for variable in ("PARAM_COMPUTE_NAME_INDEX_DIR", "PARAM_COMPUTE_CACHE_DIR"):
        if os.environ.get(variable):
            return Path(os.environ[variable])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "param_compute"


def _workload_sources() -> List[Path]:
    folder = _PACKAGE / "workloads"
    if not folder.is_dir():  # a source checkout: the workloads beside the package
        folder = _PACKAGE.parent / "workloads"
    return sorted(folder.rglob("*.py")) if folder.is_dir() else []


def index_path(version: str) -> Path:
    """The index file for this torch ``version`` and these rules and built-in workloads."""
    digest = hashlib.sha256(f"{INDEX_FORMAT}\0{version}".encode())
    for path in [_PACKAGE / name for name in _RULE_SOURCES] + _workload_sources():
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"missing")
    safe = re.sub(r"[^A-Za-z0-9.+-]", "_", version)
    return index_dir() / f"{PREFIX}torch-{safe}-{digest.hexdigest()[:16]}.json"


@dataclass(frozen=True)
class NameIndex:
    torch_version: str
    #: Operator name -> its resolution kind ("function", "inplace", "module", "aten").
    names: Dict[str, str]
    aten_schemas: FrozenSet[str]
    #: Names the built-in workloads register, by table.
    builtin: Dict[str, FrozenSet[str]]
    #: Device type -> the aten names (``aten::x``, ``aten::x.overload``) without a kernel for
    #: it, for the device types this torch build can tell about (``operators.kernels``).
    no_kernel: Dict[str, FrozenSet[str]]

    def resolution(self, name: str) -> Optional[Resolution]:
        kind = self.names.get(name)
        return Resolution(True, kind=kind) if kind is not None else None

    def schema_is_known(self, op_name: str, schema: Any) -> bool:
        """Whether ``schema`` is one of torch's aten schemas, for ``op_name``'s operator."""
        if not isinstance(schema, str) or schema not in self.aten_schemas:
            return False
        qualified = schema.split("(", 1)[0].strip()
        return qualified.split(".", 1)[0] == f"{op_namespace(op_name)}::{aten_base_name(op_name)}"

    def kernel_of(self, device: str) -> Callable[[str], bool]:
        """``operators.kernels.missing_kernels``' question, answered from the index: whether an
        operator has a kernel on ``device`` (True where this build cannot tell)."""
        missing = self.no_kernel.get(str(device).split(":", 1)[0], frozenset())
        return lambda qualified: qualified not in missing

    def names_builtin_workloads(self, raw_spec: Any) -> bool:
        """Whether a spec (parsed JSON) names a config iterator or data generator that only the
        built-in workloads register (their objects are needed), or an operator they declare
        unavailable (the reason is theirs). Their operators resolve from the index."""
        if not isinstance(raw_spec, dict):
            return False
        _, unavailable, iterators, generators = (self.builtin[kind] for kind in _BUILTIN_KINDS)
        for name, op in raw_spec.items():
            if name in unavailable:
                return True
            if isinstance(op, dict):
                for key, table in (("build_iterator", iterators), ("input_iterator", iterators),
                                   ("build_data_generator", generators),
                                   ("input_data_generator", generators)):
                    if isinstance(op.get(key), str) and op[key] in table:
                        return True
        return False

    def to_json(self) -> Dict[str, Any]:
        return {"format": INDEX_FORMAT, "torch_version": self.torch_version,
                "names": self.names, "aten_schemas": sorted(self.aten_schemas),
                "builtin": {kind: sorted(names) for kind, names in self.builtin.items()},
                "no_kernel": {kind: sorted(names) for kind, names in self.no_kernel.items()}}

    @classmethod
    def from_json(cls, value: Any, version: str) -> Optional["NameIndex"]:
        """The index of ``value``, or None when it is not one for torch ``version``."""
        try:
            if value["format"] != INDEX_FORMAT or value["torch_version"] != version:
                return None
            names = value["names"]
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items()):
                return None
            schemas = frozenset(value["aten_schemas"])
            builtin = {kind: frozenset(value["builtin"][kind]) for kind in _BUILTIN_KINDS}
            no_kernel = {str(kind): frozenset(names)
                         for kind, names in value["no_kernel"].items()}
            tables = [*builtin.values(), *no_kernel.values(), schemas]
            if not all(isinstance(n, str) for table in tables for n in table):
                return None
        except (KeyError, TypeError, AttributeError):
            return None
        return cls(version, dict(names), schemas, builtin, no_kernel)


def load_index() -> Optional[NameIndex]:
    """The index for the installed torch, or None (none written yet, unreadable, or no torch)."""
    version = torch_version()
    if version is None:
        return None
    path = index_path(version)
    try:  # a cache: a regular file, no link, bounded; anything else is rebuilt
        value = json.loads(read_bounded(path, MAX_INDEX_BYTES, follow_links=False))
    except FileRefused as refused:
        if refused.code != MISSING:
            log.debug("operator-name index %s", refused)
        return None
    except (OSError, ValueError, RecursionError):
        log.debug("operator-name index %s unreadable", path, exc_info=True)
        return None
    return NameIndex.from_json(value, version)


def build_index(toolchain: Any, bare_registries: Any) -> NameIndex:
    """The index from a full toolchain (built-in workloads loaded; torch imported) and the
    registries of one without the built-in workloads (what they add is the difference)."""
    import torch

    from param_compute.operators.kernels import can_check, has_kernel
    from param_compute.operators.resolution import FUNCTION_NAMESPACES

    candidates = set()
    for namespace_name, namespace in FUNCTION_NAMESPACES.items():
        candidates.update(f"{namespace_name}.{name}" for name in vars(namespace)
                          if not name.startswith("_"))
    candidates.update(f"torch.{name}" for name in dir(torch.Tensor)
                      if name.endswith("_") and not name.startswith("_"))
    candidates.update(f"torch.nn.{name}" for name in vars(torch.nn) if not name.startswith("_"))
    schemas = [s for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")]
    aten = set()
    for schema in schemas:
        aten.add(schema.name)
        aten.add(f"{schema.name}.{schema.overload_name or 'default'}")
        if schema.overload_name:
            aten.add(f"{schema.name}.{schema.overload_name}")
    candidates |= aten
    resolver = toolchain.resolver
    names = {}
    for name in sorted(candidates):
        if name in toolchain.registries.operators:
            continue  # a workload's name: not torch's
        resolution = resolver(name)
        if resolution.ok:
            names[name] = resolution.kind
    registries = toolchain.registries
    builtin = {kind: frozenset(set(getattr(registries, kind)) - set(getattr(bare_registries,
                                                                                kind)))
               for kind in _BUILTIN_KINDS}
    no_kernel = {kind: frozenset(name for name in aten if not has_kernel(name, kind))
                 for kind in ("cpu", "cuda") if can_check(kind)}
    return NameIndex(torch_version() or torch.__version__, names,
                     frozenset(str(s) for s in schemas), builtin, no_kernel)


def write_index(index: NameIndex) -> Optional[Path]:
    """Write ``index`` where :func:`load_index` finds it (atomically; older indexes removed).
    A cache that cannot be written is no error: the next dry run builds it again."""
    path = index_path(index.torch_version)
    try:
        write_new(path, json.dumps(index.to_json()))  # atomic: a reader never sees half of it
        for other in path.parent.glob(f"{PREFIX}*.json"):
            if other != path:
                other.unlink()
    except OSError as exc:
        log.debug("operator-name index not written to %s: %s", path, exc)
        return None
    log.debug("operator-name index written: %s (%d names)", path, len(index.names))
    return path


class IndexedResolver:
    """The resolver's interface answered from a :class:`NameIndex` where it can: registered
    workloads (the toolchain's, then the built-in ones the index names) first, then torch's
    names; anything else goes to the full resolver ``full()`` makes (imports torch)."""

    def __init__(self, registries: Any, index: NameIndex, full: Callable[[], Any]):
        self.registries = registries
        self.index = index
        self._make_full = full
        self._full: Any = None
        self.allow_namespaces: frozenset = frozenset()

    @property
    def full(self) -> Any:
        if self._full is None:
            self._full = self._make_full()
            self._full.allow(self.allow_namespaces)
        return self._full

    def allow(self, namespaces) -> None:
        self.allow_namespaces = frozenset(namespaces)
        if self._full is not None:
            self._full.allow(self.allow_namespaces)

    def __call__(self, name: str) -> Resolution:
        from param_compute.operators.collectives import kind_of

        if kind_of(name) is not None and name not in self.registries.operators:
            return Resolution(True, kind="collective")  # the fixed table: torch-free
        if name in self.registries.operators or (
                name in self.index.builtin["operators"]
                and name not in self.registries.unavailable_operators):
            return Resolution(True, kind="workload")
        if name not in self.registries.unavailable_operators:
            known = self.index.resolution(name)
            if known is not None:
                return known
        return self.full(name)

    def factory(self, name: str):
        return self.full.factory(name)

    def check_aten_schema(self, op_name: str, schema: object) -> Optional[str]:
        """``resolution.check_aten_schema``: a known schema of the operator passes here."""
        if self.index.schema_is_known(op_name, schema):
            return None
        from param_compute.operators.resolution import check_aten_schema

        return check_aten_schema(op_name, schema)

"""Where the PARAM-API door meets the engine: the current toolchain and its registry tables.

The only module of ``param_compute.lib`` that knows how toolchains start; PARAM's ``run_options``
dict becomes ``RunOptions.from_param``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterator, Optional

_CURRENT: Dict[str, Any] = {"toolchain": None, "registrations": -1}


def toolchain():
    """A toolchain with every plugin loaded and every registration made so far.

    Started on first use and again after a script registered something new (PARAM's scripts
    register operators at any time, through ``load_modules`` or ``register_operators``).
    """
    from param_compute.plugins.registry import process_registrations
    from param_compute.runtime.toolchain import Toolchain

    made = len(process_registrations())
    if _CURRENT["toolchain"] is None or made != _CURRENT["registrations"]:
        _CURRENT["toolchain"] = Toolchain.start()
        _CURRENT["registrations"] = made
    return _CURRENT["toolchain"]


class RegistryView(Mapping):
    """A read-only, live view of one table of the current toolchain (PARAM's ``*_map``)."""

    def __init__(self, table: str, value: Callable[[Any], Any] = lambda entry: entry):
        self._table = table
        self._value = value

    def _entries(self) -> Dict[str, Any]:
        return getattr(toolchain().registries, self._table)

    def __getitem__(self, name: str) -> Any:
        return self._value(self._entries()[name])

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries()))

    def __len__(self) -> int:
        return len(self._entries())


def resolve_operator(name: str, device: Optional[str]) -> Optional[Any]:
    """A fresh operator object for ``name`` (registered, ``torch.*`` or ``aten::``), its
    ``device`` set; None where the name does not resolve."""
    resolver = toolchain().resolver
    if not resolver(name).ok:
        return None
    op = resolver.factory(name)()
    op.device = device
    return op

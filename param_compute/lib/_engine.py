"""Where the PARAM-API door meets the engine: the current toolchain and PARAM's run options.

The only module of ``param_compute.lib`` that knows how toolchains start and how PARAM's
``run_options`` dict maps onto :class:`RunOptions`; the others call these functions.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterator, Optional

from param_compute.runtime.options import RunOptions

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


def _enum_value(value: Any) -> Any:
    """PARAM's enums, their values, or their ``str()`` forms (``"ExecutionPass.BACKWARD"``)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, str) and "." in value:
        return value.split(".", 1)[1].lower()
    return value


def run_options_from_param(run_options: Dict[str, Any]) -> RunOptions:
    """PARAM's ``run_options`` dict (``get_benchmark_options()`` and edits) -> ``RunOptions``."""
    exec_mode = _enum_value(run_options.get("op_exec_mode", "discrete")) or "discrete"
    cuda_l2_cache = run_options.get("cuda_l2_cache", False)
    if isinstance(cuda_l2_cache, str):
        cuda_l2_cache = cuda_l2_cache == "on"
    return RunOptions(
        device=str(run_options.get("device") or "cpu"),
        warmup=int(run_options.get("warmup", 1)),
        iteration=int(run_options.get("iteration", 1)),
        backward=_enum_value(run_options.get("pass_type", "forward")) == "backward",
        exec_mode=exec_mode,
        cuda_l2_cache=bool(cuda_l2_cache),
        resume_id=run_options.get("resume_op_run_id"),
        stop_id=run_options.get("stop_op_run_id"),
        pt2_model=bool(run_options.get("pt2-model", run_options.get("pt2_model", False))),
        cuda_graph=bool(run_options.get("cuda-graph", run_options.get("cuda_graph", False))),
        throughput=False)  # max_memory: the default guard ("auto"), as run_benchmark


def resolve_operator(name: str, device: Optional[str]) -> Optional[Any]:
    """A fresh operator object for ``name`` (registered, ``torch.*`` or ``aten::``), its
    ``device`` set; None where the name does not resolve."""
    resolver = toolchain().resolver
    if not resolver(name).ok:
        return None
    op = resolver.factory(name)()
    op.device = device
    return op

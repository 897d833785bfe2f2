"""The typed form of a validated spec (``BenchmarkSpec``) and what validation is told by others.

``Resolution`` is what operator-name resolution (``operators.resolution``) says about a name; the
spec stage takes the resolver and the aten schema checker as plain callables, so it never imports
torch itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

DEFAULT_DATA_GENERATOR = "PyTorch:DefaultDataGenerator"
#: The names the default data generator answers to (PARAM's specs use both spellings).
DEFAULT_DATA_GENERATORS = (DEFAULT_DATA_GENERATOR, "PyTorch::DefaultDataGenerator")


@dataclass(frozen=True)
class OperatorSpec:
    name: str
    build_iterator: str
    input_iterator: str
    build_data_generator: str
    input_data_generator: str
    configs: Tuple[Dict[str, Any], ...]


@dataclass(frozen=True)
class BenchmarkSpec:
    source: str
    operators: Tuple[OperatorSpec, ...]
    warnings: Tuple[str, ...] = ()
    #: A captured spec's ``__capture__`` settings (``spec.reserved``), or None.
    capture: Optional[Dict[str, Any]] = None
    #: A job's ``__process_groups__`` (``spec.job``), or None.
    process_groups: Optional[Dict[str, Any]] = None
    #: A captured spec's compiled graphs (``__graphs__``, ``spec.graphs``): name -> graph.
    graphs: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class Resolution:
    """What operator-name resolution says about a name (supplied by the resolver)."""

    ok: bool
    kind: str = ""  # "workload", "function", "inplace", "module", "aten", "graph"
    reason: str = ""
    hint: Optional[str] = None


Resolver = Callable[[str], Resolution]
AtenSchemaChecker = Callable[[str, str], Optional[str]]
#: (graph name, graph) -> (path below the graph, message, hint) of each problem that needs torch
#: to see (``operators.graphs.check_graph``).
GraphChecker = Callable[[str, Dict[str, Any]], List[Tuple[tuple, str, Optional[str]]]]

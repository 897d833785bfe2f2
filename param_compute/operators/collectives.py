"""The collectives a spec may name: one fixed table of kinds, their names, bytes and bus factors.

A collective is an operator like any other in a spec, named either as the ``c10d::`` op a
trace records (``c10d::allreduce_``, ``c10d::_allgather_base_``, ...) or by the friendlier
name of its ``torch.distributed`` function (``torch.distributed.all_reduce``, ...). Both
resolve to the same kind here, and its arguments are written in the ``torch.distributed``
form: the tensors positionally, and keyword arguments ``group`` (a name of the spec's
``__process_groups__``; default: every rank), ``op`` (``sum``, ``avg``, ``product``, ``min``,
``max``, ``band``, ``bor``, ``bxor``, ``premul_sum``: from ``REDUCE_OPS``), ``async_op``,
``output_split_sizes``/``input_split_sizes``, ``group_src``/``group_dst`` (ranks within the
group) and ``tag``. Nothing a spec names imports or chooses code: the name picks a row here.

Bandwidth as nccl-tests defines it (``doc/PERFORMANCE.md``): the algorithm bandwidth is the
message's bytes over the time (``message_bytes``: the buffer for all-reduce, broadcast, reduce,
send/recv; the whole gathered buffer for all-gather and gather; the whole input for
reduce-scatter, scatter and all-to-all) and the bus bandwidth is that times a factor of the
group's size ``n`` (``bus_factor``): all-reduce 2(n-1)/n; all-gather, reduce-scatter,
all-to-all, gather and scatter (n-1)/n; broadcast, reduce, send and recv 1.

Torch-free: the resolver, the dry run's name index and the analysis read it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

#: Reduction names a spec may write (``op``), each a ``torch.distributed.ReduceOp`` member.
REDUCE_OPS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum")


@dataclass(frozen=True)
class Kind:
    """One kind of collective: how it is named, called and counted."""

    name: str  # the torch.distributed function it runs (all_reduce, ...)
    #: what its positional arguments are, in order ("tensor", "tensors": a list of them)
    args: Tuple[str, ...]
    #: the bus bandwidth factor's form: "allreduce" 2(n-1)/n, "gather" (n-1)/n, "one" 1,
    #: "none" (no bytes: barrier)
    bus: str
    #: which argument's bytes are the message (an index into ``args``)
    message_arg: int = 0
    #: the keyword arguments it takes besides ``group`` and ``async_op``
    keywords: Tuple[str, ...] = ()


KINDS: Dict[str, Kind] = {k.name: k for k in (
    Kind("all_reduce", ("tensor",), "allreduce", 0, ("op",)),
    Kind("all_gather_into_tensor", ("tensor", "tensor"), "gather", 0),
    Kind("all_gather", ("tensors", "tensor"), "gather", 0),
    Kind("reduce_scatter_tensor", ("tensor", "tensor"), "gather", 1, ("op",)),
    Kind("reduce_scatter", ("tensor", "tensors"), "gather", 1, ("op",)),
    Kind("all_to_all_single", ("tensor", "tensor"), "gather", 1,
         ("output_split_sizes", "input_split_sizes")),
    Kind("all_to_all", ("tensors", "tensors"), "gather", 1),
    Kind("broadcast", ("tensor",), "one", 0, ("group_src",)),
    Kind("reduce", ("tensor",), "one", 0, ("group_dst", "op")),
    Kind("gather", ("tensor", "tensors?"), "gather", 0, ("group_dst",)),
    Kind("scatter", ("tensor", "tensors?"), "gather", 0, ("group_src",)),
    Kind("send", ("tensor",), "one", 0, ("group_dst", "tag")),
    Kind("recv", ("tensor",), "one", 0, ("group_src", "tag")),
    Kind("barrier", (), "none"),
)}

#: The ``c10d::`` ops a trace records -> their kind (``torch.distributed`` name).
C10D_OPS: Dict[str, str] = {
    "allreduce_": "all_reduce",
    "_allgather_base_": "all_gather_into_tensor",
    "allgather_into_tensor_coalesced_": "all_gather_into_tensor",
    "allgather_": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor",
    "reduce_scatter_": "reduce_scatter",
    "alltoall_base_": "all_to_all_single",
    "alltoall_": "all_to_all",
    "broadcast_": "broadcast",
    "reduce_": "reduce",
    "gather_": "gather",
    "scatter_": "scatter",
    "send": "send",
    "recv_": "recv",
    "barrier": "barrier",
}
#: ``record_param_comms``' ``collective_name`` (NCCL and older traces) -> kind.
RECORDED_NAMES: Dict[str, str] = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce",
    "allgather": "all_gather_into_tensor", "all_gather": "all_gather_into_tensor",
    "_allgather_base": "all_gather_into_tensor", "allgather_into_tensor_coalesced":
        "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter_tensor", "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "all_to_all": "all_to_all_single", "alltoall_base": "all_to_all_single",
    "all_to_allv": "all_to_all_single", "alltoall": "all_to_all_single",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "send": "send", "recv": "recv", "barrier": "barrier",
}
#: The friendlier spec names: ``torch.distributed.<kind>``.
FRIENDLY_PREFIX = "torch.distributed."
#: The group every rank belongs to, when a config names none.
WORLD = "world"
#: Ops that wait for earlier collective work (their place in a step is where it was waited).
WAIT_OPS = frozenset({"_c10d_functional::wait_tensor", "c10d_functional::wait_tensor",
                      "c10d::wait", "aten::wait"})


def kind_of(op_name: str) -> Optional[Kind]:
    """The collective kind a spec's operator name runs (``c10d::allreduce_``,
    ``torch.distributed.all_reduce``), else None."""
    if not isinstance(op_name, str):
        return None
    if op_name.startswith(FRIENDLY_PREFIX):
        return KINDS.get(op_name[len(FRIENDLY_PREFIX):])
    namespace, sep, rest = op_name.partition("::")
    if not sep or namespace != "c10d":
        return None
    name = C10D_OPS.get(rest.split(".", 1)[0])
    return KINDS[name] if name is not None else None


def is_collective(op_name: str) -> bool:
    return kind_of(op_name) is not None


def known_names() -> Tuple[str, ...]:
    """Every name a spec may give a collective, for messages."""
    return tuple(sorted({f"c10d::{name}" for name in C10D_OPS}
                        | {FRIENDLY_PREFIX + name for name in KINDS}))


def bus_factor(kind: Kind, ranks: int) -> Optional[float]:
    """nccl-tests' bus bandwidth factor for a group of ``ranks`` (None: no bytes moved)."""
    n = max(1, int(ranks))
    if kind.bus == "allreduce":
        return 2 * (n - 1) / n
    if kind.bus == "gather":
        return (n - 1) / n
    if kind.bus == "one":
        return 1.0
    return None


def bandwidth(kind: Kind, message_bytes: int, ranks: int, median_ms: Optional[float]
              ) -> Dict[str, Optional[float]]:
    """``{bytes, algbw_gbps, busbw_gbps}`` at a median time (GB/s: 1e9 bytes a second)."""
    factor = bus_factor(kind, ranks)
    if factor is None or not median_ms or median_ms <= 0:
        return {"bytes": message_bytes, "algbw_gbps": None, "busbw_gbps": None}
    algbw = message_bytes / (median_ms / 1e3) / 1e9
    return {"bytes": message_bytes, "algbw_gbps": algbw, "busbw_gbps": algbw * factor}

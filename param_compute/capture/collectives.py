"""A recorded ``c10d::`` call -> the collective config a replay runs, in ``torch.distributed``'s form.

Both capture paths hand the recorded arguments by schema name (``named``: each already a data
spec: tensors, lists of tensors as ``genericlist``, ints and bools) with the call's process group
(its name in the job's ``__process_groups__``); ``collective_call`` puts them in the form the
replay's ``CollectiveOperator`` takes (``operators.collectives``): the tensors positionally, and
``group``, ``async_op``, split sizes, the root (``group_src``/``group_dst``, ranks within the
group) and the tag as keywords. The reduction itself is an opaque object in a trace: ``sum``
is written. What cannot be replayed (a list of several tensors in one call: coalesced
collectives; sparse all-reduce) raises ``Unreplayable`` with the reason.

Async work: a call recorded with ``async_op`` true (DDP's buckets, FSDP's all-gathers) is issued
asynchronously in the replay and waited where the original waited it; the step's dataflow
says where (``capture.step.dataflow``). An op recorded without the flag (older schemas) was
always asynchronous at the c10d level, and is taken as such.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from param_compute.capture.accounting import Unreplayable
from param_compute.operators.collectives import C10D_OPS

Spec = Dict[str, Any]


def _items(spec: Optional[Spec]) -> List[Spec]:
    if isinstance(spec, dict) and spec.get("type") in ("genericlist", "tuple"):
        return list(spec.get("value") or [])
    return [spec] if isinstance(spec, dict) and spec.get("type") == "tensor" else []


def _one(named: Dict[str, Spec], name: str, what: str) -> Spec:
    """The one tensor of a ``Tensor[]`` argument (``Unreplayable`` for several)."""
    items = _items(named.get(name))
    if len(items) != 1 or items[0].get("type") != "tensor":
        raise Unreplayable(f"{what}: {len(items)} tensors in one call (a coalesced "
                           "collective): only one is replayed", kind="collective")
    return items[0]


def _tensor(named: Dict[str, Spec], name: str) -> Spec:
    spec = named.get(name)
    if not isinstance(spec, dict) or spec.get("type") != "tensor":
        raise Unreplayable(f"{name}: no tensor recorded", kind="collective")
    return spec


def _list(items: List[Spec]) -> Spec:
    return {"type": "genericlist", "value": items}


def _int(named: Dict[str, Spec], *names: str) -> Optional[int]:
    for name in names:
        spec = named.get(name)
        if isinstance(spec, dict) and spec.get("type") == "int":
            return int(spec["value"])
    return None


def _async(named: Dict[str, Spec]) -> bool:
    for name in ("async_op", "asyncOp"):
        spec = named.get(name)
        if isinstance(spec, dict) and spec.get("type") == "bool":
            return bool(spec["value"])
    return True


def _splits(named: Dict[str, Spec], name: str) -> Optional[Spec]:
    """Recorded split sizes as a list of ints (None where empty: an even split)."""
    spec = named.get(name)
    values = spec.get("value") if isinstance(spec, dict) and spec.get("type") in (
        "genericlist", "tuple") else None
    if not values:
        return None
    return {"type": "genericlist", "value": [
        {"type": "int", "value": int(v["value"])} for v in values
        if isinstance(v, dict) and v.get("type") == "int"]}


def collective_call(base: str, named: Dict[str, Spec], group: str
                    ) -> Tuple[List[Spec], Dict[str, Spec]]:
    """(args, kwargs) of the collective ``c10d::<base>`` on ``group`` (see the module's doc)."""
    kind = C10D_OPS.get(base)
    if kind is None:
        raise Unreplayable(f"c10d::{base} is no collective this replay runs", kind="collective")
    if named.get("sparse_indices", {"type": "none"}).get("type") != "none":
        raise Unreplayable("a sparse all-reduce (sparse_indices) is not replayed",
                           kind="collective")
    kwargs: Dict[str, Spec] = {"group": {"type": "str", "value": group}}
    if kind != "barrier":
        kwargs["async_op"] = {"type": "bool", "value": _async(named)}
    if kind == "all_reduce":
        args = [_one(named, "tensors", "tensors")]
    elif kind in ("all_gather_into_tensor", "reduce_scatter_tensor"):
        if base.endswith("_coalesced_"):
            args = [_one(named, "outputs", "outputs"), _one(named, "inputs", "inputs")]
        else:
            args = [_tensor(named, "output_tensor"), _tensor(named, "input_tensor")]
    elif kind == "all_gather":
        outputs = _items(named.get("output_tensors"))
        if len(outputs) != 1:
            raise Unreplayable("all-gather of several tensors in one call (coalesced)",
                               kind="collective")
        args = [outputs[0], _one(named, "input_tensors", "input_tensors")]
    elif kind == "reduce_scatter":
        inputs = _items(named.get("input_tensors"))
        if len(inputs) != 1:
            raise Unreplayable("reduce-scatter of several tensors in one call (coalesced)",
                               kind="collective")
        args = [_one(named, "output_tensors", "output_tensors"), inputs[0]]
    elif kind == "all_to_all_single":
        args = [_tensor(named, "output"), _tensor(named, "input")]
        for key in ("output_split_sizes", "input_split_sizes"):
            splits = _splits(named, key)
            if splits is not None:
                kwargs[key] = splits
    elif kind == "all_to_all":
        args = [_list(_items(named.get("output_tensors"))),
                _list(_items(named.get("input_tensors")))]
    elif kind in ("broadcast", "reduce"):
        args = [_one(named, "tensors", "tensors")]
        root = _int(named, "root_rank")
        kwargs["group_src" if kind == "broadcast" else "group_dst"] = {
            "type": "int", "value": root or 0}
    elif kind in ("gather", "scatter"):
        many, one = ("output_tensors", "input_tensors") if kind == "gather" else \
            ("input_tensors", "output_tensors")
        lists = _items(named.get(many))
        listed = lists[0] if lists else None
        args = [_one(named, one, one),
                listed if isinstance(listed, dict) and listed.get("type") == "genericlist"
                and listed.get("value") else {"type": "none"}]
        kwargs["group_dst" if kind == "gather" else "group_src"] = {
            "type": "int", "value": _int(named, "root_rank") or 0}
    elif kind in ("send", "recv"):
        args = [_one(named, "tensors", "tensors")]
        peer = _int(named, "dst", "dstRank", "src", "srcRank")
        kwargs["group_dst" if kind == "send" else "group_src"] = {"type": "int",
                                                                  "value": peer or 0}
        kwargs["tag"] = {"type": "int", "value": _int(named, "tag") or 0}
        kwargs.pop("async_op", None)
    else:  # barrier
        args = []
    return args, kwargs


#: c10d base -> where a recorded tensor's argument path (``step_file``: ``[i]``, ``[i, j]``)
#: lies in the replayed call's arguments: the same place (``SAME``), or a table.
SAME = "same"
_PATHS: Dict[str, Any] = {
    "allreduce_": {(0, 0): [0]}, "broadcast_": {(0, 0): [0]}, "reduce_": {(0, 0): [0]},
    "send": {(0, 0): [0]}, "recv_": {(0, 0): [0]},
    "_allgather_base_": SAME, "_reduce_scatter_base_": SAME, "alltoall_base_": SAME,
    "alltoall_": SAME,
    "allgather_into_tensor_coalesced_": {(0, 0): [0], (1, 0): [1]},
    "reduce_scatter_tensor_coalesced_": {(0, 0): [0], (1, 0): [1]},
    "allgather_": {(1, 0): [1]}, "reduce_scatter_": {(0, 0): [0]},
    "gather_": {(1, 0): [0]}, "scatter_": {(0, 0): [0]}, "barrier": {},
}


def replay_path(base: str, path: List[Any]) -> Optional[List[Any]]:
    """A recorded input's argument path in the replayed collective's arguments (None: the
    replay has no such argument, its tensor is the call's own)."""
    table = _PATHS.get(base, {})
    if table == SAME:
        return list(path)
    found = table.get(tuple(path))
    return list(found) if found is not None else None

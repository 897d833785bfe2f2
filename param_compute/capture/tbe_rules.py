"""fbgemm's table-batched embeddings (TBE): the data a replay must make for them.

A ``SplitTableBatchedEmbeddingBagsCodegen`` keeps T tables in one flat weights tensor and hands
its ops (``fbgemm::split_embedding_codegen_lookup_*``, ``split_embedding_backward_codegen_*``,
``split_embedding_codegen_forward_cpu``, ``bounds_check_indices``...) small metadata tensors
whose values say where each table is: ``D_offsets`` (each table's first output column),
``hash_size_cumsum`` (each table's first row, cumulated), ``weights_offsets`` (each table's first
element), ``weights_placements``, ``rows_per_table``. An execution trace records their shapes
only. The rule rebuilds them for T tables of equal width D (``max_D``, which must equal
``total_D / T``: mixed widths are data) splitting the weights' rows as evenly as can be, and
gives the indices ``[0, rows of the smallest table - 1]`` (valid in every table) and the
offsets a ``bags`` view over T x B bags (one per table and sample, the recorded mean pooling).
``bounds_check_indices`` has no weights: it gets N rows per table (N the number of indices;
its cost does not depend on the row count). Variable batch sizes (``B_offsets``) are data: such
a call is refused with that reason.

The optimizer's state (``momentum1``, ``momentum2``: one value per row for row-wise optimizers,
one per weight for full ones) has its own ``*_placements`` and ``*_offsets``, where each table's
state starts. They get the tables' row starts (row-wise) or element starts (full) and the
weights' placement. Left to chance (random offsets in a recorded range, or none from a trace),
every table's updates hit the same few state rows, or rows past the state's end.
"""

from __future__ import annotations

from math import prod
from typing import Any, Dict, List, Optional

from param_compute.capture.values import INTEGER_SPEC_DTYPES
from param_compute.spec.index_data import fixed_lengths

Named = Dict[str, Any]

#: Base names (fbgemm namespace) the rule applies to.
TBE_PREFIXES = ("split_embedding_", "bounds_check_indices")
#: ``EmbeddingLocation`` codes: where a table's rows are kept.
DEVICE, HOST = 0, 3
_METADATA = ("D_offsets", "hash_size_cumsum", "weights_offsets", "weights_placements",
             "rows_per_table")


def _tensor(spec: Any) -> Optional[Dict[str, Any]]:
    return spec if isinstance(spec, dict) and spec.get("type") == "tensor" else None


def _numel(spec: Any) -> int:
    tensor = _tensor(spec)
    return prod(tensor["shape"]) if tensor else 0


def _int(spec: Any) -> Optional[int]:
    value = spec.get("value") if isinstance(spec, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _give(spec: Any, values: List[int]) -> None:
    tensor = _tensor(spec)
    if tensor is not None and tensor.get("dtype") in INTEGER_SPEC_DTYPES:
        for other in ("value_range", "distribution", "stride", "storage_offset", "bags",
                      "pool_window"):
            tensor.pop(other, None)
        tensor["values"] = values


def _tables(named: Named) -> Optional[int]:
    for name, extra in (("D_offsets", -1), ("hash_size_cumsum", -1), ("rows_per_table", 0),
                        ("weights_offsets", 0), ("weights_placements", 0)):
        tensor = _tensor(named.get(name))
        if tensor and len(tensor["shape"]) == 1:
            return tensor["shape"][0] + extra
    return None


def _weights(named: Named):
    """(the flat weights' data spec, its placement code) of the call, or (None, None)."""
    for name, placement in (("dev_weights", DEVICE), ("host_weights", HOST),
                            ("uvm_weights", DEVICE), ("weights", None)):
        spec = named.get(name)
        if isinstance(spec, dict) and spec.get("type") == "genericlist":  # pt2: [w, pl, off]
            items = spec.get("value") or []
            named.setdefault("weights_placements", items[1] if len(items) > 1 else None)
            named.setdefault("weights_offsets", items[2] if len(items) > 2 else None)
            spec = items[0] if items else None
        if _numel(spec) > 0:
            return spec, HOST if placement is None and spec.get("device") in (None, "cpu") \
                else placement
    return None, None


def _states(named: Named) -> List[tuple]:
    """(state, placements, offsets) data specs of each optimizer state of the call: the pt2
    lookup's ``momentumN`` list ``[state, placements, offsets]``, or the backward's
    ``momentumN_host``/``_dev``/``_uvm`` with ``momentumN_placements`` and ``_offsets``."""
    out = []
    for n in (1, 2):
        name = f"momentum{n}"
        spec = named.get(name)
        if isinstance(spec, dict) and spec.get("type") == "genericlist":
            items = list(spec.get("value") or []) + [None, None, None]
            out.append(tuple(items[:3]))
            continue
        state = next((named[f"{name}_{where}"] for where in ("host", "dev", "uvm")
                      if _numel(named.get(f"{name}_{where}")) > 0), None)
        if state is not None:
            out.append((state, named.get(f"{name}_placements"), named.get(f"{name}_offsets")))
    return out


def _give_states(named: Named, rows: List[int], dim: int, placement: Optional[int]) -> None:
    """Each optimizer state's placements (the weights') and offsets (where each table's state
    starts: row starts for one value per row, element starts for one per weight)."""
    starts = [sum(rows[:t]) for t in range(len(rows))]
    for state, placements, offsets in _states(named):
        if _numel(offsets) != len(rows):
            continue
        if _numel(state) == sum(rows):
            _give(offsets, starts)
        elif _numel(state) == sum(rows) * dim:
            _give(offsets, [start * dim for start in starts])
        else:
            continue
        if placement is not None and _numel(placements) == len(rows):
            _give(placements, [placement] * len(rows))


def tbe_rule(named: Named) -> Optional[str]:
    """Fill in a TBE call's metadata values, index range and offsets (in place); a reason
    when it cannot be replayed from shapes."""
    if _tensor(named.get("B_offsets")) is not None:
        return "variable batch sizes per feature (B_offsets) are data, not shapes"
    tables = _tables(named)
    indices, offsets = _tensor(named.get("indices")), _tensor(named.get("offsets"))
    if not tables or indices is None or offsets is None or len(offsets["shape"]) != 1:
        return None  # not a lookup over tables: nothing to make
    total = _numel(indices)
    batch, extra = divmod(offsets["shape"][0] - 1, tables)
    if extra or batch < 0:
        return f"{offsets['shape'][0]} offsets do not make {tables} tables x B samples + 1"
    weights, placement = _weights(named)
    if weights is None:  # bounds_check_indices: the row counts only bound the indices
        rows = [max(total, 1)] * tables
        dim = None
    else:
        dim = _int(named.get("max_D"))
        width = _int(named.get("total_D"))
        grad = _tensor(named.get("grad_output"))
        if width is None and grad is not None and len(grad["shape"]) == 2:
            width = grad["shape"][1]
        if not dim or (width is not None and width != tables * dim):
            return ("tables of different widths (total_D != T x max_D): each table's width "
                    "is data, not shapes")
        if _numel(weights) % dim:
            return f"{_numel(weights)} weights are not rows of {dim}"
        rows = fixed_lengths(_numel(weights) // dim, tables)
        if min(rows) == 0:
            return f"{_numel(weights) // dim} rows cannot fill {tables} tables"
    starts = [sum(rows[:t]) for t in range(tables + 1)]
    made = {"rows_per_table": rows, "hash_size_cumsum": starts}
    if dim is not None:
        made.update(D_offsets=[t * dim for t in range(tables + 1)],
                    weights_offsets=[start * dim for start in starts[:-1]],
                    weights_placements=[placement] * tables)
    for name in _METADATA:
        if name in made and _numel(named.get(name)) == len(made[name]):
            _give(named[name], made[name])
    if dim is not None:
        _give_states(named, rows, dim, placement)
    # A recorded range is kept where every rebuilt table holds it (tables were not all as
    # large as the smallest rebuilt one: its top would read past some table's end).
    low, high = indices.get("value_range") or (0, min(rows) - 1)
    indices["value_range"] = [max(0, min(low, min(rows) - 1)), min(high, min(rows) - 1)]
    offsets.pop("value_range", None)
    offsets["bags"] = {"indices": total, "bags": tables * batch, "as": "offsets_with_end"}
    return None

"""Index structure carried upstream: a conversion that feeds a structured index gets it too.

The capture's rules give an integer argument the structure its op needs (``index_rules``,
``tbe_rules``): a table-batched embedding's offsets are a ``bags`` view, its metadata exact
``values``. But in a step an index often reaches that op through a call that only converts
or copies it (``offsets.to(torch.int64)`` in fbgemm's module, ``_to_copy``, ``clone``,
``contiguous``), and the step replay feeds the op that call's output, made from the call's
own input, which no rule touched. A trace records such a ``to`` even where it returned its
input: an execution trace of fbgemm's TBE with a dense MLP fed fbgemm offsets made from
PARAM's default integers in [-10, 10), ``bounds_check_indices`` clamped them into mostly
empty bags, and the replayed backward ran 2.5 ms against 4.4 ms in the real step.

``carry_structure`` gives such a call's input the structure of the argument its output
feeds (where both are integer tensors of as many elements), following chains of them: a
structure (``values``, ``bags``, ``pool_window``) replaces a range, a range fills in where
there was nothing. A call folded into one config with others gets it for all of them.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Sequence

#: Calls whose first output holds their first input's values.
PASS_THROUGH = frozenset(("aten::to", "aten::_to_copy", "aten::clone", "aten::contiguous",
                          "aten::detach", "aten::alias", "aten::lift_fresh",
                          "aten::_to_dim_order_copy"))
#: Keys that say what an integer tensor's values are, strongest first.
STRUCTURES = ("values", "bags", "pool_window")
RANGES = ("value_range", "distribution")
INTEGER_DTYPES = frozenset(("int", "long", "short", "char", "byte", "int8", "int16", "int32",
                            "int64", "uint8"))


def _strength(spec: Dict[str, Any]) -> int:
    if any(key in spec for key in STRUCTURES):
        return 2
    return 1 if any(key in spec for key in RANGES) else 0


def _numel(spec: Dict[str, Any]) -> Optional[int]:
    shape = spec.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                              for d in shape):
        return None
    count = 1
    for dim in shape:
        count *= dim
    return count


def _arg(entry: Dict[str, Any], path: Sequence[Any]) -> Optional[Dict[str, Any]]:
    """The integer tensor spec at ``path`` in a config's args/kwargs, or None."""
    if not path:
        return None
    head = path[0]
    if isinstance(head, int) and not isinstance(head, bool):
        args = entry.get("args") or []
        spec = args[head] if 0 <= head < len(args) else None
    else:
        spec = (entry.get("kwargs") or {}).get(head)
    for index in path[1:]:
        items = spec.get("value") if isinstance(spec, dict) else None
        spec = items[index] if isinstance(items, list) and isinstance(index, int) \
            and 0 <= index < len(items) else None
    if isinstance(spec, dict) and spec.get("type") == "tensor" \
            and spec.get("dtype") in INTEGER_DTYPES:
        return spec
    return None


def carry_structure(configs: Dict[Any, Dict[str, Any]], calls: List[Dict[str, Any]]) -> int:
    """Give each pass-through call's input the structure of what its output feeds, in place;
    ``configs`` maps a step call's ``config`` to its spec entry (``args``, ``kwargs``),
    ``calls`` are the step recorder's. How many inputs it gave one."""
    given = 0
    for entry in reversed(calls):  # a consumer before its producers: chains carry in one pass
        consumer = configs.get(entry.get("config"))
        if consumer is None:
            continue
        for path, producer, out in entry.get("in") or []:
            if not isinstance(producer, int) or not 0 <= producer < len(calls) \
                    or list(out) != [0]:
                continue
            source = calls[producer]
            config = source.get("config")
            if not config or config[0] not in PASS_THROUGH or configs.get(config) is None:
                continue
            fed, made_from = _arg(consumer, path), _arg(configs[config], [0])
            if fed is None or made_from is None or _numel(fed) is None \
                    or _numel(fed) != _numel(made_from) \
                    or _strength(fed) <= _strength(made_from):
                continue
            for key in STRUCTURES + RANGES:
                made_from.pop(key, None)
            for key in STRUCTURES + RANGES:
                if key in fed:
                    made_from[key] = copy.deepcopy(fed[key])
            given += 1
    return given

"""A small sample of a captured spec: each operator's smallest config, to check replay quickly."""

from __future__ import annotations

from typing import Any, Dict


def _elements(item: Dict[str, Any]) -> int:
    """Tensor elements an arg-spec-list's positional tensors hold."""
    total = 0
    for arg in item.get("args", []):
        if isinstance(arg, dict) and arg.get("type") == "tensor":
            count = 1
            for dim in arg.get("shape", []):
                count *= dim if isinstance(dim, int) else 1
            total += count
    return total


def smallest_per_op(spec: Dict[str, Any]) -> Dict[str, Any]:
    """``spec`` with one input per operator: the one with the fewest tensor elements (the first
    such when several tie). Proves each operator replays without replaying a whole workload."""
    sample = {}
    for op, entry in spec.items():
        config, item = min(((config, item) for config in entry["config"]
                            for item in config["input"]), key=lambda pair: _elements(pair[1]))
        sample[op] = {**entry, "config": [{**config, "input": [item]}]}
    return sample

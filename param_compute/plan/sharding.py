"""Scale-out: each process runs a deterministic, cost-balanced slice of the expanded runs.

A shard comes from ``--shard I/N`` or, under ``torchrun``, from ``RANK``/``WORLD_SIZE`` (with
``LOCAL_RANK`` picking the GPU: ``-d cuda`` becomes ``cuda:LOCAL_RANK``). Every process expands
the whole plan (pure Python, no tensors), estimates each run's cost from its shapes
(:func:`param_compute.plan.summary.estimate_cost`) and assigns runs to shards by the greedy
longest-processing-time rule: most expensive first (plan order breaking ties), each to the
least-loaded shard (lowest index breaking ties). Every process computes the same assignment, so
they need no communication; each keeps its own runs through the session's selection
(``plan.selection``) and writes its own results file next to ``--output`` (``out.json`` ->
``out.shard0of2.json``).

The shard's header says which shard it is and how to put the runs back in plan order, for
``python -m param_compute.analysis.merge``.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Set

from param_compute.plan.summary import estimate_cost
from param_compute.errors import OptionsError
from param_compute.plan.runplan import PlannedRun, plan_runs
from param_compute.plan.runkey import id_order


@dataclass(frozen=True)
class Shard:
    index: int
    count: int
    source: str  # "--shard" or "torchrun"
    local_rank: Optional[int] = None

    @property
    def tag(self) -> str:
        return f"shard{self.index}of{self.count}"

    def path(self, path: Path) -> Path:
        """``out.json`` -> ``out.shard0of2.json`` (beside it)."""
        return tagged(path, self.tag)

    def device(self, device: str) -> str:
        """Under torchrun a bare ``cuda`` means this process's GPU, ``cuda:LOCAL_RANK``."""
        return local_device(device, self.local_rank)


def tagged(path: Path, tag: str) -> Path:
    """``out.json`` -> ``out.TAG.json`` beside it (``out`` -> ``out.TAG``)."""
    path = Path(path)
    if path.suffix:
        return path.with_name(f"{path.stem}.{tag}{path.suffix}")
    return path.with_name(f"{path.name}.{tag}")


def local_device(device: str, local_rank: Optional[int]) -> str:
    """A bare ``cuda`` is this process's GPU under torchrun, ``cuda:LOCAL_RANK``."""
    if device == "cuda" and local_rank is not None:
        return f"cuda:{local_rank}"
    return device


def _env_int(environ: Mapping[str, str], name: str) -> Optional[int]:
    value = environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise OptionsError(f"environment variable {name}={value!r} is not an integer") from None


def resolve_shard(text: Optional[str], environ: Mapping[str, str] = os.environ
                  ) -> Optional[Shard]:
    """The shard this process runs: ``--shard I/N`` first, else torchrun's variables, else
    None (the whole plan). A torchrun world of one process is not sharded."""
    local_rank = _env_int(environ, "LOCAL_RANK")
    if text is not None:
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if not match:
            raise OptionsError(f"--shard takes I/N (shard I of N, counted from 0), got {text!r}")
        index, count = int(match.group(1)), int(match.group(2))
        if count < 1 or index >= count:
            raise OptionsError(f"--shard {text}: needs N >= 1 and 0 <= I < N")
        return Shard(index, count, "--shard", local_rank)
    world, rank = _env_int(environ, "WORLD_SIZE"), _env_int(environ, "RANK")
    if world is None or rank is None or world <= 1:
        return None
    if not 0 <= rank < world:
        raise OptionsError(f"RANK={rank} is outside WORLD_SIZE={world}")
    return Shard(rank, world, "torchrun", local_rank)


def lpt_assign(costs: List[float], count: int) -> List[int]:
    """Shard index of each item: longest processing time first onto the least-loaded shard.

    Deterministic: costs sort descending with the item's position breaking ties, and equal
    loads go to the lowest shard index. Each of the first ``count`` items opens a new shard, so
    no shard is empty while there are at least ``count`` items."""
    owner = [0] * len(costs)
    loads = [(0.0, shard) for shard in range(count)]
    heapq.heapify(loads)
    for position in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        load, shard = heapq.heappop(loads)
        owner[position] = shard
        heapq.heappush(loads, (load + costs[position], shard))
    return owner


@dataclass
class ShardPlan:
    shard: Shard
    keys: Set[str]  # run.key of the runs this shard owns
    total_runs: int
    cost: float
    total_cost: float
    shard_costs: List[float]
    ops: List[str]
    plan_digest: str
    natural_order: bool
    positions: Dict[str, int] = field(default_factory=dict)  # only when not natural

    def wants(self, run: PlannedRun) -> bool:
        """Run filter for the engine: this shard's runs only."""
        return run.key in self.keys

    def header(self) -> Dict[str, Any]:
        """The ``shard`` entry of this shard's results header."""
        out: Dict[str, Any] = {
            "index": self.shard.index, "count": self.shard.count, "source": self.shard.source,
            "runs": len(self.keys), "total_runs": self.total_runs,
            "estimated_cost": self.cost, "estimated_total_cost": self.total_cost,
            "estimated_shard_costs": self.shard_costs,
            "assignment": "lpt-estimated-cost", "ops": self.ops,
            "plan_digest": self.plan_digest,
            "order": "natural" if self.natural_order else "positions",
        }
        if self.shard.local_rank is not None:
            out["local_rank"] = self.shard.local_rank
        if not self.natural_order:
            out["positions"] = self.positions
        return out


def plan_shard(spec, registries, device: str, shard: Shard) -> ShardPlan:
    """Expand the whole plan once (no tensors) and pick this shard's runs."""
    keys: List[str] = []
    costs: List[float] = []
    ops = [op.name for op in spec.operators]
    places = {name: place for place, name in reversed(list(enumerate(ops)))}
    digest = hashlib.sha256()
    natural = True
    previous = None
    for run in plan_runs(spec, registries.config_iterators, device):
        key = run.key
        keys.append(key)
        costs.append(estimate_cost(run.op_name, run.config()))
        digest.update(key.encode("utf-8") + b"\n")
        if natural:
            order = id_order(places, run.op_name, run.id)
            natural = previous is None or order > previous
            previous = order
    owner = lpt_assign(costs, shard.count)
    shard_costs = [0.0] * shard.count
    for position, cost in enumerate(costs):
        shard_costs[owner[position]] += cost
    mine = {keys[i] for i in range(len(keys)) if owner[i] == shard.index}
    plan = ShardPlan(shard, mine, len(keys), shard_costs[shard.index], sum(costs), shard_costs,
                     ops, digest.hexdigest(), natural)
    if not natural:
        plan.positions = {keys[i]: i for i in range(len(keys)) if owner[i] == shard.index}
    return plan

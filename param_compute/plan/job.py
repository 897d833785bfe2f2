"""A job's plan for one rank: which runs it takes part in, with its own arguments, in which order.

A spec that names collectives or holds ``__process_groups__`` (``spec.job``) is a job: under
torchrun it is not sharded (``plan.sharding``), every rank runs its own part of it. The rank
comes from torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (none: one rank, world size 1); a
world size other than the job's is refused with one line (``resolve_rank``).

The rank's runs (``JobPlan.order``), in this order, the same on every rank:

1. the collective configs of the groups it belongs to, in spec order: each is measured on all
   its members at once (a barrier before each sample, the slowest rank's time), so every rank
   must reach them together, before any rank-specific work (sends and receives are replayed
   in the step only: each needs the other side);
2. the step replay (``--replay-step``), which every rank starts together;
3. the compute configs the rank ran (``ranks`` of a captured job; every config of a
   hand-written spec), measured alone, with no collective after them to wait at.

Each run's input is the rank's (``spec.job.for_rank``): its count, original times and, for a
collective, its own arguments. Torch-free.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

from param_compute.errors import OptionsError
from param_compute.operators.collectives import WORLD, is_collective, kind_of

#: Point-to-point kinds: replayed in the step, never measured alone (a send needs its recv).
STEP_ONLY = frozenset({"send", "recv"})
from param_compute.plan.runplan import PlannedRun
from param_compute.plan.sharding import local_device, tagged
from param_compute.spec.job import for_rank


def is_job(spec) -> bool:
    """Whether a validated spec is a job (collectives, or ``__process_groups__``)."""
    return getattr(spec, "process_groups", None) is not None or any(
        is_collective(op.name) for op in spec.operators)


@dataclass(frozen=True)
class JobRank:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: Optional[int] = None
    #: "torchrun"; "single": no torchrun, a world of one; "dry-run": planned as rank 0 of
    #: the job's world, outside torchrun
    source: str = "torchrun"

    @property
    def tag(self) -> str:
        return f"rank{self.rank}of{self.world_size}"

    def path(self, path: Path) -> Path:
        """``out.json`` -> ``out.rank0of2.json`` (a world of one, or a dry run outside
        torchrun, keeps ``out.json``)."""
        if self.world_size == 1 or self.source == "dry-run":
            return Path(path)
        return tagged(path, self.tag)

    def device(self, device: str) -> str:
        """A bare ``cuda`` is this rank's GPU, ``cuda:LOCAL_RANK``."""
        return local_device(device, self.local_rank)

    def header(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"rank": self.rank, "world_size": self.world_size,
                               "source": self.source}
        if self.local_rank is not None:
            out["local_rank"] = self.local_rank
        return out


def _env_int(environ: Mapping[str, str], name: str) -> Optional[int]:
    value = environ.get(name)
    if value is None or value == "":
        return None
    if not re.fullmatch(r"\s*\d+\s*", value):
        raise OptionsError(f"environment variable {name}={value[:40]!r} is not an integer")
    return int(value)


def job_world_size(spec) -> Optional[int]:
    """The world size the job was captured on (None: any, a hand-written collective spec)."""
    groups = getattr(spec, "process_groups", None) or {}
    size = groups.get("world_size")
    return size if isinstance(size, int) else None


def resolve_rank(spec, source: str, environ: Mapping[str, str] = os.environ,
                 dry_run: bool = False) -> JobRank:
    """This process's rank of the job ``spec`` (from ``source``); ``OptionsError`` (one line)
    where the world size is not the job's."""
    world, rank = _env_int(environ, "WORLD_SIZE"), _env_int(environ, "RANK")
    local = _env_int(environ, "LOCAL_RANK")
    if world is None or rank is None:
        world, rank, how = 1, 0, "single"
    else:
        how = "torchrun"
        if not 0 <= rank < world:
            raise OptionsError(f"RANK={rank} is outside WORLD_SIZE={world}")
    wanted = job_world_size(spec)
    if wanted is not None and wanted != world and dry_run and how == "single":
        return JobRank(0, wanted, local, "dry-run")  # planned as rank 0 of the job's world
    if wanted is not None and wanted != world:
        raise OptionsError(
            f"{source} is a job of {wanted} rank(s) and this run has {world}: start it with "
            f"{wanted} in all (torchrun --nproc_per_node {wanted} -m "
            "param_compute.run_benchmark -c ..., or --nnodes x --nproc_per_node = "
            f"{wanted})")
    return JobRank(rank, world, local, how)


def group_members(spec, name: str, world_size: int) -> List[int]:
    """The global ranks of a group the spec names (``world``: every rank)."""
    groups = (getattr(spec, "process_groups", None) or {}).get("groups") or {}
    if name == WORLD or name not in groups:
        return list(range(world_size))
    return list(groups[name].get("ranks") or [])


def group_name(config_input: Dict[str, Any]) -> str:
    """The group a collective's expanded input names (``world`` by default)."""
    spec = (config_input.get("kwargs") or {}).get("group")
    value = spec.get("value") if isinstance(spec, dict) else None
    return value if isinstance(value, str) else WORLD


class JobPlan:
    """One rank's part of a job's plan (see the module's doc)."""

    def __init__(self, spec, job_rank: JobRank):
        self.spec = spec
        self.job_rank = job_rank

    def mine(self, run: PlannedRun) -> Optional[PlannedRun]:
        """The run as this rank makes it, or None where it takes no part in it."""
        if run.step is not None:
            return run
        config_input = for_rank(run.input, self.job_rank.rank) if isinstance(
            run.input, dict) else run.input
        if config_input is None:
            return None
        if is_collective(run.op_name) and self.job_rank.rank not in group_members(
                self.spec, group_name(config_input), self.job_rank.world_size):
            return None
        return run if config_input is run.input else run._replace(input=config_input)

    def order(self, runs: Iterable[PlannedRun], extra: Sequence[PlannedRun] = ()
              ) -> Iterator[PlannedRun]:
        """Collectives, then the extra runs (the step), then compute: see the module's doc."""
        compute: List[PlannedRun] = []
        for run in runs:
            mine = self.mine(run)
            if mine is None:
                continue
            kind = kind_of(mine.op_name)
            if kind is not None:
                if kind.name not in STEP_ONLY:
                    yield mine
            else:
                compute.append(mine)
        yield from extra
        yield from compute

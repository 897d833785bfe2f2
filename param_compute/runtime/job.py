"""A job's rank at run time: its process groups built like the original's, and how it breaks.

``Job.start`` joins the job's default process group (torchrun's rendezvous through ``env://``:
``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE``, across nodes too; without torchrun a
world of one in this process) and builds every group of ``__process_groups__`` with the same
members, in the same order on every rank (``torch.distributed.new_group``; a group of every
rank is the default group). The backend comes from a fixed table by the run's device
(``BACKENDS``: gloo on the CPU, nccl on CUDA) or ``--dist-backend``; a recorded backend is
never imported or looked up by name. Collectives then find their groups by name
(``operators.collective_ops.install_groups``).

Each collective and barrier has the run's ``--dist-timeout``: a rank that dies (its peers' next
collective fails at once: the connection closed) or a collective that never completes (the
timeout) ends every rank with ``JobBroken``: one message naming this rank, the call and the
ranks that stopped answering (``who_is_gone``: each rank still able to reports in on the job's
store), after which the run ends, every record measured before kept.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from typing import Any, Dict, List, Mapping, Optional, Tuple

from param_compute.errors import JobBroken, OptionsError
from param_compute.operators.collective_ops import Groups, install_groups
from param_compute.operators.collectives import WORLD
from param_compute.plan.job import JobRank

log = logging.getLogger("param_compute")

#: The backend of a job's groups by the run's device kind: a fixed table.
BACKENDS = {"cpu": "gloo", "cuda": "nccl"}
#: torch's name for the default process group (``pg_config``'s ``pg_name``).
TORCH_DEFAULT = "0"
#: What ``--dist-backend`` may name.
CHOICES = ("auto", "gloo", "nccl")
#: How long the ranks still answering have to report in after a failure (s).
REPORT_IN_S = 2.0


def backend_for(device: str, asked: str = "auto") -> str:
    """The backend of the job's groups: ``asked``, or by the device (``BACKENDS``)."""
    if asked not in CHOICES:
        raise OptionsError(f"--dist-backend {asked!r}: write one of {', '.join(CHOICES)}")
    if asked != "auto":
        if asked == "nccl" and not device.startswith("cuda"):
            raise OptionsError("--dist-backend nccl runs collectives on CUDA tensors: give "
                               "-d cuda (or --dist-backend gloo)")
        return asked
    return BACKENDS["cuda" if device.startswith("cuda") else "cpu"]


def rank_device(device: str, job_rank: JobRank) -> str:
    """The device this rank runs on: a bare ``cuda`` is ``cuda:LOCAL_RANK``."""
    return job_rank.device(device)


def backend_error(exc: BaseException) -> str:
    """A backend's error in a few words: its first line without the source location gloo
    prefixes (``[.../pair.cc:537] ``) or the advice it appends."""
    text = (str(exc).strip().splitlines() or [""])[0]
    if text.startswith("[") and "]" in text and ".cc:" in text.split("]", 1)[0]:
        text = text.split("]", 1)[1].strip()
    for advice in (" This is typically", " Check the logs"):
        if advice in text:
            text = text.split(advice, 1)[0].strip()
    return text[:300] or type(exc).__name__


def group_plan(process_groups: Optional[Dict[str, Any]], world_size: int
               ) -> List[Tuple[str, List[int], bool]]:
    """(name, ranks, is the default group) for every group to make, in the same order on every
    rank (by name); ``world`` always, as the default group, and torch's name for it, ``0``,
    where the spec names no group ``0`` (a capture's collectives name the group they ran on)."""
    out: List[Tuple[str, List[int], bool]] = [(WORLD, list(range(world_size)), True)]
    groups = (process_groups or {}).get("groups") or {}
    if TORCH_DEFAULT not in groups:
        out.append((TORCH_DEFAULT, list(range(world_size)), True))
    for name in sorted(groups):
        if name == WORLD:
            continue
        ranks = sorted(groups[name].get("ranks") or [])
        out.append((name, ranks, ranks == list(range(world_size))))
    return out


class Job:
    """This process's rank of a running job (see the module's doc)."""

    def __init__(self, job_rank: JobRank, backend: str, timeout_s: float,
                 process_groups: Optional[Dict[str, Any]] = None):
        self.job_rank = job_rank
        self.backend = backend
        self.timeout_s = timeout_s
        self.process_groups = process_groups
        self.groups: Optional[Groups] = None
        self._owns_group = False
        self._token = "0"

    @classmethod
    def start(cls, job_rank: JobRank, device: str, asked_backend: str, timeout_s: float,
              process_groups: Optional[Dict[str, Any]] = None,
              environ: Mapping[str, str] = os.environ) -> "Job":
        """Join the job (``init_process_group``) and build its groups; ``JobBroken`` where the
        rendezvous fails."""
        import torch.distributed as dist

        if not dist.is_available():
            raise OptionsError("this torch build has no torch.distributed: a job cannot run")
        job = cls(job_rank, backend_for(device, asked_backend), timeout_s, process_groups)
        timeout = timedelta(seconds=timeout_s)
        try:
            if not dist.is_initialized():
                if job_rank.source == "single":
                    dist.init_process_group(job.backend, store=dist.HashStore(), rank=0,
                                            world_size=1, timeout=timeout)
                else:
                    dist.init_process_group(job.backend, init_method="env://",
                                            rank=job_rank.rank,
                                            world_size=job_rank.world_size, timeout=timeout)
                job._owns_group = True
            job._build_groups(dist, timeout)
            job._token = job._agree_token(dist)
        except (RuntimeError, ValueError, TimeoutError) as exc:
            job.close()
            raise JobBroken(f"rank {job_rank.rank}: joining the job of "
                            f"{job_rank.world_size} rank(s) failed: "
                            f"{str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}"
                            ) from None
        return job

    def _build_groups(self, dist, timeout: timedelta) -> None:
        groups: Dict[str, Any] = {}
        members: Dict[str, List[int]] = {}
        for name, ranks, default in group_plan(self.process_groups,
                                               self.job_rank.world_size):
            members[name] = ranks
            if default:
                groups[name] = None
                continue
            # every rank makes every group (a non-member gets torch's no-op placeholder)
            groups[name] = dist.new_group(ranks, timeout=timeout, backend=self.backend)
        self.groups = Groups(groups, members, self.job_rank.rank)
        install_groups(self.groups)

    def _agree_token(self, dist) -> str:
        """A number every rank of this run shares, naming its keys on the job's store."""
        store = self._store(dist)
        if store is None:
            return "0"
        key = "param_compute/jobs"
        if self.job_rank.rank == 0:
            store.add(key, 1)
        dist.barrier()
        return str(store.add(key, 0))

    @staticmethod
    def _store(dist):
        try:
            return dist.distributed_c10d._get_default_store()
        except (RuntimeError, ValueError, AttributeError):
            return None

    def who_is_gone(self, wait_s: float = REPORT_IN_S) -> Optional[List[int]]:
        """After a failure: the ranks that did not report in on the job's store within
        ``wait_s`` (each rank still able to reports in when it fails); None where the store
        itself is gone (its host, rank 0 without torchrun, ended)."""
        import torch.distributed as dist

        store = self._store(dist)
        if store is None:
            return None
        prefix = f"param_compute/{self._token}/alive/"
        try:
            store.set(f"{prefix}{self.job_rank.rank}", "1")
            others = [r for r in range(self.job_rank.world_size) if r != self.job_rank.rank]
            deadline = time.monotonic() + wait_s
            missing = others
            while missing and time.monotonic() < deadline:
                missing = [r for r in missing if not store.check([f"{prefix}{r}"])]
                if missing:
                    time.sleep(0.05)
            return missing
        except (RuntimeError, ValueError, TimeoutError, OSError):
            return None

    def broken(self, where: str, exc: BaseException) -> JobBroken:
        """The one message for a failed collective ``where`` (the call and its group)."""
        text = backend_error(exc)
        timed_out = "timed out" in text.lower() or "timeout" in text.lower()
        gone = self.who_is_gone()
        if gone is None:
            who = "the job's store is gone: rank 0 (which holds it) ended"
        elif gone:
            who = (f"rank{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))} "
                   f"{'are' if len(gone) > 1 else 'is'} gone or hung")
        else:
            who = "every rank still answers"
        how = (f"did not complete within --dist-timeout {self.timeout_s:g} s" if timed_out
               else "failed")
        return JobBroken(f"rank {self.job_rank.rank}: {where} {how} ({who}): {text}")

    def close(self) -> None:
        """Leave the job: forget its groups, destroy the process groups it made."""
        install_groups(None)
        if self._owns_group:
            import torch.distributed as dist

            try:
                if dist.is_initialized():
                    dist.destroy_process_group()
            except (RuntimeError, ValueError):
                log.debug("destroying the job's process group failed", exc_info=True)
            self._owns_group = False

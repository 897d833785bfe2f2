"""The collective operator: a spec's collective run through ``torch.distributed`` on the job's groups.

``CollectiveOperator(kind)`` (``operators.collectives``: the kinds and their names) binds a
config's tensors and keywords once, outside the timed region, to one ``torch.distributed`` call
on a process group the job built (``install_groups``: the run side's ``runtime.job`` hands the
groups in by name; nothing here creates one). ``bind_forward`` issues the collective and waits
for it (what a comms benchmark times); ``bind_async`` issues it and hands its work back, for the
step replay to wait where the original waited. Either returns what the ``c10d::`` op returns
(``([tensor], work)`` for ``allreduce_``, ``(output, work)`` for ``_allgather_base_``, ...), so a
step's output paths name the same tensors. Reductions come from the fixed ``REDUCE_OPS`` table.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

from param_compute.operators.collectives import KINDS, REDUCE_OPS, WORLD, Kind
from param_compute.plugins.interfaces import OperatorInterface


class NoJob(RuntimeError):
    """A collective run where no job built its process groups."""


class Groups:
    """The job's process groups by name (``__process_groups__``), and this rank in each."""

    def __init__(self, groups: Dict[str, Any], members: Dict[str, List[int]], rank: int):
        self.groups = groups  # name -> ProcessGroup (None: the default, every rank)
        self.members = members  # name -> global ranks
        self.rank = rank

    def group(self, name: str) -> Any:
        if name not in self.groups:
            known = ", ".join(sorted(self.groups)) or "none"
            raise KeyError(f"no process group {name!r} in the job (its groups: {known})")
        return self.groups[name]

    def size(self, name: str) -> int:
        return len(self.members.get(name) or [])


_GROUPS: Optional[Groups] = None


def install_groups(groups: Optional[Groups]) -> None:
    """The job's groups for every collective bound from now on (None: no job)."""
    global _GROUPS
    _GROUPS = groups


def installed_groups() -> Optional[Groups]:
    return _GROUPS


def reduce_op(name: Any):
    """``torch.distributed.ReduceOp`` of a spec's ``op`` name (a fixed table)."""
    import torch.distributed as dist

    text = str(name).lower()
    if text not in REDUCE_OPS:
        raise ValueError(f"op {str(name)[:40]!r} is no reduction; write one of "
                         f"{', '.join(REDUCE_OPS)}")
    return getattr(dist.ReduceOp, text.upper())


class CollectiveOperator(OperatorInterface):
    """One collective kind; its calls run on the job's groups (``install_groups``)."""

    supports_backward = False

    def __init__(self, kind: str):
        self.kind: Kind = KINDS[kind]

    # -- binding -------------------------------------------------------------------------------
    def _group(self, kwargs: Dict[str, Any]) -> Tuple[Any, str]:
        groups = _GROUPS
        if groups is None:
            raise NoJob(f"{self.kind.name} is a collective: it runs in a job, under torchrun "
                        "(torchrun --nproc_per_node N -m param_compute.run_benchmark -c SPEC)")
        name = str(kwargs.get("group", WORLD))
        return groups.group(name), name

    def _call(self, args: List[Any], kwargs: Dict[str, Any]) -> Tuple[Callable, List[Any],
                                                                         Dict[str, Any]]:
        """(the torch.distributed function, its args, its kwargs) with ``async_op`` left out."""
        import torch.distributed as dist

        kind = self.kind
        group, _ = self._group(kwargs)
        extra = {key: kwargs[key] for key in kind.keywords if key in kwargs}
        unknown = set(kwargs) - set(kind.keywords) - {"group", "async_op"}
        if unknown:
            raise TypeError(f"{kind.name} takes no keyword {sorted(unknown)[0]!r} (it takes "
                            f"group, async_op{''.join(', ' + k for k in kind.keywords)})")
        if "op" in extra:
            extra["op"] = reduce_op(extra["op"])
        needed = [a for a in kind.args if not a.endswith("?")]
        if len(args) < len(needed) or len(args) > len(kind.args):
            raise TypeError(f"{kind.name} takes {len(needed)} positional argument(s) "
                            f"({', '.join(kind.args) or 'none'}), got {len(args)}")
        for index, (form, value) in enumerate(zip(kind.args, args)):
            # a tensor's type is torch's to check when the call runs (a step replay binds
            # placeholders for the tensors earlier calls feed); lists must be lists
            if form == "tensors" or (form == "tensors?" and value is not None):
                if not isinstance(value, (list, tuple)):
                    raise TypeError(f"{kind.name} argument {index} must be a list of tensors")
        function = getattr(dist, kind.name)
        if kind.name in ("send", "recv"):
            function = dist.isend if kind.name == "send" else dist.irecv
        return function, list(args), {"group": group, **extra}

    def bind_forward(self, args: List[Any], kwargs: Dict[str, Any]) -> Callable[[], Any]:
        """Issue and wait: the collective's whole time (a comms benchmark's sample)."""
        function, call_args, call_kwargs = self._call(args, kwargs)
        return functools.partial(_issue_wait, self.kind.name, function, *call_args,
                                 **call_kwargs)

    def bind_async(self, args: List[Any], kwargs: Dict[str, Any]) -> Callable[[], Any]:
        """Issue only: returns ``(the c10d op's result, work)``; the caller waits the work."""
        function, call_args, call_kwargs = self._call(args, kwargs)
        return functools.partial(_issue, self.kind.name, function, *call_args, **call_kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.bind_forward(list(args), dict(kwargs))()

    def estimate_output_bytes(self, *args: Any, **kwargs: Any) -> Optional[int]:
        return 0  # in place: a collective writes into tensors it is given


def _start(name: str, function: Callable, args: Tuple[Any, ...], kwargs: Dict[str, Any]):
    if name in ("send", "recv"):
        return function(*args, **kwargs)
    return function(*args, async_op=True, **kwargs)


def _result(name: str, args: Tuple[Any, ...], work: Any) -> Any:
    """What the ``c10d::`` op of this kind returns, the work in the Work's place."""
    if name in ("all_reduce", "broadcast"):
        return [args[0]], work
    if name in ("all_gather_into_tensor", "reduce_scatter_tensor"):
        return args[0], work
    if name == "all_gather":
        return [list(args[0])], work
    if name == "reduce_scatter":
        return [args[0]], work
    if name == "all_to_all":
        return list(args[0]), work
    return work


def _issue(name: str, function: Callable, *args: Any, **kwargs: Any) -> Tuple[Any, Any]:
    work = _start(name, function, args, kwargs)
    return _result(name, args, work), work


def _issue_wait(name: str, function: Callable, *args: Any, **kwargs: Any) -> Any:
    work = _start(name, function, args, kwargs)
    if work is not None:
        work.wait()
    return _result(name, args, None)

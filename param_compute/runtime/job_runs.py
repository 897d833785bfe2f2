"""A job's runs on one rank: collectives measured across the ranks, the step replayed together.

The executor (``runtime.executor``) hands a job's collective configs and its step replay here.

* A collective config (``execute_collective``) is bound on every member of its group, the
  members agree that each of them could (``agree_ready``: a rank that could not bind its call
  makes it an error record on every member, and the job goes on), then it is measured by the
  run's ``Measurer`` on a clock that keeps the members in step (``measure.ranks``: a barrier
  before each sample, every sample the slowest member's): a comms benchmark's table, with the
  bandwidths nccl-tests defines in the record's ``comms``.
* The step replay (``step_measurer``): every rank builds its own step, the ranks agree that
  all could, and each timed step starts after a barrier; each rank keeps its own step times
  (the step as this rank saw it), the decisions being agreed so that all stop together.

A collective that fails once the ranks agreed (a rank gone, or one that never completes in
``--dist-timeout``) makes the run's error record, then ends the job (``job_failure``: the
executor's ``broken``, raised by the engine after the record is written).
"""

from __future__ import annotations

from typing import Any, List, Optional

import torch

from param_compute.errors import JobBroken
from param_compute.measure.measurer import Measurer
from param_compute.measure.ranks import ranked
from param_compute.operators.collectives import kind_of
from param_compute.plan.job import group_name
from param_compute.plan.runplan import PlannedRun
from param_compute.results.records import STATUS_ERROR, STATUS_OK, RunError, RunRecord


class NotReady(RuntimeError):
    """Some rank of the job could not build its part of a run: an error record everywhere."""


def agree_ready(job, ok: bool, group: Any = None) -> List[int]:
    """Every member says whether it is ready; the ranks that are not (one all-reduce)."""
    import torch.distributed as dist

    flags = torch.zeros(job.job_rank.world_size, dtype=torch.int32)
    flags[job.job_rank.rank] = 0 if ok else 1
    dist.all_reduce(flags, group=group)
    return [rank for rank, flag in enumerate(flags.tolist()) if flag]


def message_bytes(kind, args: List[Any]) -> int:
    """The bytes of the argument nccl-tests counts as the message (``Kind.message_arg``)."""
    if not kind.args:
        return 0
    value = args[kind.message_arg] if kind.message_arg < len(args) else None
    values = value if isinstance(value, (list, tuple)) else [value]
    return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))


def _record(run: PlannedRun, status: str, passes=(), error: Optional[RunError] = None,
            comms=None) -> RunRecord:
    return RunRecord(run.op_name, run.id, run.config(), status, list(passes), error,
                     comms=comms)


def execute_collective(executor, run: PlannedRun) -> RunRecord:
    """One collective config measured on every member of its group (see the module's doc)."""
    job = executor.job
    kind = kind_of(run.op_name)
    name = group_name(run.input)
    op_spec = executor.spec.operators[run.op_index]
    fn = failure = None
    message = 0
    phase = "build"
    try:
        op = executor.built.get(run, op_spec, executor.seed_run)
        phase = "data"
        executor.seed_run(run.key)
        args, kwargs = executor._generator(op_spec.input_data_generator).get_data(
            run.input, executor.options.device)
        phase = "forward"
        fn = op.bind_forward(list(args), dict(kwargs))
        message = message_bytes(kind, list(args))
        group = job.groups.group(name)
    except Exception as exc:  # this rank cannot run it: the members are told, not left waiting
        failure, group = (phase, exc), None
    try:
        missing = agree_ready(job, failure is None, group)
    except RuntimeError as exc:
        executor.broken = job.broken(f"{run.key} (group {name}: agreeing to start)", exc)
        return _record(run, STATUS_ERROR, error=RunError(type(exc).__name__, str(exc)[:500],
                                                         "forward"))
    if failure is not None or missing:
        phase, cause = failure if failure is not None else ("forward", None)
        why = (f"{type(cause).__name__}: {str(cause).splitlines()[0][:300] if str(cause) else ''}"
               if cause is not None else
               f"rank(s) {', '.join(map(str, missing))} of group {name} could not bind it")
        executor.built.release()
        return _record(run, STATUS_ERROR, error=RunError("NotReady" if cause is None else
                                                         type(cause).__name__, why, phase))
    measurer = Measurer(executor.options.measuring(),
                        ranked(executor.device, group, slowest=True), executor.annotator,
                        executor.watch, num_threads=None)
    try:
        result = measurer.measure(fn, None, "forward", (run.op_name, run.id))
    except Exception as exc:  # a collective that fails once all were ready: the job is over
        executor.broken = job.broken(f"{run.key} (measured alone on group {name})", exc)
        return _record(run, STATUS_ERROR, error=RunError(type(exc).__name__,
                                                         str(exc).splitlines()[0][:500]
                                                         if str(exc) else "", "forward"))
    comms = {"kind": kind.name, "group": name, "ranks": job.groups.size(name),
             "bytes": message}
    return _record(run, STATUS_OK, [result], comms=comms)


def step_measurer(executor, replay) -> Measurer:
    """The step's Measurer on a job: the ranks agree that each built its step (``NotReady``
    otherwise), then every timed step starts after a barrier, decisions agreed."""
    job = executor.job
    try:
        missing = agree_ready(job, True)
    except RuntimeError as exc:
        raise JobBroken(str(job.broken("the step replay (agreeing to start)", exc))) from None
    if missing:
        raise NotReady(f"rank(s) {', '.join(map(str, missing))} could not build their step")
    executor.step_agreed = True
    return Measurer(executor.options.measuring(), ranked(replay.device, None, slowest=False),
                    executor.annotator, executor.watch, num_threads=None)


def job_failure(executor, cause: BaseException, what: str) -> Optional[JobBroken]:
    """What a failed step replay means for the job: None (an error record, the job goes on)
    where the ranks never agreed to start it (this rank tells the others it cannot), else the
    job's end, naming the call that failed (or the wait between calls where none did)."""
    job = executor.job
    if isinstance(cause, JobBroken):
        return cause
    if isinstance(cause, NotReady):
        return None
    if not getattr(executor, "step_agreed", False):
        try:
            agree_ready(job, False)
        except RuntimeError:
            pass  # the others may be gone already: their own failure says so
        return None
    call = getattr(cause, "call", None)
    if call is not None:
        where = f"{what}'s calls[{call[0]}] {call[1]}"
    else:  # no call failed: the ranks waited for each other between steps
        where = f"{what}, between its calls (the ranks' barrier before a step, or their " \
                "agreement on a sample)"
    inner = cause.__cause__ if getattr(cause, "call", None) is not None and \
        cause.__cause__ is not None else cause
    return job.broken(where, inner)

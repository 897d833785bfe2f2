"""``run_benchmark --replay-step``: the captured step replayed as a whole, in order.

Isolated replay times each config alone, hot, on inputs it made itself. A step replay runs the
step's calls (``NAME.step.json``, see ``spec.step_file``) in their captured order: each
call's tensor inputs are the outputs of the earlier calls that produced them, so the step
allocates where it allocated and reads what was written long before; only the step's external
tensors (parameters, the batch, outputs of calls that were not captured) are generated, once,
and shared by every call that reads them. A produced tensor is released after its last reader,
or where the step file's ``hold`` says the original released it (a gradient lives on in
``.grad`` until the next step's ``zero_grad``: released as the next replayed step starts).

This module binds and runs the step: ``checked_pass`` (each fed tensor must have the shape and
dtype its reader was captured with; a mismatch or a call that fails gets a generated tensor
instead, and is counted), ``run_step`` (one step; what the ``Measurer`` times, through
``step_callable``), ``run_step_timed`` (one step with the device's clock around every call)
and ``count_faults`` (each call's minor page faults over a few untimed steps). How the step is
measured, with the run's protocol, and what its record says: ``runtime.step_run``.

Collectives (a job's step, ``runtime.job``): a call of a collective runs on the job's group;
one the original issued asynchronously is issued the same way here and its work waited where
the step file says the original waited it (``waits``), or at the step's end; a synchronous
one is issued and waited at once, as torch.distributed does. In the call-timed steps each
collective also gets its communication time (from its issue until its work completed, stamped
by the work's future, as the original's runs to its backend span's end: a synchronous call's
return comes later, when its rank is scheduled again) and the step the time spent waiting for
communication (``communication``).

Host gaps (``--host-gaps``, on a device by default): the replay's own host step is measured,
then what the original's (``real_host_us``) took more is spread over the gaps where its host
spent it (``gap_us``, ``tail_gap_us``: the capture's shape), waited before each call in the
timed steps only (``fit_host_gaps``): launches come at the original host's pace, and a step
whose host fell behind its device leaves the device idle, as the original did.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch

from param_compute.spec.step_file import path_text
from param_compute.results.stats import median
from param_compute.data.generator import materialize, seed_for_run, seed_generators
from param_compute.measure.devices import open_device
from param_compute.runtime.step_gaps import fit_gaps
from param_compute.runtime.step_binding import (Slot, arg_value, locate, output, set_arg,
                                                tensor_spec)
from param_compute.measure.faults import minor_faults
from param_compute.operators.collectives import is_collective

log = logging.getLogger("param_compute")

#: Examples of mismatched dataflow edges and failed calls kept in the record.
MAX_EXAMPLES = 20


@dataclass
class _Call:
    run_key: str
    func: Any
    args: List[Any]
    kwargs: Dict[str, Any]
    #: (container, key, value slot, expected (shape, dtype), arg path) for each fed input.
    fills: List[Tuple[Any, Any, int, Tuple, List[Any]]] = field(default_factory=list)
    outs: List[Tuple[List[int], int]] = field(default_factory=list)  # (output path, slot)
    frees: List[int] = field(default_factory=list)
    failed: Optional[str] = None
    #: Earlier calls whose async work is waited right before this one; whether this call is
    #: an async collective (its work kept until waited).
    waits: Tuple[int, ...] = ()
    issues: bool = False
    collective: bool = False


class StepCallFailed(RuntimeError):
    """A call failed in a timed step (a job's collective: a rank gone, a timeout);
    ``call``: (its index, its run key)."""

    def __init__(self, index: int, run_key: str, cause: BaseException):
        super().__init__(f"calls[{index}] {run_key}: {type(cause).__name__}: "
                         f"{str(cause).splitlines()[0][:300] if str(cause) else ''}")
        self.call = (index, run_key)


def _async(kwargs: Dict[str, Any]) -> bool:
    """Whether a collective's generated kwargs say the original issued it asynchronously."""
    return kwargs.get("async_op") is True


class StepReplay:
    """A step file's calls, bound to built operators and generated external tensors."""

    def __init__(self, step: Dict[str, Any], runs: Dict[str, Any], spec, context,
                 device: Any = None):
        """``runs``: run key -> ``PlannedRun`` for every key the step names; ``device``: the
        opened device to replay on (default: the options', without an L2 flush: a step's own
        cache state is part of it)."""
        self.step = step
        self.options = options = context.options
        self.spec = spec
        self.context = context
        torch.set_num_threads(options.num_threads)
        self.device = device if device is not None else open_device(options.device,
                                                                    flush_l2=False)
        self.clock = self.device.clock
        self.calls: List[_Call] = []
        self.values: List[Any] = []
        self.externals: Dict[int, Any] = {}
        self.mismatches: List[str] = []
        self.mismatch_count = 0
        self.last_output: Any = None
        #: Slots released when the next step starts (outputs that outlived the captured step).
        self.carried: List[int] = []
        self.held = 0  # outputs kept past their last reader (``hold`` in the step file)
        self._plan: Optional[List[Tuple[Any, ...]]] = None  # ``_compiled``
        #: Host gaps (``--host-gaps``), once fitted (``fit_host_gaps``): ns to wait before
        #: each call and after the last.
        self.scheduled = False
        self.waits_ns: List[int] = [0] * len(step["calls"])
        self.tail_wait_ns = 0
        self.gap_fit: Dict[str, Any] = {}
        self._operators: Dict[Any, Any] = {}
        self._generators: Dict[str, Any] = {}
        #: Async collective work by call index, until waited; in call-timed steps, each
        #: collective's issue and completion (ns) and the time spent waiting on work.
        self.works: List[Any] = [None] * len(step["calls"])
        self.pending = False  # some work not waited yet
        self._comm: Optional[Dict[str, Any]] = None
        self._build(runs)
        for op in self._operators.values():  # (a captured graph's eager regions, stashed)
            bound = getattr(op, "step_bound", None)
            if bound is not None:
                bound()
        mode = options.host_gaps  # wanted: the step file has them and the mode asks
        self.wants_gaps = self.step.get("real_host_us") is not None and (mode == "on" or (
            mode == "auto" and getattr(self.clock, "name", "") != "host"
            and self.step.get("real_host_from") != "profiled"))

    def fit_host_gaps(self, replay_host_us: float) -> Dict[str, Any]:
        """The waits for the replay's host step to take the original's (``step_gaps``)."""
        failed = [call.failed is not None for call in self.calls]
        waits, tail, self.gap_fit = fit_gaps(self.step, failed, replay_host_us)
        if waits is not None:
            self.waits_ns, self.tail_wait_ns, self.scheduled = waits, tail, True
            self._plan = None  # the waits are part of the compiled calls
        return self.gap_fit

    def operators(self) -> List[Any]:
        """The built operators the step's calls run (one per build)."""
        return list(self._operators.values())

    # -- building ----------------------------------------------------------------------------
    def _generator(self, name: str):
        if name not in self._generators:
            self._generators[name] = self.context.data_generators[name]()
        return self._generators[name]

    def _operator(self, run):
        op = self._operators.get(run.build_key)
        if op is None:
            op = self.context.operator_factory(run.op_name)()
            op.device = self.options.device
            if run.build:
                op_spec = self.spec.operators[run.op_index]
                seed_generators(seed_for_run(self.options.seed, f"{run.key}|build"),
                                self.options.device)
                args, kwargs = self._generator(op_spec.build_data_generator).get_data(
                    run.build, self.options.device)
                op.build(*args, **kwargs)
            self._operators[run.build_key] = op
        return op

    def _build(self, runs: Dict[str, Any]) -> None:
        self._runs = runs
        entries = self.step["calls"]
        slots: Dict[Tuple[int, Tuple[int, ...]], int] = {}
        last_use: Dict[int, int] = {}
        for index, entry in enumerate(entries):
            for _, producer, out in entry.get("in", []):
                slot = slots.setdefault((producer, tuple(out)), len(slots))
                last_use[slot] = index
        for index, entry in enumerate(entries):  # kept past the last reader, as captured
            for out, until in entry.get("hold", []):
                slot = slots.setdefault((index, tuple(out)), len(slots))
                if until < 0:  # past the step: released when the next one starts
                    self.carried.append(slot)
                    last_use.pop(slot, None)
                else:
                    last_use[slot] = max(last_use.get(slot, index), until)
                self.held += 1
        self.values = [None] * len(slots)
        frees: Dict[int, List[int]] = {}
        for slot, index in last_use.items():
            frees.setdefault(index, []).append(slot)
        outs_of: Dict[int, List[Tuple[List[int], int]]] = {}
        for (producer, out), slot in slots.items():
            outs_of.setdefault(producer, []).append((list(out), slot))
        for index, entry in enumerate(entries):
            call = self._bind_call(index, entry, runs[entry["run"]], slots)
            call.outs = outs_of.get(index, [])
            call.frees = frees.get(index, [])
            self.calls.append(call)

    def _bind_call(self, index: int, entry: Dict[str, Any], run, slots) -> _Call:
        op_spec = self.spec.operators[run.op_index]
        seed_generators(seed_for_run(self.options.seed, run.key), self.options.device)
        try:
            op = self._operator(run)
            args, kwargs = self._generator(op_spec.input_data_generator).get_data(
                run.input, self.options.device)
        except Exception as exc:  # the call cannot be made: its readers get generated data
            return _Call(run.key, None, [], {}, failed=f"{type(exc).__name__}: {exc}")
        args = list(args)
        expected = {}
        for path, producer, out in entry.get("in", []):
            try:
                current = arg_value(args, kwargs, path)
            except (IndexError, KeyError, TypeError):
                self._mismatch(index, run.key, path, "no tensor argument at this path")
                continue
            if not isinstance(current, torch.Tensor):
                self._mismatch(index, run.key, path, "no tensor argument at this path")
                continue
            slot = slots[(producer, tuple(out))]
            try:
                set_arg(args, kwargs, path, Slot(slot))
            except TypeError:  # inside a tuple: the call keeps its generated tensor
                self._mismatch(index, run.key, path, "the argument cannot be fed (a tuple)")
                continue
            expected[slot] = (tuple(current.shape), current.dtype, path)
        for path, number in entry.get("ext", []):
            try:
                current = arg_value(args, kwargs, path)
            except (IndexError, KeyError, TypeError):
                continue
            if not isinstance(current, torch.Tensor):
                continue
            shared = self.externals.get(number)
            if shared is None or shared.shape != current.shape or shared.dtype != current.dtype:
                self.externals.setdefault(number, current)  # the first reader's tensor
                continue
            try:
                set_arg(args, kwargs, path, shared)
            except TypeError:  # inside a tuple: this reader keeps a tensor of its own
                continue
        collective = is_collective(run.op_name)
        asynchronous = collective and _async(kwargs)
        # a collective is issued and its work kept: an async one's until the call that waits
        # it, a synchronous one's waited at once (as torch.distributed does), both timed to
        # their work's completion (the original's backend span's end, not the rank's return)
        bound = op.bind_async(args, kwargs) if collective else op.bind_forward(args, kwargs)
        if isinstance(bound, functools.partial):
            func, bound_args, bound_kwargs = bound.func, list(bound.args), dict(bound.keywords)
        else:  # an operator whose bound call can't be taken apart: its forward, unbound
            func, bound_args, bound_kwargs = op.forward, args, kwargs
        call = _Call(run.key, func, bound_args, bound_kwargs,
                     waits=tuple(entry.get("waits", ())), issues=asynchronous,
                     collective=collective)
        for container, key, slot in locate(bound_args, bound_kwargs):
            shape, dtype, path = expected[slot]
            call.fills.append((container, key, slot, (shape, dtype), path))
        return call

    def _mismatch(self, index: int, run_key: str, path, why: str) -> None:
        self.mismatch_count += 1
        if len(self.mismatches) < MAX_EXAMPLES:
            self.mismatches.append(f"calls[{index}] {run_key} input {path_text(path)}: {why}")

    # -- running -----------------------------------------------------------------------------
    def checked_pass(self) -> None:
        """One untimed pass that checks every fed tensor and every call; a fed tensor of the
        wrong shape or dtype, or one a failed call did not produce, is replaced for good by a
        generated tensor of the captured spec."""
        values = self.values
        failing: Dict[str, int] = {}  # run key -> its calls that failed in this pass
        for index, call in enumerate(self.calls):
            if call.failed is None:
                for fill in list(call.fills):
                    container, key, slot, (shape, dtype), path = fill
                    value = values[slot]
                    if isinstance(value, torch.Tensor) and tuple(value.shape) == shape \
                            and value.dtype == dtype:
                        container[key] = value
                        continue
                    why = ("its producer failed or returned no tensor there"
                           if not isinstance(value, torch.Tensor) else
                           f"fed {list(value.shape)} {value.dtype}, captured {list(shape)} "
                           f"{dtype}")
                    self._mismatch(index, call.run_key, path, why)
                    container[key] = self._generated(call.run_key, path)
                    call.fills.remove(fill)
                if call.waits:
                    try:
                        self._wait(call.waits)
                    except Exception as exc:  # a job's collective that never completed
                        failed = getattr(exc, "at", index)
                        raise StepCallFailed(failed, self.calls[failed].run_key, exc) from exc
                try:
                    result = call.func(*call.args, **call.kwargs)
                    if call.issues:  # (the c10d op's result, its work)
                        result, self.works[index] = result
                        self.pending = True
                    elif call.collective:  # synchronous: waited here
                        result, work = result
                        if work is not None:
                            work.wait()
                    for path, slot in call.outs:
                        values[slot] = output(result, path)
                    if index == len(self.calls) - 1:
                        self.last_output = result  # what the step ends with (checks, tests)
                    del result
                except Exception as exc:
                    if call.collective:  # the other ranks wait in it: the job cannot go on
                        raise StepCallFailed(index, call.run_key, exc) from exc
                    first = (str(exc).splitlines() or [""])[0][:300]
                    call.failed = f"{type(exc).__name__}: {first}"
                    failing[call.run_key] = failing.get(call.run_key, 0) + 1
                    if failing[call.run_key] == 1:  # once per config, however many calls
                        log.warning("step replay: calls[%d] %s failed: %s", index,
                                    call.run_key, call.failed)
            for slot in call.frees:
                values[slot] = None
            for container, key, *_ in call.fills:
                container[key] = None
        try:
            self._wait(range(len(self.works)))
        except Exception as exc:
            failed = getattr(exc, "at", 0)
            raise StepCallFailed(failed, self.calls[failed].run_key, exc) from exc
        self._plan = None  # calls may have failed, fills been replaced: built again
        self.device.clock.synchronize()
        repeated = {key: count for key, count in failing.items() if count > 1}
        if repeated:
            log.warning("step replay: %d more failed calls of the same %d config(s) not "
                        "shown (the step record's failures lists the first 20)",
                        sum(repeated.values()) - len(repeated), len(repeated))

    def _generated(self, run_key: str, path) -> Any:
        spec = tensor_spec(self._runs[run_key].input, path)
        if spec is None:
            return None
        return materialize(spec, self.options.device)

    def run_step(self, times: Optional[List[Any]] = None, stamped: bool = False,
                 counter: Any = time.perf_counter_ns, scheduled: bool = False,
                 starts: Optional[Any] = None) -> None:
        """One step. ``times``: per call (by index), what ``counter`` (the host clock's ns)
        advanced by around the call, or with ``stamped`` the device clock's stamps around it,
        a launch cover first where the clock has one (``run_step_timed`` reads them);
        ``starts``: with ``times`` and not ``stamped``, per call the counter when it began;
        ``scheduled``: wait the fitted host gaps (``fit_host_gaps``). A call that fails here
        (a job's collective: a rank gone) raises ``StepCallFailed`` naming it."""
        values = self.values
        for slot in self.carried:  # the previous step's survivors (a .grad at zero_grad)
            values[slot] = None
        comm = self._comm if times is not None else None
        at = [-1]
        try:
            self._loop(values, times, stamped, counter, scheduled, comm, at, starts)
            if self.pending:  # work never waited where the original waited: at the end
                at[0] = len(self.calls)
                self._wait(range(len(self.works)), comm)
        except Exception as exc:
            index = getattr(exc, "at", at[0])  # a wait names the collective it waited
            key = self.calls[index].run_key if 0 <= index < len(self.calls) \
                else "the step's end (waiting its collectives)"
            raise StepCallFailed(index, key, exc) from exc
        if scheduled and self.tail_wait_ns:  # and after its last call
            now = time.perf_counter_ns
            due = now() + self.tail_wait_ns
            while now() < due:
                pass

    def _loop(self, values, times, stamped: bool, counter, scheduled: bool,
              comm: Optional[Dict[str, Any]], at: List[int], starts: Any = None) -> None:
        """``run_step``'s calls; ``at[0]``: the call running (for the failure's message)."""
        clock = self.clock.stamp if stamped else counter
        cover = getattr(self.clock, "cover", None) if stamped else None
        host_ms = getattr(self.clock, "host_elapsed_ms", None) if cover is not None else None
        last_host: Optional[float] = None
        now = time.perf_counter_ns
        works = self.works
        for index, func, args, kwargs, fills, outs, frees, wait, waits, issues \
                in self._compiled():
            at[0] = index
            for container, key, slot in fills:
                container[key] = values[slot]
            if waits:  # the original waited this earlier work here
                self._wait(waits, comm)
            if scheduled and wait:  # the original host's own time before this call
                due = now() + wait
                while now() < due:
                    pass
            if issues:  # an async collective: issued, its work kept until waited
                begin_ns = now()
                if times is None:
                    result, work = func(*args, **kwargs)
                elif stamped:
                    begin = clock()
                    result, work = func(*args, **kwargs)
                    times[index] = (begin, clock())
                else:
                    start = clock()
                    result, work = func(*args, **kwargs)
                    times[index] = clock() - start
                    if starts is not None:
                        starts[index] = start
                works[index] = work
                self.pending = True
                if comm is not None:
                    self._issued(index, begin_ns, work, comm)
            elif times is None:
                result = func(*args, **kwargs)
            elif stamped:
                if cover is not None:  # the device busy while the host launches the call
                    cover(last_host)
                begin = clock()
                result = func(*args, **kwargs)
                end = clock()
                times[index] = (begin, end)
                if host_ms is not None:
                    last_host = host_ms(begin, end) * 1e3
            else:
                start = clock()
                result = func(*args, **kwargs)
                times[index] = clock() - start
                if starts is not None:
                    starts[index] = start
            if outs:
                several = isinstance(result, tuple)
                for k, j, slot in outs:
                    value = (result[k] if k < len(result) else None) if several else \
                        (result if k == 0 else None)
                    if j >= 0:
                        value = value[j] if isinstance(value, (list, tuple)) \
                            and j < len(value) else None
                    values[slot] = value
            result = None
            for slot in frees:
                values[slot] = None
            for container, key, _ in fills:
                container[key] = None

    # -- collectives -------------------------------------------------------------------------
    def _wait(self, calls, comm: Optional[Dict[str, Any]] = None) -> None:
        """Wait the async work of ``calls`` (each once); with ``comm``, the time it took."""
        works = self.works
        begin = time.perf_counter_ns() if comm is not None else 0
        for call in calls:
            work = works[call]
            if work is not None:
                works[call] = None
                try:
                    work.wait()
                except Exception as exc:  # the collective it waits failed: name that one
                    exc.at = call
                    raise
                if comm is not None:
                    comm["done"].setdefault(call, time.perf_counter_ns())
        if comm is not None:
            comm["wait_ns"] += time.perf_counter_ns() - begin
        self.pending = any(work is not None for work in works)

    @staticmethod
    def _issued(index: int, begin_ns: int, work: Any, comm: Dict[str, Any]) -> None:
        """A collective issued in a call-timed step: its completion stamped by its work's
        future (where the backend gives one), else when it is waited."""
        comm["issued"][index] = begin_ns
        if work is None:
            return
        try:
            future = work.get_future()
        except (RuntimeError, AttributeError):
            return
        done = comm["done"]
        future.add_done_callback(
            lambda _, index=index: done.setdefault(index, time.perf_counter_ns()))

    def begin_comm_pass(self) -> None:
        """The next call-timed step records its collectives' times (``end_comm_pass``)."""
        self._comm = {"issued": {}, "done": {}, "wait_ns": 0}

    def end_comm_pass(self, times: List[Any]) -> Optional[Dict[str, Any]]:
        """The collectives of the last call-timed step: per call, its communication time
        (issue to completion, ns; a synchronous one: the call's own time), and the step's
        time spent waiting on collectives (``exposed_ns``: waits, and synchronous calls)."""
        comm, self._comm = self._comm, None
        if comm is None:
            return None
        per_call: Dict[int, float] = {}
        exposed = comm["wait_ns"]
        for index, call in enumerate(self.calls):
            if not call.collective or call.failed is not None:
                continue
            issued, done = comm["issued"].get(index), comm["done"].get(index)
            if call.issues:
                if issued is not None and done is not None:
                    per_call[index] = max(0, done - issued)
            elif isinstance(times[index], (int, float)):
                # synchronous: issue to its work's completion (its future's callback may run
                # after the wait returned: no later than the call's end), all of it exposed
                per_call[index] = times[index] if issued is None or done is None else \
                    max(0, min(done - issued, times[index]))
                exposed += times[index]
        return {"per_call": per_call, "exposed_ns": exposed}

    def _issue_and_wait(self, func, index: int):
        """A synchronous collective as the timed loops call it: issued, its completion stamped
        in a call-timed step (``_issued``), its work waited before it returns, so that the
        call's clock runs to the work's end like any call's."""
        now = time.perf_counter_ns

        def call(*args, **kwargs):
            begin_ns = now()
            result, work = func(*args, **kwargs)
            if self._comm is not None:
                self._issued(index, begin_ns, work, self._comm)
            if work is not None:
                work.wait()
            return result
        return call

    def _compiled(self) -> List[Tuple[Any, ...]]:
        """The calls that run, as flat tuples (index, callable, args, kwargs, fills, outputs,
        frees, host gap ns to wait before it, earlier work waited before it, whether it is an
        async collective), built once after the checked pass: the replay's own Python between
        two calls is host time the original step did not spend, and a small-op step is made of
        it. An aten overload is called through its C++ entry (``OpOverload.__call__`` only
        forwards to it), saving a Python frame per call; a synchronous collective through
        ``_issue_and_wait``."""
        if self._plan is None:
            plan = []
            for index, call in enumerate(self.calls):
                if call.failed is not None:
                    continue
                func = call.func
                if type(func) is torch._ops.OpOverload:
                    func = func._op
                if call.collective and not call.issues:
                    func = self._issue_and_wait(func, index)
                plan.append((index, func, call.args, call.kwargs,
                             tuple((c, k, slot) for c, k, slot, _, _ in call.fills),
                             tuple((path[0], path[1] if len(path) > 1 else -1, slot)
                                   for path, slot in call.outs),
                             tuple(call.frees), self.waits_ns[index], call.waits,
                             call.issues))
            self._plan = plan
        return self._plan

    def run_step_timed(self, times: List[Any], starts: Optional[Any] = None) -> None:
        """One step with each call timed into ``times`` (ns by call index): the host clock
        around the call on CPU; on a device, its clock's stamps around it (events), after a
        spin kernel that keeps a GPU the replay's host left idle busy while the call is
        launched: the pair times the call's kernels, as the original's in-place timer does.

        ``starts`` (by call index, ns; a failed call's left as it was): where each call began
        in the step, from the first replayed call's start. On the host as measured, so the
        replay's own time between calls shows; on a device the calls' times laid end to end
        (the launch cover between two calls' stamps is no part of the step)."""
        host = getattr(self.clock, "name", "") == "host"
        if host:
            self.run_step(times, starts=starts)  # (a job's clock is the host's underneath)
        else:
            if hasattr(self.clock, "reserve"):
                self.clock.reserve(2 * len(self.calls))
            self.clock.synchronize()
            self.run_step(times, stamped=True)
            self.clock.synchronize()
            for index, call in enumerate(self.calls):
                if call.failed is None:
                    begin, end = times[index]
                    times[index] = self.clock.elapsed_ms(begin, end) * 1e6
        if starts is None:
            return
        first: Optional[int] = None
        packed = 0
        for index, call in enumerate(self.calls):
            if call.failed is not None:
                continue
            if not host:
                starts[index] = int(packed)
                packed += times[index]
            elif first is None:
                first = starts[index]
                starts[index] = 0
            else:
                starts[index] -= first

    def count_faults(self, passes: int = 3) -> List[Optional[float]]:
        """Per call (by index), the median over ``passes`` untimed steps of the minor page
        faults it took (first touches of fresh memory; None for a call left out)."""
        counts = []
        for _ in range(max(1, passes)):
            faults = [0] * len(self.calls)
            self.run_step(faults, counter=minor_faults)
            counts.append(faults)
        return [median(column) if call.failed is None else None
                for call, column in zip(self.calls, zip(*counts))]

    def step_callable(self):
        """The whole step as one callable, the host gaps waited where fitted: what the
        ``Measurer`` times (``step_run.measure_step``)."""
        if self.scheduled:
            return functools.partial(self.run_step, scheduled=True)
        return self.run_step

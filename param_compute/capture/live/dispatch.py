"""Live capture: a ``TorchDispatchMode`` recording the aten calls of whatever runs inside it.

    with param_compute.capture.capture_ops() as cap:
        loss = model(x)
        loss.backward()
    cap.write("spec.json")

The mode sits below autograd, so it sees the aten ops forward and backward actually dispatch
(composite ops already decomposed, ``aten::linear`` as ``aten::t`` + ``aten::addmm``), each once:
an op a kernel calls internally runs with the mode off and is not recorded again. Argument specs
are taken before the call (an in-place op or ``resize_`` changes its inputs), and integer
tensors record the actual min and max of their values, so replayed indices stay in range.
A ``torch.compile``d region is one call of its compiled graph (``graph::NAME``, recorded by
``capture.live.compiled``), its inputs and outputs in the dataflow like any call's.
"""

from __future__ import annotations

import functools
import weakref
from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from param_compute.capture.schema_args import split_name
from param_compute.capture.accounting import Unreplayable
from param_compute.capture.live import compiled as compiled_regions
from param_compute.capture.step.dataflow import StepRecorder, TensorSlot
from param_compute.capture.values import live_spec
from param_compute.capture.workload import CapturedWorkload
from param_compute.process.allocator import allocator_settings
from param_compute.capture.collectives import collective_call, replay_path
from param_compute.capture.trace.comms import DEFAULT_GROUP
from param_compute.operators.collectives import kind_of


def _group_name(value: Any) -> Optional[str]:
    """The name torch gives the process group a ``c10d::`` call was handed (a boxed
    ``ProcessGroup``), or None for another object (a reduction)."""
    try:
        group = torch._C._distributed_c10d.ProcessGroup.unbox(value)
    except (AttributeError, RuntimeError, TypeError):
        return None
    name = getattr(group, "group_name", None)
    return name if isinstance(name, str) and name else None


def live_distributed() -> Optional[Dict[str, Any]]:
    """The job this process is a rank of, as ``capture.trace.comms`` reads a trace's: rank,
    world size, backend and every process group by name; None outside a job."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    c10d = dist.distributed_c10d
    groups = {}
    for group, name in list(c10d._world.pg_names.items()):
        try:
            groups[name] = {"ranks": sorted(dist.get_process_group_ranks(group)),
                            "backend": str(dist.get_backend(group)),
                            "desc": str(getattr(group, "group_desc", ""))}
        except (RuntimeError, ValueError):
            continue
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(),
            "backend": str(dist.get_backend()), "groups": groups}


def _keys(tensor: torch.Tensor):
    """(exact, layout) keys of a live tensor for the step's dataflow (``capture.step.dataflow``)."""
    try:
        pointer = tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # no storage (a sparse or wrapped tensor)
        pointer = None
    layout = ("L", pointer, tensor.storage_offset() if pointer is not None else None,
              tuple(tensor.shape), tuple(tensor.stride()) if tensor.layout == torch.strided
              else None, tensor.dtype, str(tensor.device))
    return ("T", id(tensor)) + layout[1:], layout


def tensor_slots(values, names=None) -> List[TensorSlot]:
    """The tensors among ``values`` (a call's args, or outputs), each with its path and keys;
    ``names`` gives the path heads (keyword names), positions otherwise."""
    slots = []
    for index, value in enumerate(values):
        head = names[index] if names is not None else index
        if isinstance(value, torch.Tensor):
            slots.append(([head], *_keys(value)))
        elif isinstance(value, (list, tuple)):
            slots.extend(([head, j], *_keys(item)) for j, item in enumerate(value)
                         if isinstance(item, torch.Tensor))
    return slots


class LiveCapture(TorchDispatchMode):
    """Records every aten call made while active; ``spec()``/``write()`` give the workload."""

    def __init__(self, skip_views: bool = False, source: str = "live capture",
                 allow_namespaces: Sequence[str] = (),
                 originals: Optional[Mapping[str, List[float]]] = None,
                 original_faults: Optional[Mapping[str, List[float]]] = None,
                 original_gaps: Optional[Mapping[str, List[Any]]] = None,
                 regions: Optional[compiled_regions.RegionRecorder] = None):
        """``originals``: op (``str(func)``) -> the µs each of its calls took in place, in
        order (``live_timing``): the k-th captured call of an op gets the k-th time;
        ``original_faults`` likewise its minor page faults and ``original_gaps`` its (host gap
        before it, host µs) (``live_timing.host_gaps``; the step file keeps both: a call not
        captured adds its gap and its host time to the next captured call's gap).
        ``regions``: the recorder of compiled regions already watching the step
        (``capture.live.compiled``); without one the capture installs its own (dynamo
        started afresh: a compiled model compiles again, its graphs recorded)."""
        super().__init__()
        self.regions = regions
        self._own_regions = regions is None
        self._inside = 0  # > 0 while a compiled region runs: its inner calls are its own
        self.workload = CapturedWorkload(source, skip_views, allow_namespaces=allow_namespaces)
        self.workload.step = StepRecorder()
        self.originals = originals
        self.original_faults = original_faults
        self.original_gaps = original_gaps
        #: Host gap (µs) owed to the next captured call: the calls not captured since.
        self.pending_gap = 0.0
        self._seen: Counter = Counter()
        self._watched: Dict[Any, weakref.finalize] = {}
        self.workload.num_threads = torch.get_num_threads()  # what the captured calls ran with
        self.workload.allocator = allocator_settings()  # and the host allocator's settings

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """While compiled regions are recorded, compiled code runs under the capture (each
        region one call, ``region_call``) instead of dynamo skipping it for eager code."""
        return compiled_regions.recording()

    def __enter__(self):
        if self._own_regions:
            self.regions = compiled_regions.RegionRecorder().__enter__()
        compiled_regions.listen(self)
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._inside:  # a compiled region's own call (an extern kernel): part of it
            return func(*args, **kwargs)
        original, faults, gap = self._original(str(func))
        collective: Dict[str, Any] = {}
        if str(func).startswith("c10d.") and kind_of(func._schema.name) is not None:
            config = self._record_collective(func, args, kwargs, original, collective)
        else:
            config = self._record(func, args, kwargs, original)
        try:
            inputs = tensor_slots(args) + tensor_slots(list(kwargs.values()), list(kwargs))
            if collective:  # at their places in the replayed call
                inputs = [(replay_path(collective["base"], path), exact, layout)
                          for path, exact, layout in inputs]
                inputs = [slot for slot in inputs if slot[0]]
        except Exception:  # the dataflow is a record, never a reason to fail the model
            inputs = []
        return self._call(config, inputs, lambda: func(*args, **kwargs), original, faults, gap,
                          asynchronous=bool(collective.get("async")))

    def region_call(self, record, inputs: List[Any], run):
        """A compiled region's call (``capture.live.compiled.RegionCall``): one call of its
        graph (``graph::NAME``) with the region's inputs, or, where the graph could not be
        kept, a call not captured with the reason; nothing inside it is recorded."""
        values = list(inputs)
        original, faults, gap = self._original(record.op)
        config = None
        self._inside += 1  # what recording runs (value profiles) is not the step's
        try:
            config = self._record_region(record, values, original)
        finally:
            self._inside -= 1
        try:
            slots = tensor_slots(values)
        except Exception:
            slots = []
        inside = functools.partial(compiled_regions.run_inside, self, run, inputs)
        # An output that is one of the inputs (a compiled forward returns a parameter it
        # saves for the backward) makes nothing: its readers keep the input's own producer.
        return self._call(config, slots, inside, original, faults, gap, several=True,
                          same={slot[2] for slot in slots})

    def _record_region(self, record, values: List[Any], original):
        """A region's call as a config of its graph (None: not captured, kept as a skip)."""
        if record.graph is None:
            self.workload.skip(record.op, record.reason or "not recorded", kind="compiled",
                               original=original)
        else:
            try:
                specs = [live_spec(value) for value in values]
            except Exception as exc:  # recording never breaks the model it watches
                self.workload.skip(record.op, f"its inputs could not be recorded: "
                                   f"{type(exc).__name__}: {exc}", kind="compiled",
                                   original=original)
            else:
                return self.workload.add_graph(record, specs, original)
        return None

    def _call(self, config, inputs, call, original, faults, gap, several: bool = False,
              same=frozenset(), asynchronous: bool = False):
        """Run one call and record it in the step: its config (None: not captured), its
        tensor inputs and outputs (but those laid out as an input of ``same``: the input
        itself, returned), its original time, faults and host gap (``asynchronous``: an async
        collective, its work waited later)."""
        gap_us = None
        if gap is not None:
            if config is None:  # its host time is the next captured call's gap
                self.pending_gap += gap[0] + gap[1]
            else:
                gap_us, self.pending_gap = self.pending_gap + gap[0], 0.0
        out = call()
        try:
            outputs = tensor_slots(out if isinstance(out, tuple) or several and isinstance(
                out, list) else (out,))
        except Exception:
            outputs = []
        if same:
            outputs = [slot for slot in outputs if slot[2] not in same]
        self.workload.step.call(config, inputs, outputs,
                                original[0] if original is not None else None, faults, gap_us,
                                asynchronous=asynchronous)
        if config is not None:
            try:
                self._watch(out)
            except Exception:  # lifetimes are a record too, never a reason to fail the model
                pass
        return out

    def _watch(self, out) -> None:
        """Note when each output of the call just recorded is released (``StepRecorder``)."""
        step = self.workload.step
        index = len(step.calls) - 1
        for k, value in enumerate(out if isinstance(out, (tuple, list)) else (out,)):
            items = [((k,), value)] if isinstance(value, torch.Tensor) else \
                [((k, j), item) for j, item in enumerate(value)
                 if isinstance(item, torch.Tensor)] if isinstance(value, (list, tuple)) else []
            for path, tensor in items:
                try:
                    self._watched[(index, path)] = weakref.finalize(
                        tensor, self._released, index, path)
                except TypeError:  # a tensor subclass that takes no weak references
                    continue

    def _released(self, index: int, path) -> None:
        self._watched.pop((index, path), None)
        self.workload.step.released(index, path)

    def __exit__(self, *exc):
        # Outputs alive now outlive the step (a gradient in .grad, the optimizer's state);
        # what is released after the capture is the next step's business.
        for (index, path), finalizer in list(self._watched.items()):
            if finalizer.detach() is not None:
                self.workload.step.outlives(index, path)
        self._watched.clear()
        compiled_regions.unlisten(self)
        self.workload.carry_structure()
        try:
            return super().__exit__(*exc)
        finally:
            if self._own_regions and self.regions is not None:
                self.regions.__exit__(*exc)
            self.workload.regions = self.regions

    def _original(self, name: str):
        """(the call's (CPU µs, None) in place, its page faults there, (its host gap, host
        µs) in the step); None where unknown. ``name``: the op (``str(func)``), or a compiled
        region's ``graph::NAME``."""
        if self.originals is None:
            return None, None, None
        index = self._seen[name]
        self._seen[name] += 1

        def kth(table):
            values = (table or {}).get(name)
            return values[index] if values is not None and index < len(values) else None

        time = kth(self.originals)
        return ((time, None) if time is not None else None, kth(self.original_faults),
                kth(self.original_gaps))

    def _record_collective(self, func, args, kwargs: Dict[str, Any], original,
                           collective: Dict[str, Any]):
        """A ``c10d::`` call captured as a collective (``capture.collectives``) on the group
        it was given (its name, as torch knows it)."""
        schema = func._schema
        base = schema.name.split("::", 1)[1]
        label = f"c10d::{base}"
        named: Dict[str, Any] = {}
        group = DEFAULT_GROUP
        try:
            for argument, value in zip(schema.arguments, list(args)):
                named[argument.name] = value
            named.update(kwargs)
            specs: Dict[str, Any] = {}
            for name, value in named.items():
                if isinstance(value, torch.ScriptObject):
                    found = _group_name(value)
                    if found is not None:
                        group = found
                    continue
                specs[name] = live_spec(value)
            call_args, call_kwargs = collective_call(base, specs, group)
        except Exception as exc:  # recording never breaks the model it watches
            reason = str(exc) if isinstance(exc, Unreplayable) else \
                f"capture failed: {type(exc).__name__}: {exc}"
            self.workload.skip(label, reason, kind="collective", original=original)
            return None
        self.workload.add_collective(label, call_args, call_kwargs, original)
        collective.update({"async": bool(call_kwargs.get("async_op", {}).get("value")),
                           "base": base})
        return self.workload.last_config

    def _record(self, func, args, kwargs: Dict[str, Any], original=None):
        """Capture one call; the config it went into (None: not captured)."""
        schema = str(func._schema)
        try:
            arg_specs = [live_spec(value) for value in args]
            kwarg_specs = {name: live_spec(value) for name, value in kwargs.items()}
        except Exception as exc:  # recording never breaks the model it watches
            reason = str(exc) if isinstance(exc, Unreplayable) else \
                f"capture failed: {type(exc).__name__}: {exc}"
            namespace, base, overload = split_name(schema)
            self.workload.skip(f"{namespace}::{base}"
                               + ("" if overload == "default" else f".{overload}"), reason,
                               original=original)
            return None
        if self.workload.add(schema, arg_specs, kwarg_specs, original=original):
            return self.workload.last_config
        return None

    # -- the workload ------------------------------------------------------------------------
    def spec(self, param_form: bool = False) -> Dict[str, Any]:
        return self.workload.spec(param_form)

    def report(self) -> Dict[str, Any]:
        return self.workload.report()

    def write(self, path, param_form: bool = False):
        """Write the spec to ``path`` and the capture report to ``NAME.capture.json``
        (``param_form``: in the form PARAM's own replay runs, see ``capture.param_form``)."""
        return self.workload.write(path, param_form)

    @property
    def skipped(self):
        return self.workload.skipped


def capture_ops(skip_views: bool = False, source: Optional[str] = None,
                allow_namespaces: Sequence[str] = (),
                originals: Optional[Mapping[str, List[float]]] = None,
                original_faults: Optional[Mapping[str, List[float]]] = None,
                original_gaps: Optional[Mapping[str, List[Any]]] = None,
                regions: Optional[compiled_regions.RegionRecorder] = None) -> LiveCapture:
    """A context manager capturing the aten calls made inside it (forward and backward), and
    those of ``allow_namespaces`` (``fbgemm``...); ``originals``: each op's in-place times
    (``live_timing.time_ops_in_place``), written as the configs' ``original_us``, and
    ``original_faults`` their page faults and ``original_gaps`` the host time before them,
    written to the step file. ``regions``: the recorder of compiled regions watching the
    step since before it was first compiled (``capture.live.compiled``); without one the
    capture installs its own. A ``torch.compile``d region is captured as one call of its
    graph (``graph::NAME``), never silently as eager ops."""
    return LiveCapture(skip_views, source or "live capture", allow_namespaces, originals,
                       original_faults, original_gaps, regions)

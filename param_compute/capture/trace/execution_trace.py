"""Execution traces (``torch.profiler.ExecutionTraceObserver``, Chakra schema 1.x) -> a workload.

An execution trace is ``{"schema", "pid", "nodes": [...]}``; each node has an ``id``, its parent's
id in ``ctrl_deps``, a ``name``, ``inputs``/``outputs`` as ``{values, shapes, types, strides}``
and ``attrs`` (``op_schema`` among them; empty for record-function ranges). A tensor value is
``[tensor_id, storage_id, offset, numel, itemsize, device]`` and its type ``Tensor(float)``;
lists are ``GenericList[Int,Int]`` with per-item values, shapes and strides; ``None`` is
``"<None>"``; ``ScalarType``/``Layout``/``MemoryFormat`` arguments are recorded as ``Int``.
(Older traces, schema 1.0.x, keep ``inputs`` as a list beside ``input_shapes``/``input_types``
and the parent in ``parent``: read too.)

Which nodes are replayed, in which ``ProfilerStep#N`` window, and which are left out with
their reason is ``trace_walk``'s job; this module turns each replayed node into a call (recorded
``tensor_range`` data as ``value_range``, recorded strides or ``strides``' recovered ones,
backend kernels as their native op) and hands it, with its original time where a Kineto trace
is joined (``kineto``), to the workload.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from param_compute import untrusted_json
from param_compute.capture.portable import native_call
from param_compute.capture.schema_args import SchemaArg, schema_arguments, split_name
from param_compute.capture.trace.check import check_execution_trace, json_kind
from param_compute.capture.trace.files import read_execution_trace
from param_compute.capture.trace.walk import TraceTree, attr, replay_level_nodes, select_step
from param_compute.capture.accounting import Unreplayable, kind_reason, op_kind
from param_compute.capture.values import (ET_DTYPES, INTEGER_SPEC_DTYPES, LAYOUTS,
                                          MEMORY_FORMATS, SCALAR_TYPES, float_spec, split_types,
                                          tensor_spec)
#: The value_profile of a state tensor ``--subnormal-state`` chose.
ALL_SUBNORMAL = {"zeros": 0.0, "subnormal": 1.0}
from param_compute.capture.workload import CapturedWorkload
from param_compute.capture.collectives import collective_call
from param_compute.capture.trace.comms import (DEFAULT_GROUP, backend_nodes, recorded_group,
                                               recorded_seq, uncovered, wait_records)
from param_compute.capture.trace.step import WAITED
from param_compute.operators.collectives import kind_of
from param_compute.spec.limits import INT_MAX, INT_MIN
from param_compute.spec.wording import short
from param_compute.results.stats import median

_ENUMS = {"dtype": SCALAR_TYPES, "layout": LAYOUTS, "memory_format": MEMORY_FORMATS}
NONE_VALUE = "<None>"


def _inputs(node: Dict[str, Any]) -> Tuple[list, list, list, list]:
    """(values, shapes, types, strides) of a node's inputs, either trace layout."""
    inputs = node.get("inputs")
    if isinstance(inputs, dict):
        values = inputs.get("values") or []
        return (values, inputs.get("shapes") or [None] * len(values),
                inputs.get("types") or [], inputs.get("strides") or [None] * len(values))
    values = inputs or []
    return (values, node.get("input_shapes") or [None] * len(values),
            node.get("input_types") or [], node.get("input_strides") or [None] * len(values))


def replayed_operator_nodes(trace: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The operator calls a replay runs, each once, in id order (see ``trace_walk``)."""
    return replay_level_nodes(TraceTree(trace))[0]


def tensor_ranges(node: Dict[str, Any]) -> Dict[int, List[int]]:
    """input index -> [min, max] recorded for integer tensors (``tensor_range``: traces recorded
    with ENABLE_PYTORCH_EXECUTION_TRACE_SAVE_INTEGRAL_TENSOR_RANGE=1)."""
    text = attr(node, "tensor_range")
    if not text:
        return {}
    try:  # JSON inside the trace's JSON: parsed within the same bounds (a few levels deep)
        ranges = untrusted_json.parse(text, 4) if isinstance(text, str) else text
        return {int(index): [int(pair[0]), int(pair[1])] for index, pair in ranges.items()
                if isinstance(pair, list) and len(pair) == 2
                and all(_int64(v) for v in pair)}
    except (ValueError, TypeError, AttributeError):
        return {}


def _int64(value: Any) -> bool:
    """An integer a spec can hold (torch takes sizes, strides and scalars as int64)."""
    return isinstance(value, int) and not isinstance(value, bool) and INT_MIN <= value <= INT_MAX


def _at(items: Any, index: int) -> Any:
    return items[index] if isinstance(items, list) and index < len(items) else None


def trace_value_spec(type_name: str, value: Any, shape: Any, stride: Any,
                     arg: Optional[SchemaArg] = None,
                     value_range: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """The data spec of one recorded input value (``value_range``: recorded [min, max] of an
    integer tensor's data)."""
    if type_name.startswith("Tensor(") and type_name.endswith(")"):
        element = type_name[len("Tensor("):-1]
        if element.startswith("nullptr"):
            # An undefined tensor: Python passes it as None, for optional and (as some
            # backward kernels take, e.g. an absent attention bias) plain Tensor arguments.
            return {"type": "none"}
        dtype = ET_DTYPES.get(element)
        if dtype is None:
            raise Unreplayable(f"a tensor of element type {element!r} (no spec dtype)")
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            raise Unreplayable("a tensor without a recorded shape")
        if not all(_int64(d) and d >= 0 for d in shape):
            raise Unreplayable(f"a tensor of shape {short(shape)} (sizes are integers from 0 "
                               f"to {INT_MAX})", kind="unreadable")
        device = value[5] if isinstance(value, list) and len(value) > 5 else "cpu"
        offset = value[2] if isinstance(value, list) and len(value) > 2 \
            and isinstance(value[2], int) else 0
        stride = stride if isinstance(stride, list) and all(isinstance(s, int) for s in stride) \
            else None
        if not (_int64(offset) and offset >= 0) or \
                (stride is not None and not all(_int64(s) for s in stride)):
            raise Unreplayable(f"a tensor of storage offset {short(offset)} and strides "
                               f"{short(stride)} (integers of at most 64 bits, the offset "
                               ">= 0)", kind="unreadable")
        if value_range is not None and dtype not in INTEGER_SPEC_DTYPES:
            value_range = None
        return tensor_spec(dtype, shape, stride, str(device), offset, value_range)
    if type_name == "Tensor":
        return {"type": "none"}  # an undefined tensor recorded without an element type
    if type_name.startswith("GenericList[") and type_name.endswith("]"):
        item_types = split_types(type_name[len("GenericList["):-1])
        values = value if isinstance(value, list) else []
        if len(item_types) != len(values):
            raise Unreplayable(f"a list whose recorded types and values disagree ({type_name})")
        return {"type": "genericlist",
                "value": [trace_value_spec(t, v, _at(shape, i), _at(stride, i))
                          for i, (t, v) in enumerate(zip(item_types, values))]}
    if type_name == "None" or value == NONE_VALUE:
        return {"type": "none"}
    kind = arg.enum_kind if arg is not None else None
    if type_name in ("Int", "ScalarType", "Layout", "MemoryFormat") and kind:
        name = _ENUMS[kind].get(value) if isinstance(value, (int, str)) else None
        if name is None:
            raise Unreplayable(f"{kind} value {json_kind(value)} has no spec name")
        return {"type": kind, "value": name}
    if type_name == "Int":
        if not _int64(value):
            raise Unreplayable(f"an Int argument recorded as {json_kind(value)}"
                               + (" (beyond 64 bits)" if isinstance(value, int) else ""),
                               kind="unreadable")
        return {"type": "int", "value": value}
    if type_name == "Double":
        try:  # some writers spell non-finite values as strings ("inf", "nan")
            number = float(value) if isinstance(value, (int, float, str)) \
                and not isinstance(value, bool) else None
        except (ValueError, OverflowError):  # "x", or an integer past any float
            number = None
        if number is None:
            raise Unreplayable(f"a Double argument recorded as {json_kind(value)}",
                               kind="unreadable")
        return float_spec(number)
    if type_name == "Bool":
        if not isinstance(value, (bool, int)):
            raise Unreplayable(f"a Bool argument recorded as {json_kind(value)}",
                               kind="unreadable")
        return {"type": "bool", "value": bool(value)}
    if type_name == "String":
        return {"type": "str", "value": str(value)}
    if type_name == "Device":
        return {"type": "device", "value": str(value)}
    raise Unreplayable(f"an argument of recorded type {type_name!r}")


def node_call(node: Dict[str, Any], recovered: Optional[Dict[int, Any]] = None
              ) -> Tuple[str, List[Dict[str, Any]], Dict[str, Any]]:
    """(schema, positional arg specs, keyword-only arg specs) of one operator node.

    Recorded strides win; ``recovered`` (input index -> strides, see ``strides``) fills in
    those a trace lacks. A backend kernel with a native equivalent comes back as that op."""
    schema = attr(node, "op_schema")
    values, shapes, types, strides = _inputs(node)
    arguments = schema_arguments(schema)
    if len(values) > len(arguments) or len(types) != len(values):
        raise Unreplayable(f"the trace records {len(values)} inputs for a schema of "
                           f"{len(arguments)} arguments")
    ranges = tensor_ranges(node)
    args, kwargs = [], {}
    for index, (arg, value) in enumerate(zip(arguments, values)):
        stride = _at(strides, index)
        if not stride and recovered and index in recovered:
            stride = recovered[index]
        spec = trace_value_spec(types[index], value, _at(shapes, index), stride, arg,
                                ranges.get(index))
        if arg.kwarg_only:
            if spec["type"] == "none" and arg.default == "None":
                continue  # the default anyway; every keyword costs the replayed call time
            kwargs[arg.name] = spec
        else:
            args.append(spec)
    native = native_call(split_name(schema)[1], args, kwargs)
    if native is not None:
        return native
    return schema, args, kwargs


def op_label(node: Dict[str, Any]) -> str:
    schema = attr(node, "op_schema")
    try:
        namespace, base, overload = split_name(schema)
        return f"{namespace}::{base}" + ("" if overload == "default" else f".{overload}")
    except (ValueError, AttributeError, TypeError):
        return str(node.get("name"))


def capture_execution_trace(trace, skip_views: bool = False, source: Optional[str] = None,
                            step: Optional[str] = None, allow_namespaces: Sequence[str] = (),
                            kineto=None, target_device: str = "cpu",
                            max_trace_bytes: Optional[int] = None,
                            subnormal_state: Optional[float] = None) -> CapturedWorkload:
    """A workload from an execution trace (a path or the parsed JSON).

    ``step``: None captures the last complete ``ProfilerStep#N`` window (where the trace has
    them), ``"all"`` every node, ``"N"`` that step. ``allow_namespaces``: namespaces besides
    aten whose operators are captured. ``kineto``: a Kineto trace (a path or the parsed JSON)
    of the same run, joined for each call's original CPU and device time and, in a
    ``ProfilerStep#N`` window, the step's host gaps (``kineto.host_timeline``). ``target_device``:
    the device whose kernels are checked for every config. ``max_trace_bytes``: the cap on
    either file's JSON text (``trace_io.MAX_TRACE_BYTES`` by default). Calls that read an
    optimizer's state (``value_blind``) are noted per op (``values_unknown``);
    ``subnormal_state``: the share of that state's values that are subnormal, where the user
    knows it from elsewhere: whole state tensors are made subnormal to that share
    (``value_blind.subnormal_tensors``).

    A trace is untrusted data: its structure is checked first (``trace_check``), and a trace or
    Kineto file that cannot be used raises ``TraceError`` naming the file, the node and what is
    wrong."""
    if not isinstance(trace, dict):
        source = source or str(trace)
        trace = read_execution_trace(trace, max_trace_bytes)
    check_execution_trace(trace, source or "execution trace")
    tree = TraceTree(trace, source or "execution trace")
    steps, window = select_step(tree, step)
    workload = CapturedWorkload(source or "execution trace", skip_views,
                                allow_namespaces=allow_namespaces, target_device=target_device)
    workload.steps = steps
    workload.nesting = tree.repaired
    taken, dropped = replay_level_nodes(tree, window)
    for number in steps.found:
        steps.calls_per_step[number] = 0
    step_of = tree.step_of() if steps.found else {}
    every, every_dropped = replay_level_nodes(tree) if steps.selected else (taken, dropped)
    for node in every + [lost.node for lost in every_dropped]:
        if node["id"] in step_of:
            steps.calls_per_step[step_of[node["id"]]] += 1
    recovered = {}
    if not _has_strides(trace):
        from param_compute.capture.trace.strides import recover_strides

        recovered = recover_strides(tree, {node["id"] for node in taken},
                                    allow_namespaces)
        workload.strides = {"recorded": False, **recovered.pop("summary")}
    else:
        workload.strides = {"recorded": True}
    timing = None
    if kineto is not None:
        from param_compute.capture.trace.kineto import join_kineto

        timing = join_kineto(kineto, tree, taken + [d.node for d in dropped], steps,
                             max_trace_bytes)
        workload.kineto = timing.summary
    _compiled_regions(workload, tree, window, timing)
    from param_compute.capture.step.dataflow import StepRecorder

    workload.step = StepRecorder()
    comms = CollectiveSource(tree, taken, timing)
    workload.distributed = comms.describe()
    # (node, config or None, original CPU µs, a collective's {async, comm_us}): the dataflow
    in_order = []
    for lost in dropped:
        original = timing.of(lost.node) if timing else None
        workload.skip(lost.node.get("name", "?"), lost.reason, kind=lost.kind,
                      original=original)
        in_order.append((lost.node, None, None, None))
    from param_compute.capture.trace.value_blind import state_inputs

    blind = state_inputs(tree, taken)
    subnormal = None
    if subnormal_state:
        from param_compute.capture.trace.value_blind import subnormal_tensors

        subnormal = subnormal_tensors(blind, subnormal_state)
        workload.subnormal_state = {"fraction": subnormal_state, "tensors": len(subnormal),
                                    "of": len({name for entry in blind.values()
                                               for name, _ in entry["tensors"]})}
    for node in taken:
        original = timing.of(node) if timing else None
        collective: Dict[str, Any] = {}
        config = _add_node(workload, node, recovered, original, comms, collective,
                           blind.get(node["id"]), subnormal)
        in_order.append((node, config, original[0] if original else None,
                         collective or None))
    for node, seq in wait_records(tree, window):  # where the original waited a collective
        in_order.append((node, WAITED, None, {"wait": seq}))
    from param_compute.capture.trace.step import record_trace_step

    in_order.sort(key=lambda item: item[0]["id"] if isinstance(item[0]["id"], int) else 0)
    timeline = None
    if timing is not None:
        from param_compute.capture.trace.kineto import host_timeline

        timeline, workload.kineto["host_gaps"] = host_timeline(
            timing, [item[0] for item in in_order if item[1] is not WAITED])
    record_trace_step(workload.step, in_order, timeline)
    workload.carry_structure()
    if timeline is not None and not any(c.get("gap_us") is not None
                                        for c in workload.step.calls):
        workload.kineto["host_gaps"] = {"written": False, "why": "no captured call was "
                                        "joined to a Kineto event"}
    return workload


def _compiled_regions(workload: CapturedWorkload, tree: TraceTree, window, timing) -> None:
    """The step's ``torch.compile`` regions (``capture.trace.compiled``): with a Kineto
    trace, each one's time no captured call accounts for is counted as not covered, named."""
    from param_compute.capture.trace.compiled import et_region_count, trace_regions

    nodes = [n for n in tree.nodes if window is None or n["id"] in window]
    count = et_region_count(nodes)
    if timing is None:
        if count:
            workload.trace_regions = {
                "count": count, "captured_as_graphs": 0, "time_us": None, "regions": [],
                "why": "no Kineto trace (--kineto): their time is unknown"}
        return
    regions = trace_regions(timing, count)
    for label, original in regions.pop("uncovered"):
        workload.uncovered(label, original)
    if regions["count"]:
        workload.trace_regions = regions


def _add_node(workload: CapturedWorkload, node: Dict[str, Any], recovered, original,
              comms: "CollectiveSource", collective: Dict[str, Any],
              state: Optional[Dict[str, Any]] = None, subnormal: Optional[set] = None):
    """Capture one replay-level node; the config it went into (None: not captured). A
    collective's async flag and communication time go into ``collective``. ``state``: where
    it reads an optimizer's state (``value_blind.state_inputs``); with ``subnormal`` (the
    state tensors ``--subnormal-state`` chose), those inputs made all subnormal."""
    label = op_label(node)
    namespace, _, base = label.partition("::")
    if kind_of(label) is not None:
        return _add_collective(workload, node, label, original, comms, collective)
    kind = op_kind(namespace, base.split(".", 1)[0])
    if kind is not None:
        workload.skip(label, kind_reason(kind, label), kind=kind, original=original)
        return None
    try:
        schema, args, kwargs = node_call(node, recovered.get(node["id"]))
    except Exception as exc:  # one odd node must not end the conversion
        if isinstance(exc, Unreplayable):
            workload.skip(label, str(exc), kind=exc.kind, original=original)
        else:
            workload.skip(label, f"unreadable node: {type(exc).__name__}: {exc}",
                          kind="unreadable", original=original)
        return None
    given = None
    if state is not None and subnormal is not None:
        from param_compute.capture.trace.value_blind import give_profile

        paths = [path for path, (name, _) in zip(state["paths"], state["tensors"])
                 if name in subnormal]
        given = give_profile(args, kwargs, paths, ALL_SUBNORMAL)
    if not workload.add(schema, args, kwargs, original=original):
        return None
    if state is not None:
        workload.note_values_unknown(workload.last_config[0], state["optimizer"],
                                     None if subnormal is None else given)
    return workload.last_config


class CollectiveSource:
    """What a trace says of its collectives: each call's group (``comms.recorded_group``, else
    the default), its backend's span (``comms.backend_nodes``) and its Kineto times, and the
    job (Kineto's ``distributedInfo``)."""

    def __init__(self, tree: TraceTree, taken: List[Dict[str, Any]], timing):
        self.tree = tree
        calls = [node for node in taken if kind_of(op_label(node)) is not None]
        self.spans = backend_nodes(tree, calls) if calls else {}
        self.timing = timing
        self.info = getattr(timing, "distributed", None)
        self.calls = len(calls)
        self.assumed = 0  # calls whose group the trace does not name

    def group(self, node: Dict[str, Any]) -> str:
        name = recorded_group(self.tree, node)
        if name is None:
            self.assumed += 1
            return DEFAULT_GROUP
        return name

    def comm_us(self, node: Dict[str, Any], original) -> Optional[float]:
        """The call's communication time: its kernels' (a device trace), else, where the
        Kineto join has them, from the call's issue to its backend span's end (the median
        over the occurrences, as the replay's is over its steps: most of a collective's time
        is waiting for the other ranks, which one slow step can multiply): what a replay
        times, the call issued until its work completed. Where the call's and its span's
        occurrences do not pair, the span alone (its median)."""
        if original is not None and original[1]:
            return original[1]
        span = self.spans.get(node["id"])
        if span is None or self.timing is None:
            return None
        matched = self.timing.matched
        calls, spans = matched.get(node["id"]) or [], matched.get(span["id"]) or []
        if calls and len(calls) == len(spans):
            try:
                issued = [max(0.0, float(s["ts"]) + float(s.get("dur", 0)) - float(c["ts"]))
                          for c, s in zip(calls, spans)]
            except (KeyError, TypeError, ValueError):
                issued = []
            if issued and all(math.isfinite(v) and v < 1e12 for v in issued):
                return round(median(issued), 3)
        return self.timing.span_us(span)

    def exposed_us(self) -> Optional[float]:
        """The collectives' communication not hidden behind the rank's own calls: their
        backend spans' union less the part covered by the spans of the top-level calls other
        than the collectives' own (a collective's call, which issues it or waits in it, hides
        nothing) (µs); where the Kineto trace holds several steps, the mean over them."""
        if self.timing is None or not self.spans:
            return None
        matched = self.timing.matched
        comm_events = [matched.get(span["id"]) or [] for span in self.spans.values()]
        busy_events = [matched.get(node_id) or [] for node_id in self.timing.events
                       if node_id not in self.spans]
        steps = min((len(events) for events in comm_events if events), default=0)
        if not steps:
            return None

        def interval(event):
            return float(event["ts"]), float(event["ts"]) + float(event.get("dur", 0))
        per_step = [uncovered([interval(events[j]) for events in comm_events if len(events) > j],
                              [interval(events[j]) for events in busy_events if len(events) > j])
                    for j in range(steps)]
        return round(sum(per_step) / steps, 1)

    def describe(self) -> Optional[Dict[str, Any]]:
        """The capture report's ``distributed``: the job as the trace has it."""
        if not self.calls and self.info is None:
            return None
        out: Dict[str, Any] = {"collectives": self.calls,
                               "backend_spans": len(self.spans)}
        exposed = self.exposed_us()
        if exposed is not None:
            out["exposed_us"] = exposed
        if self.info is not None:
            out.update({"rank": self.info.rank, "world_size": self.info.world_size,
                        "backend": self.info.backend, "groups": self.info.groups})
        return out


def _add_collective(workload: CapturedWorkload, node: Dict[str, Any], label: str, original,
                    comms: CollectiveSource, collective: Dict[str, Any]):
    """A ``c10d::`` call captured as a collective (``capture.collectives``)."""
    base = label.split("::", 1)[1].split(".", 1)[0]
    schema = attr(node, "op_schema")
    try:
        values, shapes, types, strides = _inputs(node)
        named = {}
        for index, arg in enumerate(schema_arguments(schema)):
            if index >= len(values) or index >= len(types) or str(types[index]) == "Object":
                continue
            try:
                named[arg.name] = trace_value_spec(types[index], values[index],
                                                   _at(shapes, index), _at(strides, index), arg)
            except Unreplayable:
                continue  # an argument the collective does not need (reduce op, group)
        args, kwargs = collective_call(base, named, comms.group(node))
    except Unreplayable as exc:
        workload.skip(label, str(exc), kind=exc.kind, original=original)
        return None
    except Exception as exc:  # one odd node must not end the conversion
        workload.skip(label, f"unreadable collective: {type(exc).__name__}: {exc}",
                      kind="unreadable", original=original)
        return None
    comm = comms.comm_us(node, original)
    workload.add_collective(label, args, kwargs, original, comm)
    collective.update({"async": bool(kwargs.get("async_op", {}).get("value")), "comm_us": comm,
                       "base": base, "seq": recorded_seq(comms.tree, node)})
    return workload.last_config


def _has_strides(trace: Dict[str, Any]) -> bool:
    for node in trace["nodes"]:
        inputs = node.get("inputs") if isinstance(node, dict) else None
        if isinstance(inputs, dict) and inputs.get("values"):
            return "strides" in inputs
        if isinstance(node, dict) and node.get("input_types"):
            return "input_strides" in node
    return False

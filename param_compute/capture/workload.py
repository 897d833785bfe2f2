"""A captured workload: aten calls folded into a spec, one input config per distinct signature.

Both capture paths (an execution trace, a live ``TorchDispatchMode``) turn each operator call
into ``(schema, args, kwargs)`` of data specs and hand it to ``CapturedWorkload.add``. Calls
with the same schema and the same argument specs share one config whose ``count`` says how often
it occurred; integer tensors' value ranges are merged across such calls (widened), never split
into configs of their own. A call that cannot be replayed is kept as a skip with its reason.

The spec has PARAM's ``aten_ops.json`` form: one entry per aten op (``aten::add``), one config per
overload with its schema string as the build arg, input arg-spec-lists carrying ``count``.
"""

from __future__ import annotations

import copy
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from param_compute.operators.names import TORCH_NAMESPACES
from param_compute.operators.resolution import REFUSED_ATEN_NAMES, load_namespace
from param_compute.spec.model import DEFAULT_DATA_GENERATOR
from param_compute.plan.runkey import format_key
from param_compute.spec.graphs import GRAPH_PREFIX, GRAPHS_KEY
from param_compute.spec.reserved import CAPTURE_KEY
from param_compute.capture.accounting import KINDS, OriginalTimes, SkippedOp, kind_reason, op_kind
from param_compute.capture.portable import can_check, missing_kernels
from param_compute.capture.coverage import summary_lines, time_coverage
from param_compute.capture.index_rules import index_rules
from param_compute.capture.meta_ops import registered_overloads
from param_compute.capture.param_form import noted_configs, param_form_spec
from param_compute.capture.schema_args import is_view_op, schema_arguments, split_name
from param_compute.formatting import printable

VIEWS_DROPPED = "view/alias bookkeeping (dropped by --skip-views)"
#: The schema key of collective configs: they have no schema (the op's name picks them).
COLLECTIVE_SCHEMA = ""
LOG = logging.getLogger("param_compute.capture")


def _overload_problem(namespace: str, base: str, overload: str) -> Optional[str]:
    """What makes ``namespace::base.overload`` unknown here, or None: the dispatcher's registry
    is asked by exact name (no operator attribute is looked up from trace text)."""
    import torch

    overloads = registered_overloads(namespace, base)
    if overloads is None:
        return (f"{namespace}::{base} does not exist in this torch build ({torch.__version__})"
                + ("" if namespace == "aten" else " or its library is not loaded"))
    if overload not in overloads:
        return f"{namespace}::{base} has no overload {overload!r} in this torch build"
    return None


def _walk_typed(value: Any, kind: str) -> Iterator[Dict[str, Any]]:
    """The data specs of type ``kind`` in a data spec or a list of them, lists opened up."""
    if isinstance(value, dict):
        if value.get("type") == kind:
            yield value
        elif value.get("type") in ("genericlist", "tuple"):
            for item in value.get("value") or []:
                yield from _walk_typed(item, kind)
    elif isinstance(value, list):
        for item in value:
            yield from _walk_typed(item, kind)


def _walk_tensors(value: Any) -> Iterator[Dict[str, Any]]:
    return _walk_typed(value, "tensor")


def _same_device(name: Any, main: str) -> bool:
    """``cuda`` (the current device when captured) counts as the main ``cuda:N``."""
    if not isinstance(name, str):
        return False
    kind, _, index = name.partition(":")
    main_kind, _, main_index = main.partition(":")
    return kind == main_kind and (not index or index == main_index)


def _without_ranges(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_ranges(v) for k, v in value.items() if k != "value_range"}
    if isinstance(value, list):
        return [_without_ranges(v) for v in value]
    return value


def _widen(into: Any, new: Any) -> None:
    """Widen ``into``'s tensor value ranges to cover ``new``'s (same structure otherwise)."""
    if isinstance(into, dict) and isinstance(new, dict):
        if "value_range" in into and "value_range" in new:
            into["value_range"] = [min(into["value_range"][0], new["value_range"][0]),
                                   max(into["value_range"][1], new["value_range"][1])]
        elif "value_range" in new:
            into["value_range"] = list(new["value_range"])
        for key, value in into.items():
            if key != "value_range" and key in new:
                _widen(value, new[key])
    elif isinstance(into, list) and isinstance(new, list):
        for a, b in zip(into, new):
            _widen(a, b)


class CapturedWorkload:
    """Aten calls of one captured step, folded into configs with counts."""

    def __init__(self, source: str, skip_views: bool = False,
                 allow_namespaces: Sequence[str] = (), target_device: str = "cpu"):
        self.source = source
        self.skip_views = skip_views
        self.allow_namespaces = frozenset(allow_namespaces)
        for namespace in self.allow_namespaces:
            load_namespace(namespace)
        self.target_device = target_device
        self.calls = 0  # every call handed to add() or skip()
        self.views_dropped = 0
        # "ns::base" -> schema -> signature key -> {"args", "kwargs", "count", "original"}
        self._ops: Dict[str, Dict[str, Dict[str, Dict[str, Any]]]] = {}
        self._skipped: Dict[Tuple[str, str], SkippedOp] = {}
        self.steps = None  # trace_walk.Steps, for an execution trace
        self.nesting: Optional[Dict[str, Any]] = None  # parent links rebuilt (repair_nesting)
        self.strides: Optional[Dict[str, Any]] = None  # how input layouts were obtained
        self.kineto: Optional[Dict[str, Any]] = None  # the Kineto join's coverage
        self._original_skipped: Dict[str, OriginalTimes] = {}
        self.step = None  # capture.step.dataflow.StepRecorder: the calls in order, with their dataflow
        self.last_config: Optional[Tuple[str, str, str]] = None  # the config add() filled
        #: The intra-op thread count the captured run used, where known (a live capture knows;
        #: a Kineto trace says where the recording added it).
        self.num_threads: Optional[int] = None
        self.allocator: Optional[Dict[str, str]] = None  # ``process.allocator``'s, if known
        #: A distributed trace's job (``capture.trace.comms``: rank, world, groups), if any.
        self.distributed: Optional[Dict[str, Any]] = None
        #: A live capture under torchrun, on rank 0: every rank's workload, to be joined
        #: (``capture.job``); None otherwise.
        self.job_parts: Optional[List["CapturedWorkload"]] = None
        #: A live capture's recorder of compiled regions (``capture.live.compiled``), and the
        #: graphs its calls ran, by name (``graph::NAME`` configs; ``spec.graphs``).
        self.regions = None
        self._graphs: Dict[str, Dict[str, Any]] = {}
        #: A trace's compiled regions and their time no captured call accounts for
        #: (``capture.trace.compiled``).
        self.trace_regions: Optional[Dict[str, Any]] = None
        #: op -> {"calls", "optimizer", "profile"}: calls reading state a trace has no values
        #: for (``capture.trace.value_blind``); "profile" the value_profile they were given.
        self.values_unknown: Dict[str, Dict[str, Any]] = {}
        #: ``--subnormal-state``'s {"fraction", "tensors" made subnormal, "of" state tensors}.
        self.subnormal_state: Optional[Dict[str, Any]] = None

    # -- collecting --------------------------------------------------------------------------
    def note_values_unknown(self, op: str, optimizer: str,
                            subnormal: Optional[int] = None) -> None:
        """One captured call of ``op`` read ``optimizer``'s state, whose values the source
        did not record (``subnormal``: with ``--subnormal-state``, how many of its state
        inputs were made subnormal; None without it)."""
        entry = self.values_unknown.setdefault(op, {"calls": 0, "optimizer": optimizer,
                                                    "profile": None})
        entry["calls"] += 1
        if subnormal is not None:
            profile = entry["profile"] = entry["profile"] or {
                "subnormal_state": self.subnormal_state["fraction"]
                if self.subnormal_state else None, "calls_given_subnormal": 0}
            profile["calls_given_subnormal"] += bool(subnormal)

    def carry_structure(self) -> int:
        """Give calls that only convert or copy an index the structure of what they feed
        (``capture.step.upstream``), once the step's dataflow is recorded."""
        if self.step is None:
            return 0
        from param_compute.capture.step.upstream import carry_structure

        configs = {(op, schema, key): entry for op, schemas in self._ops.items()
                   for schema, bucket in schemas.items() for key, entry in bucket.items()}
        return carry_structure(configs, self.step.calls)

    def values_unknown_json(self) -> List[Dict[str, Any]]:
        """The report's and step file's ``values_unknown``: one entry per op, most calls
        first."""
        return [{"op": op, **entry} for op, entry in
                sorted(self.values_unknown.items(), key=lambda item: -item[1]["calls"])]

    def skip(self, op: str, reason: str, count: int = 1, counted: bool = False,
             kind: str = "argument", original: Optional[Tuple[float, float]] = None) -> None:
        if not counted:
            self.calls += count
        key = (op, reason)
        if key not in self._skipped:
            self._skipped[key] = SkippedOp(op, reason, kind=kind)
        self._skipped[key].count += count
        self._original_skipped.setdefault(op, OriginalTimes()).add(original, count)
        LOG.debug("not captured: %s (%s): %s", printable(op, 300), kind, printable(reason, 300))

    def add(self, schema: str, args: List[Dict[str, Any]],
            kwargs: Optional[Dict[str, Dict[str, Any]]] = None,
            original: Optional[Tuple[Optional[float], Optional[float]]] = None) -> bool:
        """Record one call (``original``: its (CPU, device) time in µs in the recorded run);
        False when it was skipped (the reason is kept) or dropped as a view."""
        self.calls += 1
        self.last_config = None
        try:
            return self._add(schema, args, dict(kwargs or {}), original)
        except Exception as exc:  # a capture bug must not end the capture: keep it as a skip
            self.skip(schema.split("(", 1)[0], f"capture failed: {type(exc).__name__}: {exc}",
                      counted=True, kind="failed", original=original)
            return False

    def _add(self, schema: str, args: List[Dict[str, Any]], kwargs: Dict[str, Any],
             original=None) -> bool:
        namespace, base, overload = split_name(schema)
        op = f"{namespace}::{base}" + ("" if overload == "default" else f".{overload}")
        kind = op_kind(namespace, base)
        if kind is not None:
            self.skip(op, kind_reason(kind, op), counted=True, kind=kind, original=original)
            return False
        refusal = self._refusal(namespace, base, overload)
        if refusal:
            self.skip(op, refusal[1], counted=True, kind=refusal[0], original=original)
            return False
        if self.skip_views and is_view_op(schema):
            self.views_dropped += 1
            return False
        arguments = schema_arguments(schema)
        named = {a.name: spec for a, spec in zip([a for a in arguments if not a.kwarg_only],
                                                  args)}
        named.update(kwargs)
        try:
            reason = index_rules(base, named)
        except Exception as exc:  # an odd recorded shape must not end the capture
            reason = f"index ranges could not be derived: {type(exc).__name__}: {exc}"
        if reason:
            self.skip(op, reason, counted=True, kind="index", original=original)
            return False
        if not any(a.name == "storage_offset" for a in arguments):
            # Where a view starts in its storage only matters to ops addressing storage
            # directly (as_strided); elsewhere it would split configs for nothing.
            for tensor in _walk_tensors(args + list(kwargs.values())):
                tensor.pop("storage_offset", None)
        signature = {"args": args, "kwargs": kwargs}
        key = json.dumps(_without_ranges(signature), sort_keys=True)
        bucket = self._ops.setdefault(f"{namespace}::{base}", {}).setdefault(schema, {})
        entry = bucket.get(key)
        if entry is None:
            entry = bucket[key] = {"args": copy.deepcopy(args), "kwargs": copy.deepcopy(kwargs),
                                   "count": 1, "original": OriginalTimes()}
        else:
            entry["count"] += 1
            _widen(entry["args"], args)
            _widen(entry["kwargs"], kwargs)
        entry["original"].add(original)
        self.last_config = (f"{namespace}::{base}", schema, key)
        return True

    def add_collective(self, op: str, args: List[Dict[str, Any]], kwargs: Dict[str, Any],
                       original: Optional[Tuple[Optional[float], Optional[float]]] = None,
                       comm_us: Optional[float] = None) -> bool:
        """Record one collective call (``capture.collectives``' form: ``torch.distributed``'s
        arguments, its group by name); ``comm_us``: its communication time in the original.
        Its config has no schema build (the op's name picks the collective)."""
        self.calls += 1
        signature = {"args": args, "kwargs": kwargs}
        key = json.dumps(signature, sort_keys=True)
        bucket = self._ops.setdefault(op, {}).setdefault(COLLECTIVE_SCHEMA, {})
        entry = bucket.get(key)
        if entry is None:
            entry = bucket[key] = {"args": copy.deepcopy(args), "kwargs": copy.deepcopy(kwargs),
                                   "count": 0, "original": OriginalTimes(), "comm": [0.0, 0]}
        entry["count"] += 1
        entry["original"].add(original)
        if comm_us is not None:
            entry["comm"][0] += comm_us
            entry["comm"][1] += 1
        self.last_config = (op, COLLECTIVE_SCHEMA, key)
        return True

    def communication_us(self) -> Dict[str, Any]:
        """The captured collectives' communication time in the original (µs, summed over
        their calls) and how many calls had one."""
        total, timed, calls = 0.0, 0, 0
        for schemas in self._ops.values():
            for entry in schemas.get(COLLECTIVE_SCHEMA, {}).values():
                calls += entry["count"]
                total += entry["comm"][0]
                timed += entry["comm"][1]
        return {"calls": calls, "timed_calls": timed, "comm_us": round(total, 1)}

    def add_graph(self, record, args: List[Dict[str, Any]],
                  original: Optional[Tuple[Optional[float], Optional[float]]] = None
                  ) -> Tuple[str, str, str]:
        """Record one call of a compiled region's graph (``record``: its
        ``capture.live.compiled.RegionGraph``, ``args``: its inputs' data specs) as a config of
        ``graph::NAME``; the config it went into."""
        self.calls += 1
        self._graphs[record.name] = record.graph
        for tensor in _walk_tensors(args):
            tensor.pop("storage_offset", None)  # a compiled graph reads its inputs as views
        key = json.dumps(_without_ranges({"args": args}), sort_keys=True)
        bucket = self._ops.setdefault(record.op, {}).setdefault(record.name, {})
        entry = bucket.get(key)
        if entry is None:
            entry = bucket[key] = {"args": copy.deepcopy(args), "kwargs": {}, "count": 1,
                                   "original": OriginalTimes()}
        else:
            entry["count"] += 1
            _widen(entry["args"], args)
        entry["original"].add(original)
        self.last_config = (record.op, record.name, key)
        return self.last_config

    def uncovered(self, what: str, original: Tuple[Optional[float], Optional[float]]) -> None:
        """Original time no call accounts for (a compiled region's kernels in a trace): not
        covered, named ``what``, with no calls of its own."""
        self._original_skipped.setdefault(what, OriginalTimes()).add(original)

    def _refusal(self, namespace: str, base: str, overload: str) -> Optional[Tuple[str, str]]:
        """(kind, reason) when calls of this op are not captured, else None."""
        if namespace != "aten" and namespace not in self.allow_namespaces \
                and namespace not in TORCH_NAMESPACES:
            return ("namespace", f"{namespace}:: operators run only where allowed: capture "
                    f"and run with --allow-namespace {namespace}")
        if namespace in TORCH_NAMESPACES:  # torch's own: its module registers them
            load_namespace(namespace)
        if base.startswith("__") or (namespace == "aten" and base in REFUSED_ATEN_NAMES):
            return ("refused", "refused by the spec resolver (dunder name, file access or "
                    "process state)")
        problem = _overload_problem(namespace, base, overload)
        return ("missing", problem) if problem else None

    # -- results -----------------------------------------------------------------------------
    @property
    def skipped(self) -> List[SkippedOp]:
        return list(self._skipped.values())

    @property
    def configs(self) -> int:
        return sum(len(bucket) for schemas in self._ops.values() for bucket in schemas.values())

    @property
    def captured_calls(self) -> int:
        return sum(entry["count"] for schemas in self._ops.values()
                   for bucket in schemas.values() for entry in bucket.values())

    def main_device(self) -> str:
        """The device most captured tensors live on; only tensors elsewhere keep a ``device``,
        and device args naming it replay as the run's device (``run_device``)."""
        devices: Counter = Counter()
        for schemas in self._ops.values():
            for bucket in schemas.values():
                for entry in bucket.values():
                    for tensor in _walk_tensors(entry["args"] + list(entry["kwargs"].values())):
                        devices[tensor.get("device", "cpu")] += entry["count"]
        return devices.most_common(1)[0][0] if devices else "cpu"

    def spec(self, param_form: bool = False) -> Dict[str, Any]:
        """The spec: ``{"aten::op": {generators, "config": [per overload]}}``; with
        ``param_form`` in the form PARAM's own replay runs (``capture.param_form``)."""
        return self.spec_and_notes(param_form)[0]

    def spec_and_notes(self, param_form: bool = False):
        """(the spec, the ``ParamFormNote`` list for the PARAM form, or None without it)."""
        spec = self._compact_spec()
        notes = None
        if param_form:
            spec, notes = param_form_spec(spec)
        if self._graphs:  # the graphs the spec's graph::NAME configs replay (spec.graphs)
            spec[GRAPHS_KEY] = dict(self._graphs)
        return spec, notes

    def settings(self) -> Dict[str, Any]:
        """``__capture__`` (``spec.reserved``): the device, thread count and allocator settings
        the captured run used (a live one knows the last), for the replay to compare."""
        threads = self.num_threads
        if threads is None and self.kineto is not None:
            threads = self.kineto.get("num_threads")
        known = {} if self.allocator is None else {"allocator": dict(self.allocator)}
        device = self.main_device()  # cuda:1 -> cuda: a replay picks its own GPU
        return {"device": device.split(":")[0] if device.startswith(("cuda", "cpu")) else device,
                "num_threads": threads, "source": self.source, **known}

    def _compact_spec(self) -> Dict[str, Any]:
        main = self.main_device()
        out: Dict[str, Any] = {}
        for base, schemas in self._ops.items():
            configs = []
            graph = base.startswith(GRAPH_PREFIX)  # one config per graph, no build args
            for schema, bucket in schemas.items():
                inputs = [self.arg_spec_list(entry, main) for entry in bucket.values()]
                configs.append({"input": inputs} if graph or schema == COLLECTIVE_SCHEMA else
                               {"build": [{"args": [{"type": "str", "value": schema}]}],
                                "input": inputs})
            out[base] = {"build_data_generator": DEFAULT_DATA_GENERATOR,
                                    "input_data_generator": DEFAULT_DATA_GENERATOR,
                                    "config": configs}
        return out

    @staticmethod
    def arg_spec_list(entry: Dict[str, Any], main: str) -> Dict[str, Any]:
        """One config's input as the spec writes it: its args and kwargs (tensors on the
        main device lose their ``device``, device args naming it become the run's), its
        ``count`` and mean ``original_us`` (a collective's with its communication ``comm``)."""
        arg_spec_list: Dict[str, Any] = {"args": copy.deepcopy(entry["args"])}
        if entry["kwargs"]:
            arg_spec_list["kwargs"] = copy.deepcopy(entry["kwargs"])
        values = list(arg_spec_list.get("kwargs", {}).values()) + arg_spec_list["args"]
        for tensor in _walk_tensors(values):
            if tensor.get("device") == main:
                del tensor["device"]  # made on the run's device
        for device in _walk_typed(values, "device"):
            if _same_device(device.get("value"), main):
                device["run_device"] = True
        arg_spec_list["count"] = entry["count"]
        original = entry["original"].mean()
        comm = entry.get("comm")
        if comm is not None and comm[1]:
            original = {**(original or {"cpu": None, "device": None}),
                        "comm": round(comm[0] / comm[1], 3)}
        if original is not None:
            arg_spec_list["original_us"] = original
        return arg_spec_list

    def entries(self):
        """(op, schema, signature key, entry) of every config, in the spec's order."""
        for op, schemas in self._ops.items():
            for schema, bucket in schemas.items():
                for key, entry in bucket.items():
                    yield op, schema, key, entry

    def report(self, param_form_notes: Optional[List[Any]] = None) -> Dict[str, Any]:
        """What was captured and what was not, with reasons (the ``.capture.json`` sidecar);
        given the PARAM form's notes, also every config PARAM's replay won't reproduce."""
        skipped = sorted(self.skipped, key=lambda s: -s.count)
        report = {
            "source": self.source,
            "calls": self.calls,
            "captured_calls": self.captured_calls,
            "operators": len(self._ops),
            "configs": self.configs,
            "skip_views": self.skip_views,
            "views_dropped": self.views_dropped,
            "skipped_calls": sum(s.count for s in skipped),
            "skipped": [s.to_json() for s in skipped],
            "main_device": self.main_device(),
            "num_threads": self.settings()["num_threads"],
            "not_captured": self.groups(),
            "target_device": self.target_device,
            "target_kernels_checked": can_check(self.target_device),
            "no_kernel_on_target": missing_kernels(self._compact_spec(), self.target_device),
        }
        if self.allow_namespaces:
            report["allowed_namespaces"] = sorted(self.allow_namespaces)
        if self.steps is not None:
            report["steps"] = self.steps.to_json()
        if self.nesting is not None:
            report["nesting_repaired"] = self.nesting
        if self.distributed is not None:
            report["distributed"] = self.distributed
        if self.strides is not None:
            report["strides"] = self.strides
        if self.kineto is not None:
            report["original_time"] = {**self.kineto, **self.time_coverage()}
        regions = self.compiled_regions()
        if regions is not None:
            report["compiled_regions"] = regions
        if self.values_unknown:
            report["values_unknown"] = self.values_unknown_json()
        if self.subnormal_state is not None:
            report["subnormal_state"] = self.subnormal_state
        if param_form_notes is not None:
            report["param_form"] = {
                "configs_param_fails_on": len(noted_configs(param_form_notes, fails=True)),
                "configs_param_runs_differently": len(noted_configs(param_form_notes,
                                                                    fails=False)),
                "notes": [note.to_json() for note in param_form_notes]}
        return report

    def write(self, path, param_form: bool = False) -> Tuple[Path, Path]:
        """Write the spec to ``path`` and the report beside it (``NAME.capture.json``)."""
        return self.write_spec(path, *self.spec_and_notes(param_form))

    def write_spec(self, path, spec: Dict[str, Any],
                   param_form_notes: Optional[List[Any]] = None) -> Tuple[Path, Path]:
        """Write ``spec`` (this workload's, as ``spec_and_notes`` made it) and the report."""
        import hashlib

        from param_compute.files import write_new

        path = Path(path)
        if param_form_notes is None:  # PARAM reads every top-level key as an operator
            spec = {**spec, CAPTURE_KEY: self.settings()}
        text = (json.dumps(spec, indent=1) + "\n").encode("utf-8")
        write_new(path, text)
        report = report_path(path)
        write_new(report, json.dumps(self.report(param_form_notes), indent=1) + "\n")
        if self.step is not None and self.step.calls:
            from param_compute.capture.step.original import step_original

            # the spec's hash as a run computes it (a results header's spec_sha256): a replay
            # tells a step file whose spec changed since (runtime.step_run)
            self.step.write(path, self.run_keys(), self.source, step_original(self),
                            hashlib.sha256(text).hexdigest())
        return path, report

    def run_keys(self) -> Dict[Tuple[str, str, str], str]:
        """(op, schema, signature) of each config -> its run key in the spec
        (``op|config|0|input``: configs and inputs in the order the spec lists them)."""
        keys = {}
        for op, schemas in self._ops.items():
            for config_index, (schema, bucket) in enumerate(schemas.items()):
                for input_index, signature in enumerate(bucket):
                    keys[(op, schema, signature)] = format_key(op, config_index, 0, input_index)
        return keys

    def groups(self) -> List[Dict[str, Any]]:
        """The calls not captured, one group per kind: ``{kind, what, calls, ops}``, largest
        first (``ops``: op -> calls)."""
        groups: Dict[str, Dict[str, Any]] = {}
        for skip in self._skipped.values():
            group = groups.setdefault(skip.kind, {"kind": skip.kind,
                                                  "what": KINDS.get(skip.kind, skip.kind),
                                                  "calls": 0, "ops": {}})
            group["calls"] += skip.count
            group["ops"][skip.op] = group["ops"].get(skip.op, 0) + skip.count
        for group in groups.values():
            group["ops"] = dict(sorted(group["ops"].items(), key=lambda kv: -kv[1]))
        return sorted(groups.values(), key=lambda g: -g["calls"])

    def time_coverage(self) -> Dict[str, Any]:
        """Original time (µs, from a Kineto join) captured vs not, in all and per op."""
        captured = [(op, entry["original"]) for op, schemas in self._ops.items()
                    for bucket in schemas.values() for entry in bucket.values()]
        return time_coverage(captured, list(self._original_skipped.items()))

    def compiled_regions(self) -> Optional[Dict[str, Any]]:
        """The step's compiled regions (``torch.compile``): ``count`` (graphs that ran),
        ``captured_as_graphs``, ``time_us`` (their original time per step), each graph with its
        calls, time, and whether it was captured or why not, graph breaks, regions compiled
        by another backend; or a trace's regions and their time no captured call accounts
        for. None for a step with none."""
        if self.trace_regions is not None:
            return self.trace_regions
        if self.regions is None or not self.regions.graphs:
            return None
        from param_compute.capture.coverage import region_rows

        return region_rows(self.regions, self._ops, self._original_skipped,
                           {op: skip.count for skip in self._skipped.values()
                            for op in [skip.op] if op.startswith(GRAPH_PREFIX)})

    def summary_lines(self) -> List[str]:
        """The summary, then one short line per thing a user must know (steps, layouts, each
        group of calls not captured, configs without a kernel on the target, original time)."""
        return summary_lines(self)

    def summary(self) -> str:
        line = (f"{self.source}: {self.calls} calls -> {self.captured_calls} captured in "
                f"{self.configs} configs of {len(self._ops)} ops")
        if self.views_dropped:
            line += f", {self.views_dropped} view calls dropped"
        skipped = sum(s.count for s in self._skipped.values())
        if skipped:
            line += f", {skipped} calls skipped"
        return line


def report_path(spec_path: Path) -> Path:
    name = spec_path.name[:-5] if spec_path.name.endswith(".json") else spec_path.name
    return spec_path.with_name(f"{name}.capture.json")

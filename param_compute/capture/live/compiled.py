"""Compiled regions in a live capture: each graph Inductor compiles kept as data, each call seen.

A step under ``torch.compile`` runs Inductor's generated code, whose fused kernels no dispatch
mode sees; run under a ``TorchDispatchMode`` it would instead be skipped by dynamo and run
eagerly, a different program from the one production runs. While a ``RegionRecorder`` is
active, every graph Inductor compiles passes through it first: Inductor's one entry for a
graph (``torch._inductor.compile_fx._compile_fx_inner``, called for the forward and the
backward aten graph of each region, after AOT autograd partitioned them) is wrapped, the graph
is recorded as data (``graph_json``: its nodes with their exact aten overloads, arguments,
dataflow, its inputs' shapes, strides and dtypes, the region it came from, forward, backward or
inference) before Inductor's passes change it, and then handed to Inductor unchanged, so the
step runs as production runs it. The compiled callable Inductor returns is wrapped too
(``RegionCall``): called while a live capture or the in-place timer listens, the region is one
call to them, its inputs and outputs in the step's dataflow, its own work (Inductor's kernels,
the extern calls inside) unseen by them; called otherwise, it only forwards the call.

The recorder turns off AOT autograd's cache while it is active (a cache hit skips Inductor's
entry, and the graph would go unseen) and starts dynamo afresh (``torch._dynamo.reset()``): a
model compiled before is compiled again, through it. It watches only where dynamo is loaded
(a step that never called ``torch.compile`` costs nothing) and only Inductor: a region
compiled by another backend (``aot_eager``, ``eager``, a custom one) runs its aten ops under
the dispatch mode as that backend runs them, and is captured op by op. What it could not keep
as a graph (a symbolic shape, an operator off the graph allow-list, a constant tensor inside
the graph) is listed with the reason, as are dynamo's graph breaks.
"""

from __future__ import annotations

import math
import operator as python_operator
import re
import sys
from collections import Counter
from typing import Any, Callable, Dict, List, Optional

from param_compute.capture.accounting import Unreplayable
from param_compute.dtypes import DTYPE_NAMES
from param_compute.formatting import printable
from param_compute.spec.graphs import COMPILE_OPTIONS, GETITEM, VERSION

#: The live capture or in-place timer listening to region calls (the innermost last).
_LISTENERS: List[Any] = []
#: Recorders installed (nested: the outermost does the work).
_RECORDERS: List["RegionRecorder"] = []


def recording() -> bool:
    """Whether a recorder watches Inductor's compiles now: a dispatch mode may then let
    compiled code run under it (``ignore_compile_internals``), its regions seen as calls."""
    return any(r.installed for r in _RECORDERS)


def listen(listener: Any) -> None:
    _LISTENERS.append(listener)


def unlisten(listener: Any) -> None:
    if listener in _LISTENERS:
        _LISTENERS.remove(listener)


class RegionGraph:
    """One graph Inductor compiled: its name in the spec, region, pass, and its JSON form (or
    why there is none)."""

    def __init__(self, name: str, region: str, pass_name: str,
                 graph: Optional[Dict[str, Any]], reason: Optional[str]):
        self.name = name
        self.region = region
        self.pass_name = pass_name
        self.graph = graph
        self.reason = reason
        #: Why ``--eager-regions`` runs this forward's own aten ops, not its eager bodies.
        self.eager_reason: Optional[str] = None

    @property
    def op(self) -> str:
        return f"graph::{self.name}"

    def to_json(self) -> Dict[str, Any]:
        out = {"graph": self.name, "region": self.region, "pass": self.pass_name,
               "captured": self.graph is not None,
               "nodes": len(self.graph["nodes"]) if self.graph else None}
        if self.reason:
            out["reason"] = self.reason
        if self.graph is not None and self.pass_name != "backward":
            out["eager"] = ("as PyTorch runs it uncompiled" if self.graph.get("eager")
                            else f"its own aten ops ({self.eager_reason or 'no eager trace'})")
        return out


_PYTHON_KEYS: List[Any] = []


def run_alone(run: Callable[[List[Any]], Any], inputs: List[Any]) -> Any:
    """A region's compiled code run with every Python dispatch mode off (the dispatcher's
    Python keys excluded: 0.6 µs, where popping the modes costs 9): the extern kernels it
    calls (an ``mm`` Inductor leaves to aten) are its own, and a Python mode's cost per call
    would be time the step never spent."""
    import torch

    if not _PYTHON_KEYS:
        _PYTHON_KEYS.append(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
                            | torch._C.DispatchKeySet(torch._C.DispatchKey.PythonTLSSnapshot))
    with torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEYS[0]):
        return run(inputs)


def _compile_id() -> str:
    """The region being compiled: dynamo's compile id (``0/0``: frame 0, its first compile)."""
    try:
        from torch._guards import CompileContext

        return str(CompileContext.current_compile_id() or "?")
    except Exception:  # noqa: BLE001 - a name only
        return "?"


def run_inside(listener: Any, run: Callable[[List[Any]], Any], inputs: List[Any]) -> Any:
    """A region's compiled code run alone (``run_alone``) for ``listener``, whose dispatch
    mode then lets any call it still sees through as the region's own (``_inside``)."""
    listener._inside += 1
    try:
        return run_alone(run, inputs)
    finally:
        listener._inside -= 1


class RegionCall:
    """Inductor's compiled callable for one graph, watched: a listener (``listen``) gets each
    call as one (``region_call``); without one, the call goes straight through."""

    _boxed_call = True

    def __init__(self, record: RegionGraph, run: Callable[[List[Any]], Any]):
        self.record = record
        self.run = run

    def __call__(self, inputs: List[Any]) -> Any:
        if not _LISTENERS:
            return self.run(inputs)
        return _LISTENERS[-1].region_call(self.record, inputs, self.run)


def _dtype_name(dtype: Any) -> str:
    name = str(dtype).rpartition(".")[2]
    if name not in DTYPE_NAMES:
        raise Unreplayable(f"a tensor of dtype {name} (no spec dtype)", kind="compiled")
    return name


def _encode(value: Any, device: Any) -> Any:
    """An fx argument in the graph's JSON form (``spec.graphs``)."""
    import torch

    if isinstance(value, torch.fx.Node):
        return {"ref": value.name}
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, (list, tuple)):
        return [_encode(item, device) for item in value]
    if isinstance(value, torch.dtype):
        return {"dtype": _dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": "run" if device is not None and value.type == device.type
                and (value.index is None or value.index == device.index) else str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).rpartition(".")[2]}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).rpartition(".")[2]}
    raise Unreplayable(f"an argument of type {type(value).__name__} "
                       f"({printable(value, 60)})", kind="compiled")


def _op_name(target: Any) -> str:
    import torch

    if target is python_operator.getitem:
        return GETITEM
    if isinstance(target, torch._ops.OpOverload):
        namespace, _, base = target._schema.name.partition("::")
        return f"{namespace}::{base}.{target._overloadname}"
    raise Unreplayable(f"a call of {printable(getattr(target, '__name__', target), 80)}, "
                       "not an operator", kind="compiled")


def graph_body(gm: Any, example_inputs: List[Any]) -> Dict[str, Any]:
    """An fx graph of aten ops as data (``spec.graphs``: ``{inputs, nodes, outputs}``);
    ``Unreplayable`` saying why it cannot be. Its inputs are laid out as ``example_inputs``
    (what Inductor compiles for: a backward graph's saved activations restrided to the
    strides its forward gave them, where the placeholders still say the eager ones)."""
    import torch

    from param_compute.operators.graphs import node_operator

    inputs, nodes, outputs, device = [], [], None, None
    examples = list(example_inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            index = len(inputs)
            value = examples[index] if index < len(examples) else node.meta.get("val")
            if not isinstance(value, torch.Tensor):
                raise Unreplayable(f"input {node.name} is a {type(value).__name__}, not a "
                                   "tensor (a symbolic size: dynamic shapes)", kind="compiled")
            if any(not isinstance(d, int) for d in list(value.shape) + list(value.stride())):
                raise Unreplayable(f"input {node.name} has a symbolic size or stride (dynamic "
                                   "shapes)", kind="compiled")
            device = device or value.device
            inputs.append({"name": node.name, "dtype": _dtype_name(value.dtype),
                           "shape": list(value.shape), "stride": list(value.stride())})
        elif node.op == "call_function":
            op = _op_name(node.target)
            if op != GETITEM:
                _, why = node_operator(op)
                if why is not None:
                    raise Unreplayable(f"node {node.name}: {why}", kind="compiled")
            nodes.append({"name": node.name, "op": op,
                          "args": [_encode(a, device) for a in node.args],
                          "kwargs": {k: _encode(v, device) for k, v in node.kwargs.items()}})
        elif node.op == "output":
            values = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            outputs = []
            for value in values:
                if value is not None and not isinstance(value, torch.fx.Node):
                    raise Unreplayable(f"an output that is a {type(value).__name__}",
                                       kind="compiled")
                outputs.append(None if value is None else {"ref": value.name})
        else:
            raise Unreplayable(f"a {node.op} node ({node.name}: a constant or a submodule "
                               "inside the graph)", kind="compiled")
    return {"inputs": inputs, "nodes": nodes, "outputs": outputs or []}


def graph_json(gm: Any, example_inputs: List[Any], pass_name: str, region: str,
               settings: Dict[str, Any]) -> Dict[str, Any]:
    """The graph Inductor is about to compile, as data (``spec.graphs``): its body
    (``graph_body``), the region it came from, its pass and compile settings."""
    return {"version": VERSION, "region": region, "pass": pass_name,
            **graph_body(gm, example_inputs), "compile": settings}


def _tangents(graph: Dict[str, Any]) -> List[int]:
    """The input positions of a backward graph's tangents (AOT autograd names them)."""
    return [i for i, item in enumerate(graph["inputs"]) if item["name"].startswith("tangents")]


def eager_bodies(model: Any, example_inputs: List[Any]) -> Dict[str, Any]:
    """The region as PyTorch runs it uncompiled: dynamo's graph traced by AOT autograd with
    no decompositions (the aten ops eager dispatch reaches, backward formulas from autograd's
    own) and partitioned as eager autograd saves tensors (``default_partition``), backward
    lowered at once: ``{forward, backward, user_outputs}`` (``spec.graphs``); raises where it
    cannot be."""
    import torch._functorch.config as functorch_config
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import default_partition

    bodies: Dict[str, Any] = {}

    def keep(kind: str):
        def compiler(gm, inputs):
            bodies[kind] = graph_body(gm, inputs)
            return make_boxed_func(gm.forward)
        return compiler

    with functorch_config.patch(force_non_lazy_backward_lowering=True,
                                enable_autograd_cache=False):
        aot_module_simplified(model, list(example_inputs), fw_compiler=keep("forward"),
                              bw_compiler=keep("backward"), partition_fn=default_partition,
                              decompositions={}, keep_inference_input_mutations=True)
    forward = bodies["forward"]
    backward = bodies.get("backward")
    saved = len(backward["inputs"]) - len(_tangents(backward)) if backward else 0
    return {"forward": forward, **({"backward": backward} if backward else {}),
            "user_outputs": len(forward["outputs"]) - saved}


def _inductor_options() -> Dict[str, bool]:
    """The Inductor options (``spec.graphs.COMPILE_OPTIONS``) in effect for this compile."""
    from torch._inductor import config

    options = {}
    for key in COMPILE_OPTIONS:
        value: Any = config
        for part in key.split("."):
            value = getattr(value, part, None)
        if isinstance(value, bool):
            options[key] = value
    return options


class RegionRecorder:
    """Records every graph Inductor compiles while active (see the module's doc); ``graphs``
    in compile order, ``graph_breaks()`` and ``other_backend_graphs()`` for the report.

    Besides Inductor's graph entry it wraps Inductor's backend (``compile_fx``, called once
    per region with dynamo's graph) to trace the region as PyTorch runs it uncompiled
    (``eager_bodies``), kept in its forward graph's ``eager`` for ``--eager-regions``. Where
    dynamo is not loaded yet, ``torch.compile`` is wrapped until it is first called."""

    def __init__(self):
        self.graphs: List[RegionGraph] = []
        self.installed = False
        self._names: Counter = Counter()
        self._saved: Dict[str, Any] = {}
        self._breaks: Counter = Counter()
        self._unique_graphs = 0
        self._eager: Dict[str, Any] = {}  # region -> its eager bodies, or why there are none
        self._forwards: Dict[str, RegionGraph] = {}
        self._in_backend = False

    def __enter__(self) -> "RegionRecorder":
        _RECORDERS.append(self)
        if len(_RECORDERS) > 1:
            return self  # the outer recorder watches
        if "torch._dynamo" not in sys.modules:  # nothing compiled yet: at the first compile
            import torch

            original = torch.compile

            def compile_first(*args, **kwargs):
                torch.compile = original
                if self in _RECORDERS and not self.installed:
                    self._install()
                return original(*args, **kwargs)
            self._saved["compile"] = (torch, original)
            torch.compile = compile_first
            return self
        self._install()
        return self

    def _install(self) -> None:
        import torch._dynamo
        import torch._functorch.config as functorch_config
        import torch._inductor.compile_fx as compile_fx

        self._saved.update({"inner": compile_fx._compile_fx_inner,
                            "backend": compile_fx.compile_fx,
                            "cache": functorch_config.enable_autograd_cache})
        functorch_config.enable_autograd_cache = False
        torch._dynamo.reset()  # compiled before: compiled again, through the recorder
        counters = torch._dynamo.utils.counters
        self._breaks = Counter(counters["graph_break"])
        self._unique_graphs = counters["stats"]["unique_graphs"]
        inner_original, backend_original = self._saved["inner"], self._saved["backend"]

        def inner(gm, example_inputs, compile_region_name=None, **kwargs):
            record = self._record(gm, example_inputs, kwargs)
            compiled = inner_original(gm, example_inputs, compile_region_name, **kwargs)
            run = getattr(compiled, "current_callable", None)
            if run is None:
                record.graph, record.reason = None, "Inductor returned no callable to watch"
            else:
                compiled.current_callable = RegionCall(record, run)
            return compiled

        def backend(model, example_inputs, *args, **kwargs):
            if not self._in_backend:  # (compile_fx calls itself with its options applied)
                self._eager_of(model, example_inputs)
            self._in_backend, outer = True, self._in_backend
            try:
                return backend_original(model, example_inputs, *args, **kwargs)
            finally:
                self._in_backend = outer

        compile_fx._compile_fx_inner = inner
        compile_fx.compile_fx = backend
        self.installed = True

    def __exit__(self, *exc) -> None:
        if self in _RECORDERS:
            _RECORDERS.remove(self)
        if "compile" in self._saved:
            module, original = self._saved.pop("compile")
            module.compile = original
        if not self.installed:
            return
        import torch._dynamo
        import torch._functorch.config as functorch_config
        import torch._inductor.compile_fx as compile_fx

        compile_fx._compile_fx_inner = self._saved["inner"]
        compile_fx.compile_fx = self._saved["backend"]
        functorch_config.enable_autograd_cache = self._saved["cache"]
        counters = torch._dynamo.utils.counters
        self._breaks = Counter({reason: count - self._breaks.get(reason, 0)
                                for reason, count in counters["graph_break"].items()
                                if count > self._breaks.get(reason, 0)})
        self._unique_graphs = counters["stats"]["unique_graphs"] - self._unique_graphs
        self.installed = False

    def _eager_of(self, model: Any, example_inputs: Any) -> None:
        """The region being compiled, traced as PyTorch runs it uncompiled (never raises:
        where it cannot be, ``--eager-regions`` runs the graph's own aten ops)."""
        region = _compile_id()
        try:
            self._eager[region] = eager_bodies(model, example_inputs)
        except Unreplayable as exc:
            self._eager[region] = f"not traced as PyTorch runs it: {exc}"
        except Exception as exc:  # noqa: BLE001 - recording never fails the user's compile
            self._eager[region] = (f"not traced as PyTorch runs it: {type(exc).__name__}: "
                                   f"{printable(exc, 200)}")

    def _record(self, gm: Any, example_inputs: Any, kwargs: Dict[str, Any]) -> RegionGraph:
        """The graph as data, before Inductor's own passes change it (never raises); a
        forward graph gets its region's eager bodies, a backward one its tangents."""
        region = _compile_id()
        pass_name = "backward" if kwargs.get("is_backward") else \
            "inference" if kwargs.get("is_inference") else "forward"
        stem = "r" + re.sub(r"[^A-Za-z0-9]+", "_", region).strip("_") + "_" + pass_name[:3]
        self._names[stem] += 1
        name = stem if self._names[stem] == 1 else f"{stem}_{self._names[stem]}"
        settings = {"static_inputs": sorted(int(i) for i in kwargs.get("static_input_idxs")
                                            or ()), "options": {}}
        try:
            settings["options"] = _inductor_options()
            graph, reason = graph_json(gm, example_inputs, pass_name, region, settings), None
        except Unreplayable as exc:
            graph, reason = None, str(exc)
        except Exception as exc:  # noqa: BLE001 - recording never fails the user's compile
            graph, reason = None, f"could not be recorded: {type(exc).__name__}: {exc}"
        record = RegionGraph(name, region, pass_name, graph, reason)
        if graph is not None:
            self._pair(record)
        self.graphs.append(record)
        return record

    def _pair(self, record: RegionGraph) -> None:
        """A forward graph takes its region's eager bodies; a backward graph names its
        tangents, and its forward keeps them only where both partitions agree on the
        region's own outputs (the rest of each forward's are saved for its backward)."""
        graph = record.graph
        if record.pass_name != "backward":
            eager = self._eager.get(record.region)
            if isinstance(eager, dict) and len(eager["forward"]["inputs"]) == len(
                    graph["inputs"]):
                graph["eager"] = eager
                self._forwards[record.region] = record
            elif eager is not None:
                record.eager_reason = eager if isinstance(eager, str) else \
                    "its eager forward takes other inputs"
            return
        tangents = _tangents(graph)
        graph["eager"] = {"tangents": tangents}
        forward = self._forwards.get(record.region)
        if forward is not None and forward.graph.get("eager") is not None:
            users = len(forward.graph["outputs"]) - (len(graph["inputs"]) - len(tangents))
            eager = forward.graph["eager"]
            if users != eager["user_outputs"] or "backward" not in eager \
                    or len(_tangents(eager["backward"])) != len(tangents):
                del forward.graph["eager"]
                forward.eager_reason = ("its eager and compiled partitions disagree on the "
                                        "region's own outputs")

    def graph_breaks(self) -> List[Dict[str, Any]]:
        """Dynamo's graph breaks while active: each reason (printable) with its count."""
        breaks = self._breaks if not self.installed else Counter()
        return [{"reason": printable((str(reason).strip().splitlines() or ["?"])[0], 300),
                 "count": count} for reason, count in breaks.most_common(20)]

    def other_backend_graphs(self) -> int:
        """Graphs dynamo compiled while active that no Inductor compile recorded (another
        backend's: their aten ops were captured as they ran)."""
        forward = sum(1 for g in self.graphs if g.pass_name != "backward")
        return max(0, self._unique_graphs - forward)

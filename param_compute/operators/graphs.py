"""A captured graph replayed as one call: checked, rebuilt of allow-listed aten ops, compiled.

A spec's ``__graphs__`` (``spec.graphs``) holds the forward and backward aten graphs that
Inductor compiled in a captured step. The operator ``graph::NAME`` replays one of them: the
engine binds the name to the spec's graph (``graph_factory``; nothing in the file chooses code),
the graph is rebuilt as an ``fx.Graph`` whose every node is an aten overload resolved by its
exact name under the rules of every spec op (``resolution.aten_packet``) and on this module's
allow-list of pure tensor ops (``GRAPH_OPS``: views, copies, factories, elementwise math,
reductions, matrix products, convolutions, normalizations, attention, losses and their backward
ops), then compiled with Inductor (``compile_fx_inner``, as ``torch.compile`` compiled the
original, on fake inputs of the recorded shapes and strides) when first bound, outside any
timing; its compile time is the run's ``compile.time``. With ``--eager-regions`` it runs the
same aten ops one by one instead.

``check_graph`` is the validation a spec's graphs get before anything runs: each node's
operator allowed and resolved, its arguments bound to the operator's schema (arity, names),
and the graph run on meta tensors (shapes only, nothing allocated) to size it: a node whose
outputs would bring the graph past ``MAX_GRAPH_BYTES`` (1 TiB) is refused. Every problem names
the graph and the node.
"""

from __future__ import annotations

import functools
import operator as python_operator
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from param_compute.formatting import format_size
from param_compute.operators.meta import new_storage_bytes
from param_compute.operators.resolution import aten_packet
from param_compute.plugins.interfaces import OperatorInterface
from param_compute.spec.graphs import GETITEM, graph_name, node_label

#: A graph whose tensors would need more than this (inputs and every node's new outputs
#: alive at once) is refused when the spec is read: no run could hold it.
MAX_GRAPH_BYTES = 2**40

_VIEWS = """
    view _unsafe_view reshape _reshape_alias permute transpose t expand expand_as squeeze
    unsqueeze slice select split split_with_sizes unbind as_strided alias detach diagonal narrow
    unfold chunk clone contiguous view_as real imag
"""
_MAKE = """
    _to_copy copy copy_ empty empty_like empty_strided new_empty new_empty_strided new_zeros
    new_ones new_full zeros zeros_like ones ones_like full full_like scalar_tensor arange
    fill fill_ zero_ lift_fresh_copy rand rand_like randn randn_like bernoulli
    native_dropout native_dropout_backward where masked_fill constant_pad_nd cat stack
    _unsafe_index _unsafe_index_put _unsafe_masked_index _unsafe_masked_index_put_accumulate
    index index_put index_put_ index_select gather scatter scatter_add scatter_reduce
    embedding embedding_dense_backward flip roll repeat tril triu sort topk
"""
_MATH = """
    abs acos acosh add addcdiv addcmul asin asinh atan atan2 atanh bitwise_and bitwise_not
    bitwise_or bitwise_xor ceil clamp clamp_max clamp_min cos cosh div elu elu_backward eq erf
    erfc erfinv exp exp2 expm1 floor fmod ge gelu gelu_backward gt hardsigmoid
    hardsigmoid_backward hardswish hardswish_backward hardtanh hardtanh_backward isinf isnan
    le leaky_relu leaky_relu_backward lerp lgamma log log10 log1p log2 logical_and logical_not
    logical_or logical_xor lt maximum minimum mish mul ne neg pow reciprocal relu remainder
    round rsqrt rsub sigmoid sigmoid_backward sign silu silu_backward sin sinh softplus
    softplus_backward sqrt square sub tan tanh tanh_backward threshold threshold_backward
    trunc _softmax _log_softmax _softmax_backward_data _log_softmax_backward_data
"""
_COMPUTE = """
    sum mean amax amin max min argmax argmin var var_mean std prod any all cumsum logsumexp
    mm addmm bmm baddbmm dot mv addmv _addmm_activation
    convolution convolution_backward
    native_batch_norm native_batch_norm_backward _native_batch_norm_legit
    _native_batch_norm_legit_functional _native_batch_norm_legit_no_training
    native_layer_norm native_layer_norm_backward native_group_norm native_group_norm_backward
    max_pool2d_with_indices max_pool2d_with_indices_backward avg_pool2d avg_pool2d_backward
    _adaptive_avg_pool2d _adaptive_avg_pool2d_backward _low_memory_max_pool2d_with_offsets
    _low_memory_max_pool2d_offsets_to_indices upsample_nearest2d upsample_bilinear2d
    _scaled_dot_product_flash_attention_for_cpu
    _scaled_dot_product_flash_attention_for_cpu_backward
    _scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_backward
    _scaled_dot_product_efficient_attention _scaled_dot_product_efficient_attention_backward
    _scaled_dot_product_cudnn_attention _scaled_dot_product_cudnn_attention_backward
    _flash_attention_forward _flash_attention_backward _efficient_attention_forward
    _efficient_attention_backward
    nll_loss_forward nll_loss_backward nll_loss2d_forward nll_loss2d_backward mse_loss
    mse_loss_backward binary_cross_entropy binary_cross_entropy_backward
    binary_cross_entropy_with_logits smooth_l1_loss smooth_l1_loss_backward
"""
#: The aten operators (base names) a graph may run: tensors from tensors, nothing else.
GRAPH_OPS = frozenset((_VIEWS + _MAKE + _MATH + _COMPUTE).split())
_META = torch.device("meta")


def node_operator(op: str) -> Tuple[Any, Optional[str]]:
    """(the ``OpOverload`` of ``aten::name.overload``, None), or (None, why it may not run):
    outside aten, not on ``GRAPH_OPS``, or refused or unknown by the rules of every spec's
    aten names (``resolution.aten_packet``)."""
    namespace, _, rest = op.partition("::")
    base, _, overload = rest.partition(".")
    if namespace != "aten" or base not in GRAPH_OPS:
        return None, (f"{op} is not on the graph allow-list of pure tensor ops "
                      "(operators.graphs.GRAPH_OPS)")
    packet, refusal = aten_packet(op)
    if refusal is not None:
        return None, refusal.reason
    overload_op = getattr(packet, overload, None)
    if not isinstance(overload_op, torch._ops.OpOverload):
        return None, f"{op}: no overload {overload!r}"
    return overload_op, None


def _arity_problem(target: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Optional[str]:
    """Whether ``args``/``kwargs`` bind to the operator's schema, as the dispatcher binds them."""
    arguments = target._schema.arguments
    positional = [a for a in arguments if not a.kwarg_only]
    if len(args) > len(positional):
        return (f"{len(args)} positional arguments for {target._schema.name}."
                f"{target._overloadname}, which takes {len(positional)}")
    names = {a.name for a in arguments}
    unknown = [k for k in kwargs if k not in names]
    if unknown:
        return f"no argument {unknown[0]!r} in {target._schema.name}.{target._overloadname}"
    given = {a.name for a in positional[:len(args)]} | set(kwargs)
    missing = [a.name for a in arguments if a.name not in given and not a.has_default_value()]
    if missing:
        return f"argument {missing[0]!r} of {target._schema.name} is not given"
    taken = [a.name for a in positional[:len(args)] if a.name in kwargs]
    if taken:
        return f"argument {taken[0]!r} given twice"
    return None


def _decode(value: Any, env: Dict[str, Any], device: Any) -> Any:
    """An argument of the graph's JSON form as the value its operator takes; references from
    ``env`` (inputs and earlier nodes); ``{"device": "run"}`` is ``device``."""
    if isinstance(value, list):
        return [_decode(item, env, device) for item in value]
    if not isinstance(value, dict):
        return value
    tag, text = next(iter(value.items()))
    if tag == "ref":
        return env[text]
    if tag == "dtype":
        from param_compute.dtypes import DTYPE_NAMES

        return getattr(torch, DTYPE_NAMES[text])
    if tag == "device":  # (on meta, every device is meta: nothing is allocated)
        return device if text == "run" or device == _META else torch.device(text)
    if tag == "float":
        return float(text)
    return getattr(torch, text)  # layout, memory_format: names checked by spec.graphs


def _targets(graph: Dict[str, Any]) -> List[Any]:
    """Each node's callable (``getitem`` or the resolved overload); ValueError naming the
    node where one may not run."""
    targets = []
    for index, node in enumerate(graph["nodes"]):
        if node["op"] == GETITEM:
            targets.append(python_operator.getitem)
            continue
        target, why = node_operator(node["op"])
        if target is None:
            raise ValueError(f"{node_label(graph, index)}: {why}")
        targets.append(target)
    return targets


def _input_tensor(item: Dict[str, Any], device: Any) -> torch.Tensor:
    from param_compute.dtypes import DTYPE_NAMES

    shape = item["shape"]
    stride = item.get("stride")
    if stride is None:
        stride, step = [], 1
        for size in reversed(shape):
            stride.insert(0, step)
            step *= max(size, 1)
    return torch.empty_strided(shape, stride, dtype=getattr(torch, DTYPE_NAMES[item["dtype"]]),
                               device=device)


def _storage_extent(tensor: torch.Tensor) -> int:
    if tensor.numel() == 0:
        return 0
    last = sum((size - 1) * abs(step) for size, step in zip(tensor.shape, tensor.stride()))
    return (last + 1 + tensor.storage_offset()) * tensor.element_size()


def _on_meta(target: Any, args: List[Any], kwargs: Dict[str, Any]
             ) -> Tuple[List[Any], Dict[str, Any]]:
    """The call with each ``Device`` argument of the operator's schema set to meta, given or
    not: a factory given no device would allocate on the CPU."""
    args, kwargs = list(args), dict(kwargs)
    for index, argument in enumerate(target._schema.arguments):
        if "Device" in str(argument.type):
            if not argument.kwarg_only and index < len(args):
                args[index] = _META
            else:
                kwargs[argument.name] = _META
    return args, kwargs


class MetaRun:
    """A graph (or an eager body) run on the meta device, nothing allocated: the bytes of
    its inputs, the most bytes its nodes' new outputs hold at once, its outputs (meta
    tensors), and (the node, why) where a node cannot run or brings it past
    ``MAX_GRAPH_BYTES`` (-1: its inputs)."""

    def __init__(self, body: Dict[str, Any]):
        self.input_bytes = self.peak = 0
        self.outputs: List[Any] = []
        self.failure: Optional[Tuple[int, str]] = None
        try:
            targets = _targets(body)
        except ValueError as exc:
            self.failure = (-1, str(exc))
            return
        self._run(body, targets)

    def _run(self, body: Dict[str, Any], targets: List[Any]) -> None:
        inputs = [_input_tensor(item, _META) for item in body["inputs"]]
        env: Dict[str, Any] = {item["name"]: t for item, t in zip(body["inputs"], inputs)}
        self.input_bytes = sum(_storage_extent(t) for t in inputs)
        if self.input_bytes > MAX_GRAPH_BYTES:
            self.failure = (-1, f"its inputs need {format_size(self.input_bytes)}, over the "
                                f"{format_size(MAX_GRAPH_BYTES)} a graph may need")
            return
        frees: Dict[int, List[str]] = {}
        last_use: Dict[str, int] = {}
        for index, node in enumerate(body["nodes"]):
            for ref in _node_refs(node):
                last_use[ref] = index
        for value in body["outputs"]:
            if value is not None:
                last_use[value["ref"]] = len(body["nodes"])
        for ref, index in last_use.items():
            frees.setdefault(index, []).append(ref)
        alive: Dict[str, int] = {}
        live = 0
        for index, (node, target) in enumerate(zip(body["nodes"], targets)):
            args = _decode(node["args"], env, _META)
            kwargs = {k: _decode(v, env, _META) for k, v in node["kwargs"].items()}
            if target is not python_operator.getitem:
                why = _arity_problem(target, args, kwargs)
                if why:
                    self.failure = (index, why)
                    return
            if target is not python_operator.getitem:  # every Device argument meta
                args, kwargs = _on_meta(target, args, kwargs)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result = target(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the node's problem, named
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                self.failure = (index, "does not run on meta tensors (its shapes or arguments "
                                       f"do not fit): {first}")
                return
            env[node["name"]] = result
            added = 0 if target is python_operator.getitem else new_storage_bytes(
                result, (args, kwargs))
            alive[node["name"]] = added
            live += added
            self.peak = max(self.peak, live)
            if self.input_bytes + self.peak > MAX_GRAPH_BYTES:
                self.failure = (index, f"its outputs bring the graph to "
                                       f"{format_size(self.input_bytes + self.peak)}, over the "
                                       f"{format_size(MAX_GRAPH_BYTES)} a graph may need")
                return
            for ref in frees.get(index, ()):
                live -= alive.pop(ref, 0)
        self.outputs = [None if value is None else env[value["ref"]]
                        for value in body["outputs"]]


def _node_refs(node: Dict[str, Any]) -> List[str]:
    from param_compute.spec.graphs import refs

    return list(refs(node["args"])) + [r for v in node["kwargs"].values() for r in refs(v)]


def check_graph(name: str, graph: Dict[str, Any]) -> List[Tuple[tuple, str, Optional[str]]]:
    """(path below the graph, message, hint) of each problem a well-formed graph (and its
    eager bodies) has that only torch can see: an operator outside the allow-list or unknown,
    arguments that do not bind to its schema, shapes that do not fit or need over
    ``MAX_GRAPH_BYTES``."""
    eager = graph.get("eager") or {}
    bodies = [((), graph)] + [(("eager", key), eager[key]) for key in ("forward", "backward")
                              if isinstance(eager.get(key), dict)]
    problems: List[Tuple[tuple, str, Optional[str]]] = []
    for where, body in bodies:
        for index, node in enumerate(body["nodes"]):
            if node["op"] != GETITEM:
                _, why = node_operator(node["op"])
                if why is not None:
                    problems.append((where + ("nodes", index, "op"),
                                     f"{node_label(body, index)}: {why}",
                                     "a graph runs aten's pure tensor ops only"))
    if problems:
        return problems
    for where, body in bodies:
        failure = MetaRun(body).failure
        if failure is not None:
            index, why = failure
            if index < 0:
                return [(where + ("inputs",), why, None)]
            return [(where + ("nodes", index), f"{node_label(body, index)}: {why}", None)]
    return []


def rebuild(graph: Dict[str, Any], device: Any) -> torch.fx.GraphModule:
    """The graph as an ``fx.GraphModule`` of resolved overloads (``device`` for its
    ``{"device": "run"}`` arguments); its forward takes the inputs and returns a tuple."""
    fx_graph = torch.fx.Graph()
    env: Dict[str, Any] = {}
    for item in graph["inputs"]:
        env[item["name"]] = fx_graph.placeholder(item["name"])
    for node, target in zip(graph["nodes"], _targets(graph)):
        args = tuple(_decode(node["args"], env, device))
        kwargs = {k: _decode(v, env, device) for k, v in node["kwargs"].items()}
        env[node["name"]] = fx_graph.call_function(target, args, kwargs)
    fx_graph.output(tuple(None if value is None else env[value["ref"]]
                          for value in graph["outputs"]))
    fx_graph.lint()
    return torch.fx.GraphModule(torch.nn.Module(), fx_graph)


def compile_graph(module: torch.fx.GraphModule, graph: Dict[str, Any],
                  device: Any) -> Callable[[List[Any]], Any]:
    """``module`` compiled by Inductor as ``torch.compile`` compiled the original: its nodes
    given fake values of the graph's recorded input shapes, strides and dtypes on ``device``
    (nothing allocated), then ``compile_fx_inner`` with the graph's pass and static inputs,
    under the Inductor options the graph names (only those of
    ``spec.graphs.COMPILE_OPTIONS``). The result takes a list of inputs laid out as recorded
    (and empties it)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.utils import BoxedBool
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    settings = graph.get("compile") or {}
    options = dict(settings.get("options") or {})
    fake_mode = FakeTensorMode()
    with fake_mode:
        fakes = [_input_tensor(item, device) for item in graph["inputs"]]
    FakeTensorProp(module, fake_mode).propagate_dont_convert_inputs(*fakes)
    with inductor_config.patch(options), \
            torch._guards.tracing(torch._guards.TracingContext(fake_mode)):
        return compile_fx_inner(
            module, fakes, is_backward=graph["pass"] == "backward",
            is_inference=graph["pass"] == "inference",
            static_input_idxs=list(settings.get("static_inputs") or ()),
            cudagraphs=BoxedBool(bool(options.get("triton.cudagraphs"))))


class RegionStash:
    """What each region's eager forward saved for its backward, in a step replay with
    ``--eager-regions``: pushed by the forward's calls, taken (last first, as autograd runs
    backward) by the backward's. Only while a step runs (``active``): isolated, a backward
    gets generated tensors and a forward keeps nothing."""

    #: Saved sets kept per region at most (a step whose backward calls failed must not grow).
    MAX_KEPT = 256

    def __init__(self):
        self.active = False
        self.saved: Dict[str, List[Tuple[Any, ...]]] = {}

    def push(self, region: str, tensors: Tuple[Any, ...]) -> None:
        kept = self.saved.setdefault(region, [])
        kept.append(tensors)
        if len(kept) > self.MAX_KEPT:
            del kept[0]

    def take(self, region: str) -> Optional[Tuple[Any, ...]]:
        kept = self.saved.get(region)
        return kept.pop() if kept else None


def _stand_in(meta: Any, device: Any) -> Any:
    """A tensor of ``meta``'s shape and dtype that costs nothing (a broadcast zero): where
    the eager forward does not make what the compiled one saved, its reader's shape holds."""
    if not isinstance(meta, torch.Tensor):
        return None
    return torch.zeros((), dtype=meta.dtype, device=device).expand(meta.shape)


def _filled(item: Dict[str, Any], device: Any) -> torch.Tensor:
    """A tensor laid out as a graph input says, filled: normal values, zeros if integer."""
    tensor = _input_tensor(item, device)
    if tensor.is_floating_point() or tensor.is_complex():
        return tensor.normal_()
    return tensor.zero_()


class GraphOperator(OperatorInterface):
    """``graph::NAME``: one captured graph, compiled with Inductor when first bound. With
    ``eager`` (``--eager-regions``) the region runs as PyTorch runs it uncompiled: its eager
    forward and backward bodies (``spec.graphs``: the forward's saved tensors handed to the
    backward through ``stash``, ``partner`` the forward graph of a backward one's region),
    or, where the capture has none, the graph's own aten ops one by one. Bound to inputs it
    is one call returning the graph's outputs as a tuple; it runs below autograd and has no
    backward pass of its own (the backward graph is a graph of its own)."""

    supports_backward = False

    def __init__(self, name: str, graph: Dict[str, Any], eager: bool = False,
                 partner: Optional[Dict[str, Any]] = None,
                 stash: Optional[RegionStash] = None):
        self.name = name
        self.graph = graph
        self.eager = eager
        self.partner = partner
        self.stash = stash if stash is not None else RegionStash()
        self.module: Optional[torch.fx.GraphModule] = None
        self._compiled: Optional[Callable[[List[Any]], Any]] = None
        self._eager_call: Optional[Callable[..., Any]] = None
        self._saved: Optional[List[Any]] = None  # a backward's generated saved tensors
        #: Milliseconds the latest bind spent compiling (0 where it reused a compiled graph;
        #: None when eager): the run's ``compile.time``; and all binds' together.
        self.compile_ms: Optional[float] = None
        self.compile_total_ms = 0.0
        #: How ``eager`` runs it: "pytorch" (its eager bodies) or "graph" (its own aten ops).
        self.eager_form: Optional[str] = None

    def build(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError(f"{self.name} takes no build arguments")
        device = torch.device(self.device)
        self.module = rebuild(self.graph, device)
        if self.eager:
            self._eager_call = self._eager_plan(device)

    def _built(self) -> torch.fx.GraphModule:
        if self.module is None:
            self.build()
        return self.module

    def _eager_plan(self, device: Any) -> Callable[..., Any]:
        """The call ``--eager-regions`` makes (see the class's doc)."""
        eager = self.graph.get("eager") or {}
        region = str(self.graph.get("region", self.name))
        if self.graph["pass"] != "backward" and isinstance(eager.get("forward"), dict):
            forward = rebuild(eager["forward"], device)
            users = eager["user_outputs"]
            stand_ins = tuple(_stand_in(meta, device)
                              for meta in MetaRun(self.graph).outputs[users:])
            self.eager_form = "pytorch"
            return functools.partial(self._eager_forward, forward, users, stand_ins, region)
        partner = (self.partner or {}).get("eager") or {}
        if self.graph["pass"] == "backward" and isinstance(partner.get("backward"), dict) \
                and isinstance(eager.get("tangents"), list):
            body = partner["backward"]
            tangents = tuple(eager["tangents"])
            self._saved = [body["inputs"][i] for i in range(len(body["inputs"]) - len(tangents))]
            self.eager_form = "pytorch"
            return functools.partial(self._eager_backward, rebuild(body, device), tangents,
                                     region, device)
        self.eager_form = "graph"
        return self._built()

    def _inputs(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Any]:
        if kwargs or len(args) != len(self.graph["inputs"]):
            raise TypeError(f"{self.name} takes its {len(self.graph['inputs'])} inputs "
                            "positionally")
        return list(args)

    def compiled(self) -> Callable[[List[Any]], Any]:
        """The graph compiled for its recorded input layouts (once; ``compile_ms``: what
        this call spent compiling)."""
        self.compile_ms = 0.0
        if self._compiled is None:
            start = time.perf_counter()
            self._compiled = compile_graph(self._built(), self.graph,
                                           torch.device(self.device))
            self.compile_ms = (time.perf_counter() - start) * 1e3
            self.compile_total_ms += self.compile_ms
        return self._compiled

    def bind_forward(self, args: List[Any], kwargs: Dict[str, Any]) -> Callable[[], Any]:
        inputs = self._inputs(args, kwargs)
        if self.eager:
            self._built()
            return functools.partial(self._eager, self._eager_call, *inputs)
        return functools.partial(self._call, self.compiled(), *inputs)

    def bind_eager(self, args: List[Any], kwargs: Dict[str, Any]) -> Callable[[], Any]:
        """The graph's aten ops one by one on these inputs (FLOPs are counted on it)."""
        return functools.partial(self._eager, self._built(), *self._inputs(args, kwargs))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.bind_forward(list(args), kwargs)()

    def step_bound(self) -> None:
        """Bound into a step replay (``runtime.step_replay``): eager forwards keep what they
        save for their backward."""
        self.stash.active = True

    @staticmethod
    def _call(compiled: Callable[[List[Any]], Any], *inputs: Any) -> Tuple[Any, ...]:
        with torch.no_grad():
            return tuple(compiled(list(inputs)))

    @staticmethod
    def _eager(run: Callable[..., Any], *inputs: Any) -> Tuple[Any, ...]:
        with torch.no_grad():
            return tuple(run(*inputs))

    def _eager_forward(self, forward: Callable[..., Any], users: int,
                       stand_ins: Tuple[Any, ...], region: str, *inputs: Any) -> Tuple[Any, ...]:
        outputs = forward(*inputs)
        if self.stash.active:
            self.stash.push(region, tuple(outputs[users:]))
        return tuple(outputs[:users]) + stand_ins

    def _eager_backward(self, backward: Callable[..., Any], tangents: Tuple[int, ...],
                        region: str, device: Any, *inputs: Any) -> Tuple[Any, ...]:
        saved = self.stash.take(region) if self.stash.active else None
        if saved is None:  # isolated, or its forward did not run: tensors of the shapes
            if not isinstance(self._saved, tuple):
                self._saved = tuple(_filled(item, device) for item in self._saved or ())
            saved = self._saved
        return backward(*saved, *(inputs[i] for i in tangents))

    def estimate_build_bytes(self, *args: Any, **kwargs: Any) -> int:
        """The memory guard's hook: the most bytes the graph's intermediate tensors hold at
        once, from a run on meta tensors (its inputs are the config's, counted apart)."""
        return MetaRun(self.graph).peak

    def cleanup(self) -> None:
        super().cleanup()
        self._compiled = self._eager_call = None
        self.module = None


def graph_factory(factory: Callable[[str], Callable[[], Any]], graphs: Dict[str, Any],
                  eager: bool = False) -> Callable[[str], Callable[[], Any]]:
    """An operator factory (``ExecutionContext.operator_factory``) that binds ``graph::NAME``
    to the spec's graph NAME (``eager``: ``--eager-regions``; a backward graph's partner is
    the forward graph of its region, the stash one for the spec) and asks ``factory`` for any
    other name."""
    stash = RegionStash()
    forwards = {graph.get("region"): graph for graph in graphs.values()
                if isinstance(graph, dict) and graph.get("pass") == "forward"}

    def make(name: str) -> Callable[[], Any]:
        graph = graphs.get(graph_name(name) or "")
        if graph is None:
            return factory(name)
        partner = forwards.get(graph.get("region")) if graph.get("pass") == "backward" else None
        return functools.partial(GraphOperator, name, graph, eager, partner, stash)
    return make
